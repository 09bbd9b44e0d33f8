//! A provider and its verifiers run candle's CPU kernels on as many threads as their hosts give
//! them (`CANDLE_NUM_THREADS` and `RAYON_NUM_THREADS`, else every core), and a spot check
//! compares a replayed state's hash with the provider's: the states must not depend on the
//! count. Candle reads it once per process, so each count trains in a child process of this
//! test binary.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use candle_core::Device;
use gpuchain_trainer::data::TextDataset;
use gpuchain_trainer::{BertBase, Job, TrainSpec, Trainer, TrainerOptions};

use crate::bert::{sentiment, sentiment_tokenizer};
use crate::common::job;

/// Set in the child: train and print the hashes.
const CHILD: &str = "GPUCHAIN_TEST_THREADS_CHILD";
const NAME: &str = "threads::state_hashes_do_not_depend_on_the_kernel_thread_count";

/// Large enough that candle splits its kernels across threads: a 128-wide encoder on 16
/// sequences of 32 tokens, and the CNN on its 64-image batches.
fn bert_job() -> Arc<Job> {
    let tok = sentiment_tokenizer();
    let base = BertBase::TinyRandom {
        layers: 2,
        hidden: 128,
        heads: 4,
        intermediate: 256,
        seed: 9,
    };
    let mut spec = TrainSpec::bert_lora("threads-bert", base, 4, 100, 2);
    if let gpuchain_trainer::ModelSpec::BertLora { max_len, .. } = &mut spec.model {
        *max_len = 32;
    }
    let train = TextDataset::tokenize(&sentiment(256, 0), &tok, 32, 2).unwrap();
    let eval = TextDataset::tokenize(&sentiment(32, 1000), &tok, 32, 2).unwrap();
    Arc::new(Job::new(spec, Arc::new(train), Arc::new(eval), None, Device::Cpu).unwrap())
}

fn hashes() -> Vec<String> {
    [
        bert_job(),
        job(TrainSpec::fashion_cnn("threads-cnn", 6, 100)),
    ]
    .into_iter()
    .map(|job| {
        let mut t = Trainer::new(job, 0, TrainerOptions::default()).unwrap();
        t.train(2, &AtomicBool::new(false), |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        format!("{:?}", t.state_hash().unwrap())
    })
    .collect()
}

fn hashes_with(threads: usize) -> Vec<String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env("CANDLE_NUM_THREADS", threads.to_string())
        .env("RAYON_NUM_THREADS", threads.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{threads} threads: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        // libtest writes the test's name on the line the first hash starts.
        .filter_map(|l| l.split_once("state hash: "))
        .map(|(_, h)| h.to_string())
        .collect()
}

#[test]
fn state_hashes_do_not_depend_on_the_kernel_thread_count() {
    if std::env::var_os(CHILD).is_some() {
        for h in hashes() {
            println!("state hash: {h}");
        }
        return;
    }
    let one = hashes_with(1);
    assert_eq!(one.len(), 2, "{one:?}");
    assert_eq!(one, hashes_with(4), "1 thread against 4");
}
