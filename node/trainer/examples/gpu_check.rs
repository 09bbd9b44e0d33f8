//! The GPU check: trains the text job (all-MiniLM-L6-v2 + LoRA rank 8, alpha 16, query and
//! value, on Debian's fortunes) on a CUDA device, prints step time, examples/s and MFU, then
//! has a CPU verifier spot-check every GPU-trained interval in tolerance mode and prints the
//! false-refusal rate and the deviations it saw.
//!
//!     scripts/build-cuda && scripts/gpu-check          # on a machine with an NVIDIA GPU
//!     target/cuda/release/examples/gpu_check [--device cuda:0] [--batch 16] [--intervals 50]
//!         [--steps-per-interval 4] [--spot-k 3] [--max-ratio 1e-2] [--timing-steps 20]
//!         [--peak-tflops F] [--train-micro-batch M] [--device cpu]
//!
//! Without a CUDA device (or in a CPU build) it refuses and exits with status 2. `--device cpu`
//! runs the same path on CPU as a dry run; with `--train-micro-batch 4` the "provider" then
//! accumulates micro-batches while the verifier replays whole batches, so the replay differs
//! by rounding as a GPU's would.
//!
//! Needs the MiniLM weights (`GPUCHAIN_MINILM_DIR` or `.cache/models/all-MiniLM-L6-v2`,
//! installed by scripts/setup) and the fortunes (`GPUCHAIN_FORTUNES_DIR` or Debian's
//! `fortunes` package). Reads nothing from the network.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use candle_core::Device;
use gpuchain_trainer::data::TextDataset;
use gpuchain_trainer::data::fortunes::{DEFAULT_CATEGORIES, fortunes_dir, load_fortunes};
use gpuchain_trainer::model::bert::{BertConfig, BertEncoder, load_tokenizer, minilm_dir};
use gpuchain_trainer::{
    BertBase, DeviceChoice, Job, ModelSpec, SpotMode, TrainSpec, Trainer, TrainerOptions,
    spot_check_interval,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Exit status when there is no CUDA device to check.
const NO_DEVICE: u8 = 2;

struct Args {
    device: String,
    batch: usize,
    intervals: u64,
    steps_per_interval: u64,
    spot_k: usize,
    max_ratio: f64,
    warmup_steps: u64,
    timing_steps: u64,
    peak_tflops: Option<f64>,
    train_micro_batch: Option<usize>,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        device: "cuda:0".into(),
        batch: 16,
        intervals: 50,
        steps_per_interval: 4,
        spot_k: 3,
        max_ratio: 1e-2,
        warmup_steps: 3,
        timing_steps: 20,
        peak_tflops: None,
        train_micro_batch: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut val = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--device" => a.device = val()?,
            "--batch" => a.batch = val()?.parse()?,
            "--intervals" => a.intervals = val()?.parse()?,
            "--steps-per-interval" => a.steps_per_interval = val()?.parse()?,
            "--spot-k" => a.spot_k = val()?.parse()?,
            "--max-ratio" => a.max_ratio = val()?.parse()?,
            "--warmup-steps" => a.warmup_steps = val()?.parse()?,
            "--timing-steps" => a.timing_steps = val()?.parse()?,
            "--peak-tflops" => a.peak_tflops = Some(val()?.parse()?),
            "--train-micro-batch" => a.train_micro_batch = Some(val()?.parse()?),
            _ => return Err(format!("unknown argument {flag}; see the file's header").into()),
        }
    }
    if a.steps_per_interval == 0 || a.timing_steps == 0 {
        return Err("--steps-per-interval and --timing-steps must be at least 1".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Refuse before loading anything when the device is not there.
    let choice = match args.device.parse::<DeviceChoice>() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            return ExitCode::FAILURE;
        }
    };
    let device = match choice.open() {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "gpu_check: no CUDA device to check ({e}). It needs an NVIDIA GPU, its driver and a \
                 `--features cuda` build (scripts/build-cuda); `--device cpu` runs the same path on \
                 CPU as a dry run."
            );
            return ExitCode::from(NO_DEVICE);
        }
    };
    if matches!(choice, DeviceChoice::Cuda(_)) && !device.is_cuda() {
        eprintln!("gpu_check: {} opened a non-CUDA device", args.device);
        return ExitCode::from(NO_DEVICE);
    }
    match run(&args, choice, device) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_check: {e}");
            ExitCode::FAILURE
        }
    }
}

/// FLOPs of one training step of the LoRA encoder, counted by matmul shapes (2 per
/// multiply-add) over the padded `batch × len` tokens the device computes. Forward: Q, K, V
/// and output projections, the two FFN matmuls, QKᵀ and AV, the LoRA adapters, the head.
/// Backward: the input gradient of every matmul (≈ the forward again), plus weight gradients
/// of the trainable ones only (LoRA A/B, head) and the second operand's gradient of the two
/// attention matmuls; frozen weights get no weight gradient. Softmax, GELU, LayerNorm and the
/// optimizer are not counted.
fn train_flops(
    c: &BertConfig,
    batch: usize,
    len: usize,
    rank: usize,
    targets: usize,
    classes: usize,
) -> f64 {
    let (b, l, h, i) = (
        batch as f64,
        len as f64,
        c.hidden_size as f64,
        c.intermediate_size as f64,
    );
    let n = b * l;
    let proj = 4.0 * 2.0 * n * h * h;
    let ffn = 2.0 * 2.0 * n * h * i;
    let attn = 2.0 * (2.0 * b * l * l * h);
    let lora = targets as f64 * 2.0 * (2.0 * n * h * rank as f64);
    let layers = c.num_hidden_layers as f64;
    let head = 2.0 * b * h * classes as f64;
    let fwd = layers * (proj + ffn + attn + lora) + head;
    let bwd = fwd + layers * (lora + attn) + head;
    fwd + bwd
}

