use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use candle_core::{D, Device, Tensor};
use gpuchain_trainer::data::{Dataset, Input, TextDataset, TextExample};
use gpuchain_trainer::job::tiny_config;
use gpuchain_trainer::model::Model;
use gpuchain_trainer::model::bert::{
    BertEncoder, BertLora, layer_norm, load_tokenizer, minilm_dir, word_tokenizer,
};
use gpuchain_trainer::{BertBase, Job, LoraTarget, ModelSpec, TrainSpec, Trainer, TrainerOptions};

const GOOD: [&str; 6] = ["good", "great", "fine", "lovely", "superb", "nice"];
const BAD: [&str; 6] = ["bad", "awful", "poor", "dire", "grim", "weak"];
const FILLER: [&str; 8] = [
    "the", "film", "was", "really", "quite", "plot", "acting", "and",
];

/// A two-class sentiment set whose label is carried by one word among fillers.
pub(crate) fn sentiment(n: usize, offset: usize) -> Vec<TextExample> {
    (0..n)
        .map(|i| {
            let k = i + offset;
            let label = (k % 2) as u32;
            let word = if label == 1 {
                GOOD[k % 6]
            } else {
                BAD[(k / 2) % 6]
            };
            let text = format!(
                "{} {} {} {} {}",
                FILLER[k % 8],
                FILLER[(k / 3) % 8],
                word,
                FILLER[(k / 5) % 8],
                FILLER[(k / 7) % 8]
            );
            TextExample { text, label }
        })
        .collect()
}

fn tiny_job(id: &str, steps: u64) -> Arc<Job> {
    tiny_job_on(id, steps, &LoraTarget::DEFAULT)
}

/// A tokenizer that knows every word [`sentiment`] uses.
pub(crate) fn sentiment_tokenizer() -> tokenizers::Tokenizer {
    let words: Vec<&str> = GOOD.iter().chain(&BAD).chain(&FILLER).copied().collect();
    word_tokenizer(&words).unwrap()
}

