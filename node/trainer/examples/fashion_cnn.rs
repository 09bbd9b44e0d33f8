//! Trains fashion-cnn (or the MLP) on Fashion-MNIST and prints held-out accuracy.
//!
//!     cargo run -p gpuchain-trainer --example fashion_cnn -- [--steps 400] [--seeds 1,2,3] [--model cnn|mlp]
//!
//! Reads Fashion-MNIST from GPUCHAIN_FASHION_MNIST_DIR or Debian's dataset-fashion-mnist.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use gpuchain_trainer::data::fashion_dir;
use gpuchain_trainer::job::load_fashion;
use gpuchain_trainer::{DeviceChoice, Job, TrainSpec, Trainer, TrainerOptions};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut steps = 400u64;
    let mut seeds = vec![1u64, 2, 3];
    let mut model = "cnn".to_string();
    let mut device = "cpu".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--steps" => steps = val()?.parse()?,
            "--seeds" => {
                seeds = val()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--model" => model = val()?,
            "--device" => device = val()?,
            _ => return Err(format!("unknown argument {a}; see the file's header").into()),
        }
    }
    let dev = device.parse::<DeviceChoice>()?.open()?;
    let t0 = Instant::now();
    let (train, eval) = load_fashion(&fashion_dir(), 2000)?;
    println!(
        "Fashion-MNIST loaded in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let mut accs = Vec::new();
    for seed in seeds {
        let spec = match model.as_str() {
            "cnn" => TrainSpec::fashion_cnn(format!("demo-{seed}"), seed, steps),
            "mlp" => TrainSpec::mlp(format!("demo-{seed}"), seed, steps),
            other => return Err(format!("--model {other}: expected cnn or mlp").into()),
        };
        let job = Arc::new(Job::new(
            spec,
            train.clone(),
            eval.clone(),
            None,
            dev.clone(),
        )?);
        let mut t = Trainer::new(
            job,
            0,
            TrainerOptions {
                keep_states: false,
                ..Default::default()
            },
        )?;
        let start = Instant::now();
        let mut train_s = 0.0;
        let mut last_loss = 0.0;
        for target in (100..=steps).step_by(100).chain(std::iter::once(steps)) {
            if target <= t.step_count() {
                continue;
            }
            let s0 = Instant::now();
            t.train(target, &AtomicBool::new(false), |r| {
                last_loss = r.loss;
                std::ops::ControlFlow::Continue(())
            })?;
            train_s += s0.elapsed().as_secs_f64();
            let e0 = Instant::now();
            let r = t.evaluate()?;
            println!(
                "seed {seed} step {target:4}: train loss {last_loss:.3}, test accuracy {:.2} %, test loss {:.3} (eval {:.2} s)",
                r.accuracy * 100.0,
                r.loss,
                e0.elapsed().as_secs_f64()
            );
            if target == steps {
                accs.push(r.accuracy);
            }
        }
        println!(
            "seed {seed}: {steps} steps in {train_s:.1} s ({:.1} ms/step), total {:.1} s",
            train_s * 1000.0 / steps as f64,
            start.elapsed().as_secs_f64()
        );
    }
    let min = accs.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{model} accuracy at step {steps} on 2,000 test images: {} (min {:.2} %)",
        accs.iter()
            .map(|a| format!("{:.2} %", a * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        min * 100.0
    );
    Ok(())
}
