//! State preimages as blobs: a provider publishes each state of its interval as the bytes its
//! state hash hashes, and a verifier spot-checks from those instead of served checkpoints.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use candle_core::{Device, Tensor};
use gpuchain_trainer::data::{Batch, Dataset, Input};
use gpuchain_trainer::{
    Checkpoint, CheckpointMeta, Job, StateHash, TrainSpec, TrainState, Trainer, TrainerOptions,
    cheat, checkpoint_from_preimage, spot_check, spot_check_preimage,
};

use crate::common::mlp_job;

fn run(t: &mut Trainer, until: u64) {
    t.train(
        until,
        &AtomicBool::new(false),
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
}

/// A provider's second interval (epoch 1, resumed from the step-`from` checkpoint), with the
/// producer's micro-batch forced so an exact replay must use the candidate's.
fn resumed(job: &Arc<Job>, from: u64, micro_batch: Option<usize>) -> Trainer {
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut t, from);
    let parent = t.checkpoint().unwrap().to_bytes().unwrap();
    let opts = TrainerOptions {
        micro_batch,
        ..TrainerOptions::default()
    };
    Trainer::resume(job.clone(), &parent, 1, opts).unwrap()
}

fn spot(
    job: &Arc<Job>,
    meta: &CheckpointMeta,
    before: &[u8],
    committed: (StateHash, StateHash),
) -> gpuchain_trainer::SpotResult {
    spot_check_preimage(job, meta, before, committed.0, committed.1).unwrap()
}

#[test]
fn interval_preimages_are_addressed_by_the_committed_hashes() {
    let job = mlp_job("state-blobs", 31, 200);
    let mut t = resumed(&job, 5, Some(16));
    run(&mut t, 11);
    let pre = t.interval_preimages().unwrap();
    let hashes = t.interval_hashes();
    assert_eq!(pre.len(), 7);
    for (i, (h, bytes)) in pre.iter().enumerate() {
        assert_eq!(*h, hashes[i]);
        assert_eq!(StateHash::of_preimage(bytes), hashes[i]);
        let step = t.interval_start() + i as u64;
        assert_eq!(*bytes, t.state_preimage(step).unwrap());
        let state = TrainState::from_preimage(bytes, &job.device).unwrap();
        assert_eq!(state.step, step);
        assert_eq!(state.hash().unwrap(), hashes[i]);
    }
    assert!(t.state_preimage(4).is_err());
    assert!(t.state_preimage(12).is_err());

    // The checkpoint rebuilt from a preimage and the candidate's meta is, byte for byte, the
    // one serve_state serves: same epoch, parent, micro-batch and data-order pass.
    let meta = t.checkpoint().unwrap().meta;
    for (i, (_, bytes)) in pre.iter().enumerate() {
        let step = t.interval_start() + i as u64;
        let rebuilt = checkpoint_from_preimage(&job, &meta, bytes).unwrap();
        assert_eq!(rebuilt.to_bytes().unwrap(), t.serve_state(step).unwrap());
    }
}

#[test]
fn preimages_need_kept_states() {
    let job = mlp_job("state-blobs-off", 32, 200);
    let opts = TrainerOptions {
        keep_states: false,
        ..TrainerOptions::default()
    };
    let t = Trainer::new(job, 0, opts).unwrap();
    let e = t.interval_preimages().unwrap_err();
    assert!(e.to_string().contains("keep_states"), "{e}");
    assert!(t.state_preimage(0).is_err());
}

#[test]
fn honest_steps_pass_and_tampered_commitments_fail() {
    let job = mlp_job("state-blobs-spot", 33, 200);
    let mut t = resumed(&job, 5, Some(16));
    run(&mut t, 10);
    let meta = t.checkpoint().unwrap().meta;
    assert_eq!(meta.micro_batch, 16);
    let pre = t.interval_preimages().unwrap();
    let h: Vec<StateHash> = pre.iter().map(|p| p.0).collect();

    for i in 0..h.len() - 1 {
        let r = spot(&job, &meta, &pre[i].1, (h[i], h[i + 1]));
        assert!(r.matched, "{r:?}");
        assert_eq!(r.step, 5 + i as u64);
    }
    // The same verdict as the served-checkpoint spot check.
    let served = t.serve_state(7).unwrap();
    assert!(spot_check(&job, &served, h[2], h[3]).unwrap().matched);

    // A committed next state the step does not produce.
    let r = spot(&job, &meta, &pre[1].1, (h[1], h[3]));
    assert!(!r.matched && r.detail.contains("replay gives"), "{r:?}");
    let mut flipped = h[2];
    flipped.0[0] ^= 1;
    assert!(!spot(&job, &meta, &pre[1].1, (h[1], flipped)).matched);

    // A blob that is not the committed state.
    let r = spot(&job, &meta, &pre[2].1, (h[1], h[2]));
    assert!(!r.matched && r.detail.contains("hashes to"), "{r:?}");
    let mut truncated = pre[1].1.clone();
    truncated.pop();
    let r = spot(
        &job,
        &meta,
        &truncated,
        (StateHash::of_preimage(&truncated), h[2]),
    );
    assert!(!r.matched && r.detail.contains("unreadable"), "{r:?}");

    // The producer's micro-batch matters for an exact replay: it comes from the candidate.
    let other_micro = CheckpointMeta {
        micro_batch: 64,
        ..meta.clone()
    };
    assert!(!spot(&job, &other_micro, &pre[1].1, (h[1], h[2])).matched);
    // A candidate of another job cannot vouch for these states.
    let other_job = CheckpointMeta {
        job_id: "someone-else".into(),
        ..meta.clone()
    };
    let r = spot(&job, &other_job, &pre[1].1, (h[1], h[2]));
    assert!(!r.matched && r.detail.contains("replay refused"), "{r:?}");
}

