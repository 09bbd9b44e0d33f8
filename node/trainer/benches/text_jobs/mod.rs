//! The text jobs the trainer's benches train: a synthetic sentiment set (a key word decides the
//! label) on a tiny random encoder, and on all-MiniLM-L6-v2 when scripts/setup installed it.

use std::sync::Arc;

use candle_core::Device;
use gpuchain_trainer::data::{TextDataset, TextExample};
use gpuchain_trainer::model::bert::{BertEncoder, load_tokenizer, minilm_dir, word_tokenizer};
use gpuchain_trainer::{BertBase, Job, TrainSpec};

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

pub const WORDS: [&str; 16] = [
    "good", "great", "fine", "nice", "bad", "awful", "poor", "weak", "the", "film", "was",
    "really", "quite", "plot", "acting", "and",
];

/// `n` sentences of 31 words, labelled by the one key word among them.
pub fn synthetic(n: usize) -> Vec<TextExample> {
    (0..n)
        .map(|i| {
            let label = (i % 2) as u32;
            let key = WORDS[(i / 2) % 4 + if label == 1 { 0 } else { 4 }];
            let text = (0..31)
                .map(|k| {
                    if k == i % 31 {
                        key
                    } else {
                        WORDS[8 + (i * 7 + k * 3) % 8]
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            TextExample { text, label }
        })
        .collect()
}

/// A 2-layer, 32-wide random encoder with LoRA, on 256 sentences.
pub fn tiny_bert_job(name: &str) -> Res<Arc<Job>> {
    let tok = word_tokenizer(&WORDS)?;
    let base = BertBase::TinyRandom {
        layers: 2,
        hidden: 32,
        heads: 2,
        intermediate: 64,
        seed: 1,
    };
    let mut spec = TrainSpec::bert_lora(name, base, 1, 1000, 2);
    if let gpuchain_trainer::ModelSpec::BertLora { max_len, .. } = &mut spec.model {
        *max_len = 32;
    }
    let data = Arc::new(TextDataset::tokenize(&synthetic(256), &tok, 32, 2)?);
    Ok(Arc::new(Job::new(
        spec,
        data.clone(),
        data,
        None,
        Device::Cpu,
    )?))
}

/// MiniLM with LoRA on 64 doubled sentences; `None` without its weights.
pub fn minilm_job(name: &str) -> Res<Option<Arc<Job>>> {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        return Ok(None);
    }
    let enc = Arc::new(BertEncoder::load(&dir, &Device::Cpu)?);
    let tok = load_tokenizer(&dir.join("tokenizer.json"))?;
    let base = BertBase::Pretrained {
        name: "all-MiniLM-L6-v2".into(),
    };
    let spec = TrainSpec::bert_lora(name, base, 1, 1000, 2);
    let examples: Vec<TextExample> = synthetic(64)
        .into_iter()
        .map(|e| TextExample {
            text: format!("{} {}", e.text, e.text),
            label: e.label,
        })
        .collect();
    let data = Arc::new(TextDataset::tokenize(&examples, &tok, 64, 2)?);
    Ok(Some(Arc::new(Job::new(
        spec,
        data.clone(),
        data,
        Some(enc),
        Device::Cpu,
    )?)))
}
