//! Honest checkpoints pass; every cheat of `gpuchain_trainer::cheat` is refused.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gpuchain_trainer::{
    Job, Reason, SpotMode, StateHash, Trainer, TrainerOptions, cheat, file_hash, quality_test,
    spot_check, spot_check_interval, spot_check_tolerant,
};

use crate::common::mlp_job;

const INTERVAL: u64 = 40;

fn run(t: &mut Trainer, until: u64) {
    t.train(until, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
}

/// The accepted parent at step 40 and a trainer resumed from it for the next interval.
fn parent_and_trainer(job: &Arc<Job>) -> (Vec<u8>, Trainer) {
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut t, INTERVAL);
    let parent = t.checkpoint().unwrap().to_bytes().unwrap();
    let next = Trainer::resume(job.clone(), &parent, 1, TrainerOptions::default()).unwrap();
    (parent, next)
}

fn spot_all(job: &Arc<Job>, t: &Trainer, mode: SpotMode) -> gpuchain_trainer::SpotReport {
    let hashes = t.interval_hashes().to_vec();
    spot_check_interval(
        job,
        t.interval_start(),
        &hashes,
        42,
        hashes.len(),
        mode,
        |s| t.serve_state(s),
    )
    .unwrap()
}

#[test]
fn honest_checkpoint_passes_quality_and_spot_checks() {
    let job = mlp_job("honest", 21, 200);
    let (parent, mut t) = parent_and_trainer(&job);
    run(&mut t, 2 * INTERVAL);
    let cand = t.checkpoint().unwrap().to_bytes().unwrap();

    let v = quality_test(&job, &cand, Some(&parent)).unwrap();
    assert!(v.accepted, "{:?}", v.reasons);
    assert!(v.candidate.unwrap().accuracy > 0.6);
    // Its first state is the parent's; its last is the candidate's.
    let parent_hash = gpuchain_trainer::Checkpoint::from_bytes(&parent, &job.device)
        .unwrap()
        .meta
        .state_hash;
    assert_eq!(t.interval_hashes()[0], parent_hash);
    assert_eq!(
        *t.interval_hashes().last().unwrap(),
        t.checkpoint().unwrap().meta.state_hash
    );

    let report = spot_all(&job, &t, SpotMode::Exact);
    assert!(report.accepted, "{:?}", report.results);
    assert_eq!(report.results.len(), INTERVAL as usize);
    // A seeded subset, as a verifier would run it.
    let hashes = t.interval_hashes().to_vec();
    let r = spot_check_interval(&job, INTERVAL, &hashes, 7, 3, SpotMode::Exact, |s| {
        t.serve_state(s)
    })
    .unwrap();
    assert!(r.accepted && r.results.len() == 3);
    assert_eq!(
        r.results.iter().map(|x| x.step).collect::<Vec<_>>(),
        gpuchain_trainer::choose_steps(7, 40, 3)
            .iter()
            .map(|i| INTERVAL + *i as u64)
            .collect::<Vec<_>>()
    );
}

#[test]
fn first_interval_passes_without_a_parent() {
    let job = mlp_job("first", 22, 200);
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut t, INTERVAL);
    let v = quality_test(&job, &t.checkpoint().unwrap().to_bytes().unwrap(), None).unwrap();
    assert!(v.accepted, "{:?}", v.reasons);
}

#[test]
fn junk_weights_are_refused() {
    let job = mlp_job("junk", 23, 200);
    let (parent, mut t) = parent_and_trainer(&job);
    run(&mut t, 2 * INTERVAL);
    let honest = t.checkpoint().unwrap().to_bytes().unwrap();
    let junk = cheat::junk(&job, &honest, 999).unwrap();
    let v = quality_test(&job, &junk, Some(&parent)).unwrap();
    assert!(!v.accepted);
    let acc = v.candidate.unwrap().accuracy;
    assert!(acc < 0.3, "junk accuracy {acc}");
    assert!(
        v.reasons
            .iter()
            .any(|r| matches!(r, Reason::BelowMinAccuracy { .. })),
        "{:?}",
        v.reasons
    );
    assert!(
        v.reasons
            .iter()
            .any(|r| matches!(r, Reason::Regressed { .. })),
        "{:?}",
        v.reasons
    );
    // Its final state is not the committed one either.
    let junk_state = gpuchain_trainer::Checkpoint::from_bytes(&junk, &job.device)
        .unwrap()
        .meta
        .state_hash;
    assert_ne!(junk_state, *t.interval_hashes().last().unwrap());
}