#[test]
fn lazy_and_junk_states_fail() {
    let job = mlp_job("state-blobs-lazy", 34, 200);
    let mut t = resumed(&job, 5, None);
    // Steps 0, 2, 4 of the interval are trained; 1, 3, 5 only advance the counters.
    cheat::lazy(&mut t, 6, 2).unwrap();
    let meta = t.checkpoint().unwrap().meta;
    let pre = t.interval_preimages().unwrap();
    let h: Vec<StateHash> = pre.iter().map(|p| p.0).collect();
    for i in 0..h.len() - 1 {
        let r = spot(&job, &meta, &pre[i].1, (h[i], h[i + 1]));
        assert_eq!(r.matched, i % 2 == 0, "transition {i}: {r:?}");
    }

    // Junk weights committed as the last state: the honest replay does not reach them.
    let last = t.checkpoint().unwrap().to_bytes().unwrap();
    let junk = cheat::junk(&job, &last, 999).unwrap();
    let junk_state = Checkpoint::from_bytes(&junk, &job.device).unwrap().state;
    let junk_pre = junk_state.preimage().unwrap();
    let junk_hash = StateHash::of_preimage(&junk_pre);
    let r = spot(&job, &meta, &pre[4].1, (h[4], junk_hash));
    assert!(!r.matched, "{r:?}");
    // Nor does a replay from junk reach the honest next state.
    let r = spot(&job, &meta, &junk_pre, (junk_hash, h[2]));
    assert!(!r.matched, "{r:?}");
}

/// A few synthetic images: enough for the data order to wrap every couple of steps.
struct Tiny(usize);

impl Dataset for Tiny {
    fn len(&self) -> usize {
        self.0
    }
    fn num_classes(&self) -> usize {
        10
    }
    fn batch(&self, indices: &[usize], device: &Device) -> gpuchain_trainer::Result<Batch> {
        let pix: Vec<f32> = indices
            .iter()
            .flat_map(|&i| (0..784).map(move |p| ((i * 31 + p) % 17) as f32 / 17.0))
            .collect();
        let labels: Vec<u32> = indices.iter().map(|&i| (i % 10) as u32).collect();
        Ok(Batch {
            input: Input::Images(Tensor::from_vec(pix, (indices.len(), 1, 28, 28), device)?),
            labels: Tensor::from_vec(labels, indices.len(), device)?,
        })
    }
}

#[test]
fn rebuilt_checkpoints_record_the_trainers_data_pass() {
    // 100 examples, batch 64: the cursor enters a new pass every one or two steps, so a
    // wrong rng_pass would change the rebuilt checkpoint's bytes.
    let job = Arc::new(
        Job::new(
            TrainSpec::mlp("state-blobs-pass", 35, 20),
            Arc::new(Tiny(100)),
            Arc::new(Tiny(20)),
            None,
            Device::Cpu,
        )
        .unwrap(),
    );
    let mut t = Trainer::new(job.clone(), 3, TrainerOptions::default()).unwrap();
    run(&mut t, 5);
    let meta = t.checkpoint().unwrap().meta;
    assert!(meta.rng_pass >= 3);
    let pre = t.interval_preimages().unwrap();
    for (i, (h, bytes)) in pre.iter().enumerate() {
        let rebuilt = checkpoint_from_preimage(&job, &meta, bytes).unwrap();
        assert_eq!(
            rebuilt.to_bytes().unwrap(),
            t.serve_state(i as u64).unwrap()
        );
        if i + 1 < pre.len() {
            assert!(spot(&job, &meta, bytes, (*h, pre[i + 1].0)).matched);
        }
    }
}
