//! Figures, not timed tests: steps/s per model, our loop against a bare candle loop on the
//! same CNN, and verification time as a share of an interval's training time.
//!
//!     cargo bench -p gpuchain-trainer --profile dev
//!
//! MiniLM+LoRA is measured when scripts/setup has installed its weights.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use candle_core::{DType, Device};
use candle_nn::{Conv2dConfig, Module, Optimizer, VarBuilder, VarMap};
use gpuchain_trainer::data::{DataOrder, Dataset, Input, fashion_dir};
use gpuchain_trainer::job::load_fashion;
use gpuchain_trainer::model::bert::minilm_dir;
use gpuchain_trainer::verify::quality::evaluate;
use gpuchain_trainer::verify::spot::{SpotMode, spot_check_interval};
use gpuchain_trainer::{Job, TrainSpec, Trainer, TrainerOptions, quality_test_cached};

mod text_jobs;

use text_jobs::{Res, minilm_job, tiny_bert_job};

fn main() {
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

fn go(t: &mut Trainer, until: u64) -> Res<()> {
    t.train(until, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })?;
    Ok(())
}

fn steps_per_s(job: Arc<Job>, warmup: u64, steps: u64) -> Res<f64> {
    let mut t = Trainer::new(job, 0, TrainerOptions::default())?;
    go(&mut t, warmup)?;
    let s = Instant::now();
    go(&mut t, warmup + steps)?;
    Ok(steps as f64 / s.elapsed().as_secs_f64())
}

fn run() -> Res<()> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("# gpuchain-trainer figures ({threads} CPU threads, dev profile)");
    let (train, eval) = load_fashion(&fashion_dir(), 2000)?;
    let fashion = |spec: TrainSpec| -> Res<Arc<Job>> {
        Ok(Arc::new(Job::new(
            spec,
            train.clone(),
            eval.clone(),
            None,
            Device::Cpu,
        )?))
    };

    // 1. Steps per second.
    let cnn = fashion(TrainSpec::fashion_cnn("bench-cnn", 1, 1000))?;
    let mlp = fashion(TrainSpec::mlp("bench-mlp", 1, 1000))?;
    println!(
        "mlp (784-128-10, batch 64):        {:7.1} steps/s",
        steps_per_s(mlp, 5, 200)?
    );
    println!(
        "fashion-cnn (batch 64):            {:7.1} steps/s",
        steps_per_s(cnn.clone(), 3, 40)?
    );
    let tiny = tiny_bert_job("bench-tiny")?;
    println!(
        "tiny-bert LoRA (2×32, 16×32 tok):  {:7.1} steps/s",
        steps_per_s(tiny, 3, 40)?
    );
    match minilm_job("bench-minilm")? {
        Some(job) => println!(
            "MiniLM-L6 LoRA r8 (16×64 tok):     {:7.3} steps/s",
            steps_per_s(job, 1, 3)?
        ),
        None => println!(
            "MiniLM-L6 LoRA: skipped, no weights at {} (run scripts/setup)",
            minilm_dir().display()
        ),
    }

    // 2. Our loop (state hash + kept state every step) against a bare candle loop. Short
    // alternating rounds and the median of the per-round ratios, because the machine is
    // shared and its load drifts over a run.
    let rounds = 12;
    let per = 4u64;
    let mut ours = Trainer::new(cnn.clone(), 0, TrainerOptions::default())?;
    let mut bare = BareCnn::new(cnn.train.len())?;
    go(&mut ours, 3)?;
    bare.steps(cnn.train.as_ref(), 3)?;
    let (mut t_ours, mut t_bare, mut ratios) = (0.0, 0.0, Vec::new());
    for r in 0..rounds {
        let s = Instant::now();
        go(&mut ours, 3 + (r + 1) * per)?;
        let o = s.elapsed().as_secs_f64();
        let s = Instant::now();
        bare.steps(cnn.train.as_ref(), per)?;
        let b = s.elapsed().as_secs_f64();
        t_ours += o;
        t_bare += b;
        ratios.push(b / o);
    }
    ratios.sort_by(f64::total_cmp);
    let n = (rounds * per) as f64;
    println!(
        "fashion-cnn ours {:.1} ms/step, bare candle {:.1} ms/step: throughput ratio ours/bare = {:.3} (median of {rounds} paired rounds; overall {:.3})",
        t_ours * 1000.0 / n,
        t_bare * 1000.0 / n,
        ratios[rounds as usize / 2],
        t_bare / t_ours
    );

    // 3. Verification share of an interval's training time.
    for interval in [100u64, 200] {
        let mut t = Trainer::new(cnn.clone(), 0, TrainerOptions::default())?;
        go(&mut t, 20)?;
        let parent = t.checkpoint()?.to_bytes()?;
        let mut p = Trainer::resume(cnn.clone(), &parent, 1, TrainerOptions::default())?;
        let parent_eval = p.evaluate()?;
        let s = Instant::now();
        go(&mut p, 20 + interval)?;
        let train_s = s.elapsed().as_secs_f64();
        let cand = p.checkpoint()?.to_bytes()?;
        let s = Instant::now();
        let v = quality_test_cached(&cnn, &cand, Some(&parent), Some(parent_eval))?;
        let q_s = s.elapsed().as_secs_f64();
        let hashes = p.interval_hashes().to_vec();
        let s = Instant::now();
        let spot = spot_check_interval(&cnn, 20, &hashes, 7, 3, SpotMode::Exact, |k| {
            p.serve_state(k)
        })?;
        let spot_s = s.elapsed().as_secs_f64();
        let share = (q_s + spot_s) / train_s * 100.0;
        println!(
            "fashion-cnn interval {interval}: train {train_s:.1} s; quality test {q_s:.2} s (accepted {}), 3-step spot check {spot_s:.2} s (accepted {}): verification = {share:.1} % of training",
            v.accepted, spot.accepted
        );
    }
    let s = Instant::now();
    let m = cnn.build_model(1)?;
    let r = evaluate(m.as_ref(), cnn.eval.as_ref(), 2000, &Device::Cpu)?;
    println!(
        "eval of 2,000 test images: {:.2} s (untrained accuracy {:.1} %)",
        s.elapsed().as_secs_f64(),
        r.accuracy * 100.0
    );
    Ok(())
}

