//! Anchored spot checks: a provider keeps only the protocol's anchor states of an interval
//! (`gpuchain_protocol::anchors`), and a verifier replays from the nearest one before its
//! sample, checking every committed hash on the way. Real training, real state preimages.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gpuchain_protocol::anchors::anchor_steps;
use gpuchain_trainer::{
    Job, SpotMode, SpotReport, StateHash, Trainer, TrainerOptions, cheat, file_hash,
    spot_check_anchored, spot_check_from_anchor,
};

use crate::common::mlp_job;

/// The interval under test: 30 steps, so the rule's anchors are 12, 22 and 32.
const START: u64 = 12;
const END: u64 = 42;

fn run(t: &mut Trainer, until: u64) {
    t.train(
        until,
        &AtomicBool::new(false),
        |_| ControlFlow::Continue(()),
    )
    .unwrap();
}

/// A provider at the start of the interval, keeping only its anchors, as the node's does.
fn provider(job: &Arc<Job>, opts: TrainerOptions) -> Trainer {
    let mut t = Trainer::new(job.clone(), 0, opts).unwrap();
    run(&mut t, START);
    let parent = t.checkpoint().unwrap().to_bytes().unwrap();
    t.start_interval(Some(file_hash(&parent))).unwrap();
    t.keep_only(&anchor_steps(START, END));
    t
}

/// Every transition checked, with the steps the verifier asked the provider for.
fn check_all(
    job: &Arc<Job>,
    t: &Trainer,
    mode: SpotMode,
    serve: impl Fn(u64) -> gpuchain_trainer::Result<Vec<u8>>,
) -> (SpotReport, Vec<u64>) {
    let asked = RefCell::new(Vec::new());
    let hashes = t.interval_hashes().to_vec();
    let report = spot_check_anchored(
        job,
        START,
        &hashes,
        &anchor_steps(START, END),
        5,
        hashes.len(),
        mode,
        |s| {
            asked.borrow_mut().push(s);
            serve(s)
        },
    )
    .unwrap();
    (report, asked.into_inner())
}

fn failed_steps(r: &SpotReport) -> Vec<u64> {
    r.results
        .iter()
        .filter(|x| !x.matched)
        .map(|x| x.step)
        .collect()
}

#[test]
fn a_provider_keeps_only_the_anchors_and_every_transition_replays_from_one() {
    let job = mlp_job("anchors-honest", 41, 200);
    let mut t = provider(&job, TrainerOptions::default());
    run(&mut t, END);
    let anchors = anchor_steps(START, END);
    assert_eq!(anchors, vec![12, 22, 32]);
    assert_eq!(t.kept_steps(), anchors, "no state but the anchors is kept");
    assert!(
        t.serve_state(15).is_err(),
        "a non-anchor state is not served"
    );

    // The blobs a provider publishes: the anchors, addressed by their committed hashes, and
    // within three checkpoints' bytes.
    let hashes = t.interval_hashes().to_vec();
    let pre = t.interval_preimages().unwrap();
    assert_eq!(pre.len(), 3);
    for ((h, bytes), a) in pre.iter().zip(&anchors) {
        assert_eq!(*h, hashes[(a - START) as usize]);
        assert_eq!(StateHash::of_preimage(bytes), *h);
    }
    let kept: usize = pre.iter().map(|(_, b)| b.len()).sum();
    let checkpoint = t.checkpoint().unwrap().to_bytes().unwrap().len();
    assert!(kept <= 3 * checkpoint, "{kept} > 3 × {checkpoint}");

    let (report, asked) = check_all(&job, &t, SpotMode::Exact, |s| t.serve_state(s));
    assert!(report.accepted, "{:?}", report.results);
    assert_eq!(report.results.len(), (END - START) as usize);
    assert!(
        asked.iter().all(|s| anchors.contains(s)),
        "the verifier asks only for anchors: {asked:?}"
    );

    // From a preimage blob, as the node's runner does: anchor 22, replay through 27.
    let meta = t.checkpoint().unwrap().meta;
    let anchor = t.state_preimage(22).unwrap();
    let r = spot_check_from_anchor(&job, &meta, &anchor, &hashes[10..=15]).unwrap();
    assert!(r.matched, "{}", r.detail);
    assert_eq!(r.step, 26, "reported as the sampled transition 26 → 27");
}