#[test]
fn stale_parent_resubmitted_is_refused() {
    let job = mlp_job("stale", 24, 200);
    let (parent, _) = parent_and_trainer(&job);
    let stale = cheat::stale(&job, &parent, 2 * INTERVAL).unwrap();
    let v = quality_test(&job, &stale, Some(&parent)).unwrap();
    assert!(!v.accepted);
    assert!(v.reasons.contains(&Reason::Stale), "{:?}", v.reasons);
    // Resubmitting the parent file itself makes no progress.
    let v = quality_test(&job, &parent, Some(&parent)).unwrap();
    assert!(
        v.reasons
            .iter()
            .any(|r| matches!(r, Reason::NoProgress { .. })),
        "{:?}",
        v.reasons
    );
}

#[test]
fn lazy_training_is_caught_by_the_spot_check() {
    let job = mlp_job("lazy", 25, 200);
    let (parent, mut t) = parent_and_trainer(&job);
    cheat::lazy(&mut t, INTERVAL, 2).unwrap();
    assert_eq!(t.step_count(), 2 * INTERVAL);
    let cand = t.checkpoint().unwrap().to_bytes().unwrap();
    // Half the steps still train: the quality test alone may pass it.
    let _ = quality_test(&job, &cand, Some(&parent)).unwrap();
    let report = spot_all(&job, &t, SpotMode::Exact);
    assert!(!report.accepted);
    let failed = report.results.iter().filter(|r| !r.matched).count();
    assert_eq!(
        failed,
        INTERVAL as usize / 2,
        "every skipped step fails, every real one passes"
    );
    // Tolerance mode refuses it too.
    let report = spot_all(&job, &t, SpotMode::Tolerance { max_ratio: 1e-2 });
    assert_eq!(
        report.results.iter().filter(|r| !r.matched).count(),
        INTERVAL as usize / 2
    );
}

#[test]
fn wrong_data_order_is_caught_by_the_spot_check() {
    let job = mlp_job("order", 26, 200);
    let (parent, mut t) = parent_and_trainer(&job);
    cheat::wrong_order(&mut t, 12345);
    run(&mut t, 2 * INTERVAL);
    let cand = t.checkpoint().unwrap().to_bytes().unwrap();
    let v = quality_test(&job, &cand, Some(&parent)).unwrap();
    assert!(
        v.accepted,
        "well trained on the wrong order still looks fine: {:?}",
        v.reasons
    );
    let hashes = t.interval_hashes().to_vec();
    let r = spot_check_interval(&job, INTERVAL, &hashes, 3, 2, SpotMode::Exact, |s| {
        t.serve_state(s)
    })
    .unwrap();
    assert!(
        !r.accepted && r.results.iter().all(|x| !x.matched),
        "{:?}",
        r.results
    );
}

#[test]
fn nan_weights_are_refused() {
    let job = mlp_job("nan", 27, 200);
    let (parent, mut t) = parent_and_trainer(&job);
    run(&mut t, INTERVAL + 5);
    let bad = cheat::nan(&job, &t.checkpoint().unwrap().to_bytes().unwrap()).unwrap();
    let v = quality_test(&job, &bad, Some(&parent)).unwrap();
    assert!(!v.accepted);
    assert!(
        matches!(&v.reasons[0], Reason::NonFinite { tensor } if tensor.starts_with("param/")),
        "{:?}",
        v.reasons
    );
}