/// The same CNN written the plain candle way: VarMap, candle_nn layers, candle's AdamW.
struct BareCnn {
    _vm: VarMap,
    c1: candle_nn::Conv2d,
    c2: candle_nn::Conv2d,
    f1: candle_nn::Linear,
    f2: candle_nn::Linear,
    opt: candle_nn::AdamW,
    order: DataOrder,
    step: u64,
}

impl BareCnn {
    fn new(n: usize) -> Res<Self> {
        let vm = VarMap::new();
        let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
        let pad1 = Conv2dConfig {
            padding: 1,
            ..Default::default()
        };
        let c1 = candle_nn::conv2d(1, 16, 3, pad1, vb.pp("c1"))?;
        let c2 = candle_nn::conv2d(16, 32, 3, Default::default(), vb.pp("c2"))?;
        let f1 = candle_nn::linear(32 * 6 * 6, 64, vb.pp("f1"))?;
        let f2 = candle_nn::linear(64, 10, vb.pp("f2"))?;
        let params = candle_nn::ParamsAdamW {
            lr: 1e-3,
            weight_decay: 0.01,
            ..Default::default()
        };
        let opt = candle_nn::AdamW::new(vm.all_vars(), params)?;
        Ok(Self {
            _vm: vm,
            c1,
            c2,
            f1,
            f2,
            opt,
            order: DataOrder::new(1, n),
            step: 0,
        })
    }

    fn steps(&mut self, data: &dyn Dataset, n: u64) -> Res<()> {
        for _ in 0..n {
            let idx = self.order.indices(self.step * 64, 64);
            let b = data.batch(&idx, &Device::Cpu)?;
            let Input::Images(x) = &b.input else {
                return Err("images expected".into());
            };
            let x = self.c1.forward(x)?.relu()?.max_pool2d(2)?;
            let x = self
                .c2
                .forward(&x)?
                .relu()?
                .max_pool2d(2)?
                .flatten_from(1)?;
            let logits = self.f2.forward(&self.f1.forward(&x)?.relu()?)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &b.labels)?;
            self.opt.backward_step(&loss)?;
            let _: f32 = loss.to_scalar()?;
            self.step += 1;
        }
        Ok(())
    }
}