/// [`tiny_job`] with LoRA on `on`.
fn tiny_job_on(id: &str, steps: u64, on: &[LoraTarget]) -> Arc<Job> {
    let tok = sentiment_tokenizer();
    let base = BertBase::TinyRandom {
        layers: 2,
        hidden: 32,
        heads: 2,
        intermediate: 64,
        seed: 5,
    };
    let mut spec = TrainSpec::bert_lora(id, base, 3, steps, 2);
    if let gpuchain_trainer::ModelSpec::BertLora {
        max_len, targets, ..
    } = &mut spec.model
    {
        *max_len = 8;
        *targets = on.to_vec();
    }
    spec.optim.peak_lr = 1e-2;
    spec.quality.eval_examples = 64;
    let train = TextDataset::tokenize(&sentiment(512, 0), &tok, 8, 2).unwrap();
    let eval = TextDataset::tokenize(&sentiment(64, 1000), &tok, 8, 2).unwrap();
    Arc::new(Job::new(spec, Arc::new(train), Arc::new(eval), None, Device::Cpu).unwrap())
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

#[test]
fn primitive_layer_norm_matches_a_scalar_reference_and_candles_fused_one() {
    let x = gpuchain_trainer::init::normal(1, "x", &[3, 5, 16], 2.0, &Device::Cpu).unwrap();
    let g = gpuchain_trainer::init::normal(2, "g", &[16], 1.0, &Device::Cpu).unwrap();
    let b = gpuchain_trainer::init::normal(3, "b", &[16], 1.0, &Device::Cpu).unwrap();
    let ours = layer_norm(&x, &g, &b, 1e-5).unwrap();
    let fused = candle_nn::ops::layer_norm(&x, &g, &b, 1e-5).unwrap();
    assert!(max_diff(&ours, &fused) < 1e-5);
    // Scalar reference in f64.
    let (xv, gv, bv) = (
        x.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        g.to_vec1::<f32>().unwrap(),
        b.to_vec1::<f32>().unwrap(),
    );
    let ov = ours.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for row in 0..15 {
        let r: Vec<f64> = xv[row * 16..(row + 1) * 16]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let mean = r.iter().sum::<f64>() / 16.0;
        let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 16.0;
        for j in 0..16 {
            let want = (r[j] - mean) / (var + 1e-5).sqrt() * f64::from(gv[j]) + f64::from(bv[j]);
            assert!((f64::from(ov[row * 16 + j]) - want).abs() < 1e-5);
        }
    }
}

/// Our forward (primitive LayerNorm) against the same network with candle's fused LayerNorm,
/// and every trainable tensor receiving a non-zero gradient once the B's are non-zero.
fn check_encoder(
    model: &dyn Model,
    fused: impl Fn(&Input) -> Tensor,
    batch: &gpuchain_trainer::data::Batch,
) {
    let ours = model.forward(&batch.input).unwrap();
    let theirs = fused(&batch.input);
    let d = max_diff(&ours, &theirs);
    println!("max |logit difference| primitive vs fused LayerNorm: {d:.2e}");
    assert!(d < 1e-5, "logits differ by {d}");
    let loss = candle_nn::loss::cross_entropy(&ours, &batch.labels).unwrap();
    let grads = loss.backward().unwrap();
    for (name, var) in model.params() {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{name}: no gradient"));
        let norm = g
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(norm > 0.0, "{name}: zero gradient");
    }
}

#[test]
fn tiny_bert_forward_and_gradients() {
    let job = tiny_job("tiny-grad", 20);
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    // One step makes the LoRA B's non-zero, so A's get gradients too.
    t.step().unwrap();
    let batch = job.train.batch(&[0, 1, 2, 3, 4, 5], &Device::Cpu).unwrap();
    // A concrete BertLora with the trained adapters, to call the fused-LayerNorm forward.
    let cfg = tiny_config(2, 32, 2, 64, 8);
    let enc = Arc::new(BertEncoder::tiny_random(cfg, 5, &Device::Cpu).unwrap());
    let twin = BertLora::new(enc, 8, 16.0, &LoraTarget::DEFAULT, 2, 3, &Device::Cpu).unwrap();
    for (name, var) in twin.params() {
        var.set(t.model().params()[name].as_tensor()).unwrap();
    }
    check_encoder(&twin, |i| twin.forward_fused_ln(i).unwrap(), &batch);
    let d = max_diff(
        &twin.forward(&batch.input).unwrap(),
        &t.model().forward(&batch.input).unwrap(),
    );
    assert_eq!(d, 0.0, "the twin is the trainer's model");
}

#[test]
fn tiny_bert_learns_and_resumes_bit_exactly() {
    let job = tiny_job("tiny-learn", 80);
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    let before = t.evaluate().unwrap();
    t.train(40, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let bytes = t.checkpoint().unwrap().to_bytes().unwrap();
    t.train(80, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let after = t.evaluate().unwrap();
    assert!(
        after.loss < before.loss * 0.7,
        "loss {} → {}",
        before.loss,
        after.loss
    );
    assert!(after.accuracy > 0.8, "accuracy {}", after.accuracy);
    let mut r = Trainer::resume(job, &bytes, 1, TrainerOptions::default()).unwrap();
    r.train(80, &AtomicBool::new(false), |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(r.state_hash().unwrap(), t.state_hash().unwrap());
}

#[test]
fn minilm_lora_matches_fused_forward_and_gets_gradients() {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        println!(
            "note: skipping, no MiniLM weights at {} (run scripts/setup)",
            dir.display()
        );
        return;
    }
    let dev = Device::Cpu;
    let enc = Arc::new(BertEncoder::load(&dir, &dev).unwrap());
    assert_eq!(enc.config.hidden_size, 384);
    let tok = load_tokenizer(&dir.join("tokenizer.json")).unwrap();
    let ex = vec![
        TextExample {
            text: "Stocks rallied after the central bank held rates.".into(),
            label: 2,
        },
        TextExample {
            text: "The striker scored twice in the final minutes.".into(),
            label: 1,
        },
        TextExample {
            text: "A new chip promises faster phones.".into(),
            label: 3,
        },
    ];
    let data = TextDataset::tokenize(&ex, &tok, 24, 4).unwrap();
    let batch = data.batch(&[0, 1, 2], &dev).unwrap();
    let model = BertLora::new(enc, 4, 8.0, &LoraTarget::DEFAULT, 4, 1, &dev).unwrap();
    // Give the B's values so the A's are on the gradient path.
    for (name, var) in model.params() {
        if name.ends_with(".b") {
            let shape = var.dims().to_vec();
            var.set(&gpuchain_trainer::init::normal(9, name, &shape, 0.01, &dev).unwrap())
                .unwrap();
        }
    }
    // [CLS] … [SEP] from the real WordPiece tokenizer.
    let Input::Tokens { ids, .. } = &batch.input else {
        unreachable!()
    };
    assert_eq!(
        ids.get(0)
            .unwrap()
            .get(0)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap(),
        101
    );
    check_encoder(&model, |i| model.forward_fused_ln(i).unwrap(), &batch);
    let _ = D::Minus1;
}

#[test]
fn minilm_lora_job_from_ag_news_files_trains_checkpoints_and_verifies() {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        println!(
            "note: skipping, no MiniLM weights at {} (run scripts/setup)",
            dir.display()
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("train.csv");
    std::fs::write(
        &csv,
        "\"3\",\"Stocks rally\",\"Shares rose as the central bank held rates.\"\n\
         \"2\",\"Cup final\",\"The striker scored twice in the last minutes.\"\n\
         \"4\",\"New chip\",\"A faster processor for phones was unveiled.\"\n\
         \"1\",\"Talks resume\",\"Diplomats met to discuss the ceasefire.\"\n",
    )
    .unwrap();
    let base = BertBase::Pretrained {
        name: "all-MiniLM-L6-v2".into(),
    };
    let mut spec = TrainSpec::bert_lora("minilm-e2e", base, 1, 10, 4);
    spec.effective_batch = 4;
    if let gpuchain_trainer::ModelSpec::BertLora { max_len, .. } = &mut spec.model {
        *max_len = 24;
    }
    let job = Arc::new(Job::bert_lora_pretrained(spec, &dir, &csv, &csv, Device::Cpu).unwrap());
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    t.step().unwrap();
    let parent = t.checkpoint().unwrap().to_bytes().unwrap();
    let mut r = Trainer::resume(job.clone(), &parent, 1, TrainerOptions::default()).unwrap();
    r.step().unwrap();
    let cand = r.checkpoint().unwrap().to_bytes().unwrap();
    let v = gpuchain_trainer::quality_test(&job, &cand, Some(&parent)).unwrap();
    assert_eq!(v.candidate.unwrap().examples, 4);
    assert!(
        !v.reasons.contains(&gpuchain_trainer::Reason::Stale),
        "{:?}",
        v.reasons
    );
    let h = r.interval_hashes().to_vec();
    let s = gpuchain_trainer::spot_check(&job, &r.serve_state(1).unwrap(), h[0], h[1]).unwrap();
    assert!(s.matched, "{}", s.detail);
}

/// The spec's targets decide which projections carry adapters, and each one trains; a spec
/// whose targets are empty, repeated or out of order is refused (one set, one fingerprint).
#[test]
fn lora_targets_are_the_specs_and_each_trains() {
    let job = tiny_job_on("tiny-key", 4, &[LoraTarget::Key]);
    let names: Vec<String> = job.param_shapes().unwrap().into_keys().collect();
    assert_eq!(
        names,
        [
            "head.bias",
            "head.weight",
            "lora.0.key.a",
            "lora.0.key.b",
            "lora.1.key.a",
            "lora.1.key.b"
        ]
    );
    let mut t = Trainer::new(job.clone(), 0, TrainerOptions::default()).unwrap();
    t.step().unwrap();
    let b = t.model().params()["lora.1.key.b"].as_tensor();
    let moved = b
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(moved > 0.0, "the key adapter did not train");
    let all = tiny_job_on("tiny-qkv", 4, &LoraTarget::ALL);
    assert_eq!(all.param_shapes().unwrap().len(), 2 + 2 * 2 * 3);
    assert_ne!(
        all.spec.fingerprint(),
        tiny_job("tiny-qkv", 4).spec.fingerprint()
    );

    for bad in [
        vec![],
        vec![LoraTarget::Value, LoraTarget::Query],
        vec![LoraTarget::Key, LoraTarget::Key],
    ] {
        let mut spec = job.spec.clone();
        if let ModelSpec::BertLora { targets, .. } = &mut spec.model {
            *targets = bad.clone();
        }
        let e = spec.validate().expect_err("bad targets");
        assert!(e.to_string().contains("targets"), "{bad:?}: {e}");
    }
}