#[test]
fn a_faked_step_between_the_anchor_and_the_sample_is_caught() {
    let job = mlp_job("anchors-lazy", 42, 200);
    let mut t = provider(&job, TrainerOptions::default());
    run(&mut t, 25);
    // Step 25 → 26 is skipped, every other one trained honestly from the committed states.
    cheat::lazy(&mut t, 1, 0).unwrap();
    run(&mut t, END);
    let (report, _) = check_all(&job, &t, SpotMode::Exact, |s| t.serve_state(s));
    assert!(!report.accepted);
    // Every sample of the segment 22..32 at or after the fake is refused, even 28 → 29,
    // itself an honest step from its committed state, which a one-step replay would pass;
    // the samples before the fake and the segment after anchor 32 replay cleanly.
    assert_eq!(failed_steps(&report), (25..32).collect::<Vec<_>>());

    // Tolerance mode compares at the segment's end: the whole segment is refused.
    let (report, _) = check_all(&job, &t, SpotMode::Tolerance { max_ratio: 1e-2 }, |s| {
        t.serve_state(s)
    });
    assert_eq!(failed_steps(&report), (22..32).collect::<Vec<_>>());
}

#[test]
fn tolerance_mode_replays_whole_segments_across_micro_batches() {
    let job = mlp_job("anchors-tolerance", 43, 200);
    let per = job.build_model(0).unwrap().bytes_per_example();
    // The provider accumulates 4 × 16; the verifier replays with 64 at once.
    let opts = TrainerOptions {
        memory_budget: Some(per * 16),
        ..Default::default()
    };
    let mut t = provider(&job, opts);
    assert_eq!(t.plan().micro_batch, 16);
    run(&mut t, END);
    let (report, asked) = check_all(&job, &t, SpotMode::Tolerance { max_ratio: 1e-2 }, |s| {
        t.serve_state(s)
    });
    assert!(report.accepted, "{:?}", report.results);
    // The anchors and the checkpoint itself, nothing else.
    assert!(
        asked.iter().all(|s| [12, 22, 32, END].contains(s)),
        "{asked:?}"
    );
}

#[test]
fn a_wrong_anchor_is_refused() {
    let job = mlp_job("anchors-wrong", 44, 200);
    let mut t = provider(&job, TrainerOptions::default());
    run(&mut t, END);
    let hashes = t.interval_hashes().to_vec();
    let meta = t.checkpoint().unwrap().meta;
    // A genuine state of this very interval, but not the anchor the replay must start from.
    let other = t.state_preimage(12).unwrap();
    let r = spot_check_from_anchor(&job, &meta, &other, &hashes[10..=15]).unwrap();
    assert!(
        !r.matched && r.detail.contains("not the committed"),
        "{}",
        r.detail
    );
    // Damaged bytes are a refusal, not an error.
    let r = spot_check_from_anchor(&job, &meta, b"junk", &hashes[10..=15]).unwrap();
    assert!(!r.matched);
    // A provider serving anchor 12 when asked for 22 fails every sample of that segment.
    let (report, _) = check_all(&job, &t, SpotMode::Exact, |s| {
        t.serve_state(if s == 22 { 12 } else { s })
    });
    assert_eq!(failed_steps(&report), (22..32).collect::<Vec<_>>());
}

#[test]
fn an_anchor_the_provider_did_not_keep_fails_the_check() {
    let job = mlp_job("anchors-missing", 45, 200);
    let mut t = provider(&job, TrainerOptions::default());
    run(&mut t, END);
    let (report, _) = check_all(&job, &t, SpotMode::Exact, |s| {
        if s == 32 {
            Err(gpuchain_trainer::TrainerError::Checkpoint(
                "not kept".into(),
            ))
        } else {
            t.serve_state(s)
        }
    });
    assert!(
        !report.accepted,
        "a provider that cannot serve an anchor is not paid"
    );
    assert_eq!(failed_steps(&report), (32..42).collect::<Vec<_>>());
    assert!(
        report
            .results
            .iter()
            .filter(|r| !r.matched)
            .all(|r| r.detail.contains("not served")),
        "{:?}",
        report.results
    );
}
