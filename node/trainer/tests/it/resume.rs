use std::sync::atomic::AtomicBool;

use gpuchain_trainer::{Checkpoint, TrainSpec, Trainer, TrainerOptions, file_hash};

use crate::common::{job, mlp_job};

fn run(t: &mut Trainer, until: u64) {
    t.train(until, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
}

#[test]
fn resume_is_bit_exact_mlp() {
    let job = mlp_job("resume", 11, 60);
    let mut straight = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut straight, 40);

    let mut first = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut first, 20);
    let bytes = first.checkpoint().unwrap().to_bytes().unwrap();
    let mut second = Trainer::resume(job, &bytes, 1, TrainerOptions::default()).unwrap();
    assert_eq!(second.step_count(), 20);
    run(&mut second, 40);

    // Every state of 20..=40 agrees, not just the last.
    assert_eq!(second.interval_hashes(), &straight.interval_hashes()[20..]);
    assert_eq!(second.state_hash().unwrap(), straight.state_hash().unwrap());
    // The resumed trainer names the file it came from as parent.
    assert_eq!(
        second.checkpoint().unwrap().meta.parent,
        Some(file_hash(&bytes))
    );
}

#[test]
fn resume_is_bit_exact_fashion_cnn() {
    let job = job(TrainSpec::fashion_cnn("cnn-resume", 5, 400));
    let mut straight = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut straight, 6);
    let mut first = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut first, 3);
    let bytes = first.checkpoint().unwrap().to_bytes().unwrap();
    let mut second = Trainer::resume(job, &bytes, 0, TrainerOptions::default()).unwrap();
    run(&mut second, 6);
    assert_eq!(second.state_hash().unwrap(), straight.state_hash().unwrap());
}

#[test]
fn checkpoint_bytes_are_deterministic_and_round_trip() {
    let job = mlp_job("bytes", 2, 10);
    let mk = || {
        let mut t = Trainer::new(job.clone(), 3, TrainerOptions::default()).unwrap();
        run(&mut t, 2);
        t.checkpoint().unwrap().to_bytes().unwrap()
    };
    let a = mk();
    assert_eq!(a, mk(), "same state, same bytes");
    let c = Checkpoint::from_bytes(&a, &candle_core::Device::Cpu).unwrap();
    assert_eq!(
        (
            c.meta.step,
            c.meta.epoch,
            c.meta.data_cursor,
            c.meta.micro_batch
        ),
        (2, 3, 128, 64)
    );
    assert_eq!(c.meta.job_id, "bytes");
    assert_eq!(
        c.to_bytes().unwrap(),
        a,
        "decode then encode gives the same file"
    );
    // The safetensors crate reads our files.
    let st = safetensors::SafeTensors::deserialize(&a).unwrap();
    assert_eq!(st.len(), 12);
}

#[test]
fn altered_or_foreign_checkpoints_are_refused() {
    let job = mlp_job("refuse", 2, 10);
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    run(&mut t, 1);
    let bytes = t.checkpoint().unwrap().to_bytes().unwrap();

    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let err = Trainer::resume(job.clone(), &flipped, 0, TrainerOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("altered or is corrupt"), "{err}");

    assert!(
        Trainer::resume(
            job.clone(),
            b"not a checkpoint",
            0,
            TrainerOptions::default()
        )
        .is_err()
    );

    let other = mlp_job("someone-else", 2, 10);
    let err = Trainer::resume(other, &bytes, 0, TrainerOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("belongs to job \"refuse\""), "{err}");

    let mut spec = TrainSpec::mlp("refuse", 2, 10);
    spec.model = gpuchain_trainer::ModelSpec::Mlp { hidden: 64 };
    let err = Trainer::resume(
        crate::common::job(spec.clone()),
        &bytes,
        0,
        TrainerOptions::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("different spec"), "{err}");

    // Shape check, independent of the fingerprint.
    let c = Checkpoint::from_bytes(&bytes, &candle_core::Device::Cpu).unwrap();
    let mut shapes = job.param_shapes().unwrap();
    shapes.insert("fc1.weight".into(), vec![64, 784]);
    let err = c.check_job(&job.spec, &shapes).unwrap_err().to_string();
    assert!(
        err.contains("fc1.weight") && err.contains("[64, 784]"),
        "{err}"
    );
}

#[test]
fn served_states_are_the_committed_ones() {
    let job = mlp_job("serve", 9, 20);
    let mut t = Trainer::new(job, 0, TrainerOptions::default()).unwrap();
    run(&mut t, 5);
    let bytes = t.checkpoint().unwrap().to_bytes().unwrap();
    t.start_interval(Some(file_hash(&bytes))).unwrap();
    run(&mut t, 9);
    assert_eq!(t.interval_start(), 5);
    assert_eq!(t.interval_hashes().len(), 5);
    for step in 5..=9u64 {
        let s = Checkpoint::from_bytes(&t.serve_state(step).unwrap(), &candle_core::Device::Cpu)
            .unwrap();
        assert_eq!(s.meta.step, step);
        assert_eq!(s.meta.state_hash, t.interval_hashes()[(step - 5) as usize]);
    }
    assert!(t.serve_state(4).is_err());
    assert!(t.serve_state(10).is_err());
}
