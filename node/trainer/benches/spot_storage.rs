//! Storage a provider keeps per checkpoint interval, and what a verifier replays: the anchor
//! scheme (`gpuchain_protocol::anchors`) against the every-step scheme it replaced. Trains one
//! interval of each model for real, keeping what the node's provider keeps (the anchors after
//! the first: the first is the previous checkpoint's state), and measures the bytes.
//! "Interval total" is the checkpoint plus the states kept for spot checks.
//!
//!     cargo bench -p gpuchain-trainer --profile dev --bench spot_storage
//!
//! `GPUCHAIN_BENCH_MINILM_INTERVAL` (default 12) sets the MiniLM interval: its steps are slow
//! on a CPU, and the ratio does not depend on the interval (three anchors whatever its
//! length). MiniLM is measured when scripts/setup has installed its weights. Exits non-zero
//! when a model keeps more than three checkpoints' bytes an interval.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use candle_core::Device;
use gpuchain_protocol::anchors::{SEGMENTS, anchor_steps};
use gpuchain_trainer::data::fashion_dir;
use gpuchain_trainer::job::load_fashion;
use gpuchain_trainer::model::bert::minilm_dir;
use gpuchain_trainer::{Job, SpotMode, TrainSpec, Trainer, TrainerOptions, spot_check_anchored};

mod text_jobs;

use text_jobs::{Res, minilm_job, tiny_bert_job};

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("bench failed: a model keeps more than {SEGMENTS} checkpoints an interval");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}

fn run() -> Res<bool> {
    println!("# spot-check storage per interval (dev profile, CPU)");
    println!(
        "model | interval | checkpoint B | spot-check states kept B | interval total / checkpoint | before: every-step states B | before: total / checkpoint | replayed steps a sample (max, mean) | 2-sample exact check s"
    );
    let mut ok = true;
    let (train, eval) = load_fashion(&fashion_dir(), 2000)?;
    let cnn = Arc::new(Job::new(
        TrainSpec::fashion_cnn("bench-spot-cnn", 1, 1000),
        train,
        eval,
        None,
        Device::Cpu,
    )?);
    ok &= measure("fashion-cnn", &cnn, 50)?;
    ok &= measure(
        "tiny-bert LoRA (2×32)",
        &tiny_bert_job("bench-spot-tiny")?,
        50,
    )?;
    match minilm_job("bench-spot-minilm")? {
        Some(job) => {
            let interval = std::env::var("GPUCHAIN_BENCH_MINILM_INTERVAL")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(12);
            ok &= measure("MiniLM-L6 LoRA r8", &job, interval)?;
        }
        None => println!(
            "MiniLM-L6 LoRA: skipped, no weights at {} (run scripts/setup)",
            minilm_dir().display()
        ),
    }
    Ok(ok)
}

/// Trains `interval` steps keeping only the anchors, as a provider does, and prints one row.
fn measure(name: &str, job: &Arc<Job>, interval: u64) -> Res<bool> {
    let anchors = anchor_steps(0, interval);
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default())?;
    // The parent state as the verifier rebuilds it (here the spec's initial state).
    let parent = t.snapshot()?;
    t.keep_only(anchors.get(1..).unwrap_or_default());
    t.train(interval, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })?;
    let checkpoint = t.checkpoint()?.to_bytes()?.len() as u64;
    let kept: u64 = t
        .interval_preimages()?
        .iter()
        .map(|(_, b)| b.len() as u64)
        .sum();
    // Every state of a job has the same layout, so the old scheme kept interval + 1 states of
    // exactly this size.
    let one_state = parent.preimage()?.len() as u64;
    let before = (interval + 1) * one_state;
    let replays: Vec<u64> = (1..=interval)
        .map(|s| s - anchors.iter().rev().find(|a| **a < s).copied().unwrap_or(0))
        .collect();
    let max = replays.iter().max().copied().unwrap_or(0);
    let mean = replays.iter().sum::<u64>() as f64 / replays.len().max(1) as f64;
    let hashes = t.interval_hashes().to_vec();
    let started = Instant::now();
    let check = spot_check_anchored(job, 0, &hashes, &anchors, 7, 2, SpotMode::Exact, |s| {
        if s == 0 {
            t.checkpoint_of_state(parent.clone())
        } else {
            t.serve_state(s)
        }
    })?;
    let check_s = started.elapsed().as_secs_f64();
    let ratio = (checkpoint + kept) as f64 / checkpoint as f64;
    println!(
        "{name} | {interval} | {checkpoint} | {kept} | {ratio:.3} | {before} | {:.1} | {max}, {mean:.1} | {check_s:.2} (accepted {})",
        (checkpoint + before) as f64 / checkpoint as f64,
        check.accepted
    );
    Ok(ratio <= SEGMENTS as f64 && check.accepted)
}
