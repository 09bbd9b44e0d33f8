use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

use gpuchain_trainer::{
    DeviceChoice, ModelSpec, Stop, Trainer, TrainerError, TrainerOptions, memory_need,
    plan_for_memory, plan_micro_batch,
};

use crate::common::mlp_job;

#[test]
fn same_seed_same_states_other_seed_other_states() {
    let hashes = |seed| {
        let mut t = Trainer::new(mlp_job("det", seed, 10), 0, TrainerOptions::default()).unwrap();
        (0..5)
            .map(|_| t.step().unwrap().state_hash)
            .collect::<Vec<_>>()
    };
    let a = hashes(7);
    assert_eq!(a, hashes(7));
    let b = hashes(8);
    assert!(a.iter().zip(&b).all(|(x, y)| x != y));
}

#[test]
fn mlp_learns_fashion_mnist() {
    let job = mlp_job("mlp-quality", 1, 300);
    let mut t = Trainer::new(
        job,
        0,
        TrainerOptions {
            keep_states: false,
            ..Default::default()
        },
    )
    .unwrap();
    let before = t.evaluate().unwrap();
    let mut losses = Vec::new();
    let stop = t
        .train(300, &AtomicBool::new(false), |r| {
            losses.push(r.loss);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(stop, Stop::Reached);
    let after = t.evaluate().unwrap();
    assert!(
        before.accuracy < 0.3,
        "untrained accuracy {}",
        before.accuracy
    );
    assert!(
        after.accuracy > 0.80,
        "accuracy after 300 steps: {}",
        after.accuracy
    );
    assert!(after.loss < before.loss);
    assert_eq!(after.examples, 2000);
    let first: f32 = losses[..20].iter().sum::<f32>() / 20.0;
    let last: f32 = losses[280..].iter().sum::<f32>() / 20.0;
    assert!(last < first * 0.6, "loss {first} → {last}");
    // The job is done: one more step is an error, not a panic.
    assert!(t.step().is_err());
}

#[test]
fn cancel_flag_and_callback_stop_between_steps() {
    let job = mlp_job("stop", 3, 100);
    let mut t = Trainer::new(job, 0, TrainerOptions::default()).unwrap();
    let cancel = AtomicBool::new(false);
    let stop = t
        .train(100, &cancel, |r| {
            if r.step == 3 {
                cancel.store(true, Ordering::Relaxed);
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!((stop, t.step_count()), (Stop::Cancelled, 3));
    let stop = t
        .train(100, &AtomicBool::new(false), |r| {
            if r.step == 5 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!((stop, t.step_count()), (Stop::CallbackBreak, 5));
    assert_eq!(t.interval_hashes().len(), 6);
}

#[test]
fn micro_batch_follows_the_memory_budget() {
    let p = plan_micro_batch(64, 1000, Some(20_000)).unwrap();
    assert_eq!((p.micro_batch, p.accumulation), (16, 4));
    assert_eq!(plan_micro_batch(64, 1000, None).unwrap().micro_batch, 64);
    assert_eq!(
        plan_micro_batch(48, 1000, Some(40_000))
            .unwrap()
            .micro_batch,
        24
    );
    assert!(plan_micro_batch(64, 1000, Some(999)).is_err());

    let job = mlp_job("accum", 4, 10);
    let per = job.build_model(0).unwrap().bytes_per_example();
    let small = TrainerOptions {
        memory_budget: Some(per * 20),
        ..Default::default()
    };
    let mut acc = Trainer::new(job.clone(), 0, small).unwrap();
    assert_eq!((acc.plan().micro_batch, acc.plan().accumulation), (16, 4));
    let mut full = Trainer::new(job, 0, TrainerOptions::default()).unwrap();
    for _ in 0..3 {
        let (a, f) = (acc.step().unwrap(), full.step().unwrap());
        // Same effective batch: the same loss up to float rounding.
        assert!((a.loss - f.loss).abs() < 1e-4, "{} vs {}", a.loss, f.loss);
    }
    let (a, f) = (acc.snapshot().unwrap(), full.snapshot().unwrap());
    for (name, t) in &a.params {
        let d = (t - &f.params[name])
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d < 1e-4, "{name} differs by {d}");
    }
}

#[test]
fn bad_micro_batch_and_spec_are_errors() {
    let job = mlp_job("bad", 1, 10);
    let err = Trainer::new(
        job,
        0,
        TrainerOptions {
            micro_batch: Some(7),
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("micro_batch"), "{err}");
    let mut spec = gpuchain_trainer::TrainSpec::mlp("bad", 1, 10);
    spec.effective_batch = 0;
    assert!(
        spec.validate()
            .unwrap_err()
            .to_string()
            .contains("effective_batch")
    );
}

#[test]
fn device_choice_parses() {
    assert_eq!("cpu".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
    assert_eq!("auto".parse::<DeviceChoice>().unwrap(), DeviceChoice::Auto);
    assert_eq!(
        "cuda:1".parse::<DeviceChoice>().unwrap(),
        DeviceChoice::Cuda(1)
    );
    assert!("gpu".parse::<DeviceChoice>().is_err());
    assert!(DeviceChoice::Cpu.open().unwrap().is_cpu());
    #[cfg(not(feature = "cuda"))]
    {
        assert!(DeviceChoice::Auto.open().unwrap().is_cpu());
        let err = DeviceChoice::Cuda(0).open().unwrap_err().to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }
}

/// What the node's providers of different sizes get for the fashion CNN at effective batch
/// 32: the plan follows the memory offered once the model's state is out of it, and a
/// provider that cannot hold the state and one example gets an error with the figures.
#[test]
fn memory_offered_decides_the_plan_and_who_cannot_train() {
    let need = memory_need(&ModelSpec::FashionCnn, 4).unwrap().unwrap();
    // 79,242 weights × 4 bytes × 4 copies; ~336 KiB of activations an example.
    assert_eq!(need.state_bytes, 4 * 4 * 79_242);
    assert_eq!(need.bytes_per_example, 344_064);
    let plan = |mib: u64| plan_for_memory(32, need, mib << 20);
    let a = plan(16).unwrap();
    assert_eq!((a.micro_batch, a.accumulation), (32, 1));
    let b = plan(4).unwrap();
    assert_eq!((b.micro_batch, b.accumulation), (8, 4));
    assert_eq!(plan(2).unwrap().micro_batch, 2);
    // Exactly the minimum trains one example at a time; a byte less does not.
    let one = plan_for_memory(32, need, need.minimum()).unwrap();
    assert_eq!((one.micro_batch, one.accumulation), (1, 32));
    let e = plan_for_memory(32, need, need.minimum() - 1).unwrap_err();
    assert!(matches!(e, TrainerError::DoesNotFit { .. }), "{e}");
    let e = plan(1).unwrap_err().to_string();
    assert!(
        e.contains("1.00 MiB cannot train") && e.contains("1.21 MiB") && e.contains("1.54 MiB"),
        "{e}"
    );
    // A pretrained encoder's size is in its weights: not known from the spec alone.
    let pretrained = ModelSpec::BertLora {
        base: gpuchain_trainer::BertBase::Pretrained { name: "x".into() },
        rank: 4,
        alpha: 8.0,
        targets: gpuchain_trainer::LoraTarget::DEFAULT.to_vec(),
        num_classes: 4,
        max_len: 16,
    };
    assert_eq!(memory_need(&pretrained, 4).unwrap(), None);
}

/// The trainer takes the memory offered and plans from it; both budgets at once are refused.
#[test]
fn trainer_plans_from_the_memory_offered() {
    let job = mlp_job("memory", 3, 10);
    let need = gpuchain_trainer::MemoryNeed::of(job.build_model(0).unwrap().as_ref());
    let opts = |memory, memory_budget| TrainerOptions {
        memory,
        memory_budget,
        ..Default::default()
    };
    let t = Trainer::new(
        job.clone(),
        0,
        opts(Some(need.state_bytes + 16 * need.bytes_per_example), None),
    )
    .unwrap();
    assert_eq!((t.plan().micro_batch, t.plan().accumulation), (16, 4));
    let e = Trainer::new(job.clone(), 0, opts(Some(need.state_bytes), None))
        .err()
        .unwrap();
    assert!(matches!(e, TrainerError::DoesNotFit { .. }), "{e}");
    let e = Trainer::new(job, 0, opts(Some(1 << 30), Some(1 << 30)))
        .err()
        .unwrap();
    assert!(e.to_string().contains("not both"), "{e}");
}
