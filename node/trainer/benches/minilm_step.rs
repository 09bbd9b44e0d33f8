//! Seconds per training step of all-MiniLM-L6-v2 + LoRA in our trainer, with the batch,
//! sequence length and step counts taken from the environment so that `scripts/bench-torch`
//! can give this bench and its PyTorch twin (`benches/torch_minilm.py`) identical settings:
//!
//!     GPUCHAIN_BENCH_BATCH=16 GPUCHAIN_BENCH_SEQ=64 GPUCHAIN_BENCH_STEPS=3 \
//!     GPUCHAIN_BENCH_WARMUP=1 RAYON_NUM_THREADS=2 \
//!     cargo bench -p gpuchain-trainer --profile dev --bench minilm_step
//!
//! The thread count is candle's: `RAYON_NUM_THREADS`, else every core. The job is the
//! `bert-lora` default (`TrainSpec::bert_lora`: LoRA rank 8, alpha 16 on query and value of
//! every layer, a linear head on mean-pooled tokens, cross-entropy, our AdamW) with the
//! effective batch and `max_len` replaced. Every row is as long as the sequence (no padding),
//! so both sides do the same arithmetic. The last line is machine-readable:
//! `minilm_step impl=candle … s_per_step=S median=M cpu_s_per_step=C` (mean and median wall
//! seconds of the timed steps; CPU seconds of all threads per step).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use candle_core::Device;
use gpuchain_trainer::data::{TextDataset, TextExample};
use gpuchain_trainer::model::bert::{BertEncoder, load_tokenizer, minilm_dir};
use gpuchain_trainer::{BertBase, Job, ModelSpec, TrainSpec, Trainer, TrainerOptions};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

fn env_usize(name: &str, default: usize) -> Res<usize> {
    match std::env::var(name) {
        Ok(v) => Ok(v
            .parse()
            .map_err(|e| format!("{name}={v:?} is not a count: {e}"))?),
        Err(_) => Ok(default),
    }
}

/// CPU seconds (user + system, all threads) this process has used: under load, wall time
/// includes waiting for a core; this does not. Linux only (`/proc`); `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0) // USER_HZ, 100 on every Linux port
}

fn run() -> Res<()> {
    let batch = env_usize("GPUCHAIN_BENCH_BATCH", 16)?;
    let seq = env_usize("GPUCHAIN_BENCH_SEQ", 64)?;
    let steps = env_usize("GPUCHAIN_BENCH_STEPS", 3)? as u64;
    let warmup = env_usize("GPUCHAIN_BENCH_WARMUP", 1)? as u64;
    let threads = candle_core::utils::get_num_threads();
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        return Err(format!("no MiniLM weights at {} (run scripts/setup)", dir.display()).into());
    }
    let enc = Arc::new(BertEncoder::load(&dir, &Device::Cpu)?);
    let tok = load_tokenizer(&dir.join("tokenizer.json"))?;
    let base = BertBase::Pretrained {
        name: "all-MiniLM-L6-v2".into(),
    };
    let mut spec = TrainSpec::bert_lora("bench-minilm-step", base, 1, 1_000_000, 2);
    spec.effective_batch = batch;
    if let ModelSpec::BertLora { max_len, .. } = &mut spec.model {
        *max_len = seq;
    }
    // Long enough to fill every row after truncation: no padding, whatever `seq` is.
    let words = [
        "the", "film", "was", "really", "quite", "good", "plot", "and", "acting", "poor",
    ];
    let examples: Vec<TextExample> = (0..4 * batch)
        .map(|i| TextExample {
            text: (0..seq + 8)
                .map(|k| words[(i * 7 + k * 3) % words.len()])
                .collect::<Vec<_>>()
                .join(" "),
            label: (i % 2) as u32,
        })
        .collect();
    let data = Arc::new(TextDataset::tokenize(&examples, &tok, seq, 2)?);
    let job = Arc::new(Job::new(spec, data.clone(), data, Some(enc), Device::Cpu)?);
    let mut t = Trainer::new(job, 0, TrainerOptions::default())?;
    let go = |t: &mut Trainer, until: u64| -> Res<()> {
        t.train(until, &AtomicBool::new(false), |_| {
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(())
    };
    go(&mut t, warmup)?;
    let mut times = Vec::new();
    let cpu0 = cpu_seconds();
    for s in 0..steps {
        let start = Instant::now();
        go(&mut t, warmup + s + 1)?;
        times.push(start.elapsed().as_secs_f64());
    }
    let cpu = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) => (b - a) / steps.max(1) as f64,
        _ => f64::NAN,
    };
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "per step (s): {}",
        times
            .iter()
            .map(|t| format!("{t:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "minilm_step impl=candle batch={batch} seq={seq} threads={threads} steps={steps} s_per_step={mean:.4} median={median:.4} cpu_s_per_step={cpu:.3}"
    );
    Ok(())
}