/// Dense peaks in TFLOPS as (FP32 without tensor cores, TF32 tensor cores), by the name
/// nvidia-smi reports. Specific names first: "H100 PCIe" before "H100", "L40S" before "L4".
const PEAKS: &[(&str, f64, f64)] = &[
    ("H100 PCIe", 51.0, 378.0),
    ("H100 NVL", 60.0, 418.0),
    ("H200 NVL", 60.0, 418.0),
    ("GH200", 67.0, 495.0),
    ("H100", 67.0, 495.0), // SXM
    ("H200", 67.0, 495.0), // SXM
    ("A100", 19.5, 156.0),
    ("L40S", 91.6, 183.0),
    ("L4", 30.3, 60.0),
];

fn gpu_name(ordinal: usize) -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=name",
            "--format=csv,noheader",
            "-i",
            &ordinal.to_string(),
        ])
        .output()
        .ok()?;
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !name.is_empty()).then_some(name)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[k]
}

/// The deviation a tolerance-mode result reports ("deviation 1.23e-5 of the update").
fn deviation_of(detail: &str) -> Option<f64> {
    detail
        .split("deviation ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn run(a: &Args, choice: DeviceChoice, device: Device) -> Res<()> {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        return Err(format!(
            "no MiniLM weights at {} (scripts/setup installs them; set GPUCHAIN_MINILM_DIR)",
            dir.display()
        )
        .into());
    }
    let (train_ex, eval_ex) = load_fortunes(&fortunes_dir(), &DEFAULT_CATEGORIES)?;
    let classes = DEFAULT_CATEGORIES.len();

    let interval_steps = a.intervals * a.steps_per_interval;
    let total = interval_steps.max(a.warmup_steps + a.timing_steps);
    let base = BertBase::Pretrained {
        name: "all-MiniLM-L6-v2".into(),
    };
    let mut spec = TrainSpec::bert_lora("gpu-check-minilm", base, 1, total, classes);
    spec.effective_batch = a.batch;
    let ModelSpec::BertLora {
        rank,
        ref targets,
        max_len,
        ..
    } = spec.model
    else {
        return Err("the text job's spec is not bert-lora".into());
    };
    let n_targets = targets.len();

    let tok = load_tokenizer(&dir.join("tokenizer.json"))?;
    let train = Arc::new(TextDataset::tokenize(&train_ex, &tok, max_len, classes)?);
    let eval = Arc::new(TextDataset::tokenize(&eval_ex, &tok, max_len, classes)?);
    let gpu_enc = Arc::new(BertEncoder::load(&dir, &device)?);
    let cfg = gpu_enc.config.clone();
    let job = Arc::new(Job::new(
        spec.clone(),
        train.clone(),
        eval.clone(),
        Some(gpu_enc),
        device.clone(),
    )?);
    // The verifier: the same job on CPU, as a CPU verifier node would build it.
    let cpu_job = Arc::new(Job::new(
        spec,
        train.clone(),
        eval,
        Some(Arc::new(BertEncoder::load(&dir, &Device::Cpu)?)),
        Device::Cpu,
    )?);

    let name = match choice {
        DeviceChoice::Cuda(n) => {
            gpu_name(n).unwrap_or_else(|| format!("cuda:{n} (nvidia-smi gave no name)"))
        }
        DeviceChoice::Auto if device.is_cuda() => gpu_name(0).unwrap_or_else(|| "cuda:0".into()),
        _ => "CPU (dry run)".into(),
    };
    println!("# gpu_check: all-MiniLM-L6-v2 + LoRA on {name}");
    println!(
        "job: rank {rank}, alpha 16, {n_targets} targets (query, value), batch {}, max_len {max_len}, {classes} classes, {} training quotations",
        a.batch,
        train_ex.len()
    );

    // 1. Speed: the node's training loop (state hash every step), after a warm-up that
    // loads the kernels. The state hash copies the trainable state to the host, so each step
    // ends synchronised and wall-clock time is the step's.
    let opts = TrainerOptions {
        micro_batch: a.train_micro_batch,
        keep_states: false,
        ..Default::default()
    };
    let mut t = Trainer::new(job.clone(), 0, opts)?;
    for _ in 0..a.warmup_steps {
        t.step()?;
    }
    let start = Instant::now();
    let mut last_loss = f32::NAN;
    for _ in 0..a.timing_steps {
        last_loss = t.step()?.loss;
    }
    let step_s = start.elapsed().as_secs_f64() / a.timing_steps as f64;
    let flops = train_flops(&cfg, a.batch, max_len, rank, n_targets, classes);
    let achieved = flops / step_s / 1e12;
    println!(
        "step time {:.2} ms, {:.1} examples/s, {:.1} steps/s (mean of {} steps after {} warm-up; micro-batch {}, loss {last_loss:.3})",
        step_s * 1e3,
        a.batch as f64 / step_s,
        1.0 / step_s,
        a.timing_steps,
        a.warmup_steps,
        t.plan().micro_batch
    );
    println!(
        "model FLOPs per step {:.3} GFLOP (matmul shapes, {} padded tokens): {achieved:.3} TFLOPS achieved",
        flops / 1e9,
        a.batch * max_len
    );
    let peak = match a.peak_tflops {
        Some(p) => Some((p, None, "--peak-tflops".to_string())),
        None => PEAKS
            .iter()
            .find(|(k, _, _)| name.contains(k))
            .map(|(k, fp32, tf32)| (*fp32, Some(*tf32), format!("{k} table"))),
    };
    match peak {
        Some((fp32, tf32, from)) => {
            println!(
                "MFU {:.2} % of the FP32 (non-tensor-core) peak {fp32} TFLOPS ({from}); the GEMMs run in full FP32 (candle's reduced-precision f32 flag is off, no TF32)",
                achieved / fp32 * 100.0
            );
            if let Some(tf32) = tf32 {
                println!(
                    "    for reference {:.3} % of the dense TF32 tensor-core peak {tf32} TFLOPS",
                    achieved / tf32 * 100.0
                );
            }
        }
        None => println!("MFU: no peak known for {name:?}; pass --peak-tflops"),
    }
    drop(t);

    // 2. Cross-device spot checks: GPU-trained intervals, each checked by the CPU verifier
    // in tolerance mode with the verifier's own seed, as a verifier node does.
    if a.intervals == 0 {
        return Ok(());
    }
    let mode = SpotMode::Tolerance {
        max_ratio: a.max_ratio,
    };
    let opts = TrainerOptions {
        micro_batch: a.train_micro_batch,
        ..Default::default()
    };
    let mut t = Trainer::new(job, 0, opts)?;
    let (mut refused_intervals, mut replays, mut refused_steps, mut exact) =
        (0u64, 0u64, 0u64, 0u64);
    let mut devs = Vec::new();
    let (mut gpu_s, mut cpu_s) = (0.0, 0.0);
    for k in 0..a.intervals {
        let s = Instant::now();
        for _ in 0..a.steps_per_interval {
            t.step()?;
        }
        gpu_s += s.elapsed().as_secs_f64();
        let start = t.interval_start();
        let hashes = t.interval_hashes().to_vec();
        let s = Instant::now();
        let report =
            spot_check_interval(&cpu_job, start, &hashes, 1000 + k, a.spot_k, mode, |st| {
                t.serve_state(st)
            })?;
        cpu_s += s.elapsed().as_secs_f64();
        for r in &report.results {
            replays += 1;
            refused_steps += u64::from(!r.matched);
            match deviation_of(&r.detail) {
                Some(d) => {
                    exact += u64::from(d == 0.0);
                    devs.push(d);
                }
                None => println!("  step {}: {}", r.step, r.detail),
            }
        }
        if !report.accepted {
            refused_intervals += 1;
            let worst = report.results.iter().find(|r| !r.matched);
            println!(
                "  interval {k} (steps {start}..{}) refused: {}",
                start + a.steps_per_interval,
                worst.map_or("no result", |r| r.detail.as_str())
            );
        }
        let parent = t.checkpoint()?.to_bytes()?;
        t.start_interval(Some(gpuchain_trainer::file_hash(&parent)))?;
    }
    devs.sort_by(f64::total_cmp);
    println!(
        "cross-device spot check ({} → CPU verifier, tolerance mode, max ratio {:.0e}): {} intervals of {} steps, {} sampled steps each",
        if device.is_cuda() { "GPU" } else { "CPU" },
        a.max_ratio,
        a.intervals,
        a.steps_per_interval,
        a.spot_k
    );
    println!(
        "false refusals: {refused_intervals}/{} intervals ({:.1} %), {refused_steps}/{replays} replayed steps",
        a.intervals,
        refused_intervals as f64 / a.intervals as f64 * 100.0
    );
    println!(
        "deviation ‖replayed − served‖ / ‖update‖: median {:.2e}, p90 {:.2e}, max {:.2e}; {exact} of {} replays bit-identical",
        percentile(&devs, 0.5),
        percentile(&devs, 0.9),
        devs.last().copied().unwrap_or(f64::NAN),
        devs.len()
    );
    for tol in [1e-4, 1e-3, 1e-2, 1e-1] {
        let over = devs.iter().filter(|d| **d > tol).count();
        println!(
            "    at a tolerance of {tol:.0e}: {over}/{} replays would be refused",
            devs.len()
        );
    }
    println!(
        "time: {gpu_s:.1} s training on the device, {cpu_s:.1} s of CPU verification ({} replays)",
        replays
    );
    Ok(())
}