#[test]
fn a_checkpoint_from_another_job_is_refused() {
    let job = mlp_job("mine", 28, 200);
    let (parent, _) = parent_and_trainer(&job);
    let other = crate::common::job(cheat::other_job(&job.spec));
    let mut o = Trainer::resume(other.clone(), &parent, 1, TrainerOptions::default());
    assert!(o.is_err(), "the other job refuses our parent too");
    o = Trainer::new(other, 0, TrainerOptions::default());
    let mut o = o.unwrap();
    run(&mut o, 2 * INTERVAL);
    let foreign = o.checkpoint().unwrap().to_bytes().unwrap();
    let v = quality_test(&job, &foreign, Some(&parent)).unwrap();
    assert!(!v.accepted);
    assert!(
        matches!(&v.reasons[0], Reason::WrongJob(m) if m.contains("mine-other")),
        "{:?}",
        v.reasons
    );
    // Garbage bytes are a refusal, not an error.
    let v = quality_test(&job, b"garbage", Some(&parent)).unwrap();
    assert!(matches!(&v.reasons[0], Reason::Unreadable(_)));
}

#[test]
fn tolerance_mode_accepts_other_micro_batches_exact_mode_does_not() {
    let job = mlp_job("tolerance", 29, 200);
    let per = job.build_model(0).unwrap().bytes_per_example();
    // The provider accumulates 4 × 16; the verifier replays with 64 at once.
    let opts = TrainerOptions {
        memory_budget: Some(per * 16),
        ..Default::default()
    };
    let mut t = Trainer::new(job.clone(), 0, opts).unwrap();
    assert_eq!(t.plan().micro_batch, 16);
    run(&mut t, 5);
    let h = t.interval_hashes().to_vec();
    let (before, after) = (t.serve_state(3).unwrap(), t.serve_state(4).unwrap());
    let r = spot_check_tolerant(&job, &before, &after, (h[3], h[4]), 1e-2, None).unwrap();
    assert!(r.matched, "{}", r.detail);
    // Exact mode replays with the producer's micro-batch (recorded in the state) and matches.
    assert!(spot_check(&job, &before, h[3], h[4]).unwrap().matched);
    // A full-batch replay is not bit-identical to the accumulated one.
    let b = gpuchain_trainer::Checkpoint::from_bytes(&before, &job.device).unwrap();
    let full = gpuchain_trainer::verify::spot::replay(&job, &b, Some(64), None).unwrap();
    assert_ne!(full.hash().unwrap(), h[4]);
    // A served state that is not the committed one is refused.
    let r = spot_check(&job, &before, StateHash([0; 32]), h[4]).unwrap();
    assert!(!r.matched && r.detail.contains("not the committed"));
    let _ = file_hash(&before);
}

/// A replacement with a quarter of the memory resumes the accepted checkpoint of a provider
/// that trained 64 at once, trains with micro-batches of 16, and an exact spot check of
/// every step of its interval passes: it replays with the micro-batch the replacement's
/// checkpoint records. Replayed with the first provider's split instead, the same step lands
/// elsewhere (accumulation order changes the rounding), which is why the plan is recorded.
#[test]
fn a_smaller_replacement_resumes_and_its_steps_replay_with_its_own_plan() {
    let job = mlp_job("hetero", 31, 200);
    let (parent, _) = parent_and_trainer(&job);
    let need = gpuchain_trainer::MemoryNeed::of(job.build_model(0).unwrap().as_ref());
    let small = TrainerOptions {
        memory: Some(need.state_bytes + 16 * need.bytes_per_example),
        ..Default::default()
    };
    let mut b = Trainer::resume(job.clone(), &parent, 2, small).unwrap();
    assert_eq!((b.plan().micro_batch, b.plan().accumulation), (16, 4));
    run(&mut b, INTERVAL + 4);
    let committed = b.interval_hashes().to_vec();
    let ckpt = b.checkpoint().unwrap();
    assert_eq!(
        ckpt.meta.micro_batch, 16,
        "the plan travels in the checkpoint"
    );
    let report = spot_check_interval(&job, INTERVAL, &committed, 5, 4, SpotMode::Exact, |s| {
        b.serve_state(s)
    })
    .unwrap();
    assert!(report.accepted, "{report:?}");
    assert_eq!(report.results.len(), 4);
    let before =
        gpuchain_trainer::Checkpoint::from_bytes(&b.serve_state(INTERVAL).unwrap(), &job.device)
            .unwrap();
    let as_a = gpuchain_trainer::verify::spot::replay(&job, &before, Some(64), None).unwrap();
    assert_ne!(as_a.hash().unwrap(), committed[1]);
}
