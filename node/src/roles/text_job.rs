//! `bert-lora` jobs: the `[text]` section of a job file, the blobs it packs (the encoder and
//! its tokenizer, the labelled quotations as JSONL), and the model the trainer derives from a
//! spec's numbers. A client picks every number here, so each one is bounded before a provider
//! allocates anything for it.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use gpuchain_protocol::Hash;
use gpuchain_trainer::data::fortunes::{DEFAULT_CATEGORIES, load_fortunes};
use gpuchain_trainer::data::{bundle, to_jsonl, word_vocabulary};
use gpuchain_trainer::job::{EVAL_JSONL, TINY_VOCAB, TOKENIZER_FILE, TRAIN_JSONL};
use gpuchain_trainer::model::bert::{minilm_dir, word_tokenizer_json};
use gpuchain_trainer::{BertBase, LoraTarget, ModelSpec};
use serde::Deserialize;

/// The pretrained base a job file can name without a `model_dir` (`scripts/setup` installs it).
pub const MINILM: &str = "all-MiniLM-L6-v2";
/// The random encoder for tests and CPU demos.
pub const TINY: &str = "tiny";
/// The files of a pretrained base's model blob.
pub const PRETRAINED_FILES: [&str; 3] = ["config.json", "model.safetensors", TOKENIZER_FILE];

/// Bounds on what a client may ask of a provider: each keeps one step's memory and time in
/// reach of the hardware a provider declares, and none limits a real fine-tune.
pub const RANK: RangeInclusive<usize> = 1..=64;
pub const ALPHA: RangeInclusive<f64> = 1e-3..=1024.0;
/// MiniLM and BERT embed 512 positions.
pub const MAX_LEN: RangeInclusive<usize> = 1..=512;
pub const NUM_CLASSES: RangeInclusive<usize> = 2..=256;
pub const TINY_LAYERS: RangeInclusive<usize> = 1..=4;
pub const TINY_HIDDEN: RangeInclusive<usize> = 8..=256;
pub const TINY_HEADS: RangeInclusive<usize> = 1..=16;
pub const TINY_INTERMEDIATE: RangeInclusive<usize> = 1..=1024;

/// The spec's `hyper.extra` keys of a text job (besides the ones every job has).
const RANK_KEY: &str = "lora_rank";
const ALPHA_KEY: &str = "lora_alpha";
/// The targets as a bit set (query 1, key 2, value 4): one number per set, whatever the order
/// the job file listed them in.
const TARGETS_KEY: &str = "lora_targets";
const MAX_LEN_KEY: &str = "max_len";
const CLASSES_KEY: &str = "num_classes";
const TINY_KEYS: [&str; 4] = [
    "tiny_layers",
    "tiny_hidden",
    "tiny_heads",
    "tiny_intermediate",
];

/// The `[text]` section of a `bert-lora` job file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextFile {
    /// `"all-MiniLM-L6-v2"`, `"tiny"`, or any name with `model_dir` set.
    pub base: String,
    /// Folder with `config.json`, `model.safetensors` and `tokenizer.json`; relative paths
    /// are relative to the job file. Default for all-MiniLM-L6-v2: where setup installs it.
    pub model_dir: Option<PathBuf>,
    /// The random encoder's shape when `base = "tiny"`.
    pub tiny: TinyFile,
    pub rank: usize,
    pub alpha: f64,
    /// Attention projections that carry LoRA: any of "query", "key", "value".
    pub targets: Vec<String>,
    /// Tokens per example (longer quotations are truncated).
    pub max_len: usize,
    /// Fortune categories, one class each, in label order.
    pub categories: Vec<String>,
}

impl Default for TextFile {
    fn default() -> Self {
        Self {
            base: MINILM.into(),
            model_dir: None,
            tiny: TinyFile::default(),
            rank: 8,
            alpha: 16.0,
            targets: LoraTarget::DEFAULT
                .iter()
                .map(|t| t.name().to_string())
                .collect(),
            max_len: 64,
            categories: DEFAULT_CATEGORIES.iter().map(|c| c.to_string()).collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TinyFile {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
}

impl Default for TinyFile {
    fn default() -> Self {
        Self {
            layers: 1,
            hidden: 32,
            heads: 2,
            intermediate: 64,
        }
    }
}

/// A text job's three blobs and the `hyper.extra` entries that describe its model.
pub struct Packed {
    pub model: Vec<u8>,
    pub train: Vec<u8>,
    pub eval: Vec<u8>,
    pub extra: BTreeMap<String, f64>,
}

impl TextFile {
    /// Reads the quotations from `data_dir` (the fortunes folder), packs them and the model.
    pub fn pack(&self, data_dir: &Path, job_file: &Path) -> Result<Packed> {
        let cats: Vec<&str> = self.categories.iter().map(String::as_str).collect();
        let (train, eval) = load_fortunes(data_dir, &cats).map_err(|e| anyhow!("{e}"))?;
        if train.is_empty() || eval.is_empty() {
            bail!(
                "the categories {cats:?} in {} give {} training and {} held-out quotations; \
                 both must be non-empty",
                data_dir.display(),
                train.len(),
                eval.len()
            );
        }
        let extra = self.hyper_extra()?;
        let model = if self.base == TINY {
            // The vocabulary is the training split's commonest words: ids 0 and 1 are
            // padding and unknown, the rest fill the encoder's embedding table.
            let words = word_vocabulary(&train, TINY_VOCAB - 2);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let json = word_tokenizer_json(&words);
            bundle::pack_files(&[(TOKENIZER_FILE, json.as_bytes())])?
        } else {
            let dir = match &self.model_dir {
                Some(d) if d.is_absolute() => d.clone(),
                Some(d) => job_file.parent().unwrap_or(Path::new(".")).join(d),
                None if self.base == MINILM => minilm_dir(),
                None => bail!(
                    "text.base {:?} is neither {MINILM:?} nor {TINY:?}: set text.model_dir to the \
                     folder holding its {PRETRAINED_FILES:?}",
                    self.base
                ),
            };
            bundle::pack_dir_files(&dir, &PRETRAINED_FILES)
                .map_err(|e| anyhow!("text.base {:?} in {}: {e}", self.base, dir.display()))?
        };
        Ok(Packed {
            model,
            train: bundle::pack_files(&[(TRAIN_JSONL, &to_jsonl(&train))])?,
            eval: bundle::pack_files(&[(EVAL_JSONL, &to_jsonl(&eval))])?,
            extra,
        })
    }

    /// The job's `hyper.extra` from this section alone (LoRA targets, rank, alpha, lengths,
    /// class count, the tiny model's shape); refuses unknown LoRA targets and an empty list.
    pub fn hyper_extra(&self) -> Result<BTreeMap<String, f64>> {
        let mut bits = 0u32;
        for name in &self.targets {
            let t = LoraTarget::parse(name).ok_or_else(|| {
                anyhow!("text.targets: {name:?} is not one of \"query\", \"key\", \"value\"")
            })?;
            bits |= target_bit(t);
        }
        if bits == 0 {
            bail!("text.targets is empty: name the projections that carry LoRA");
        }
        let mut extra = BTreeMap::new();
        extra.insert(RANK_KEY.into(), self.rank as f64);
        extra.insert(TARGETS_KEY.into(), f64::from(bits));
        extra.insert(ALPHA_KEY.into(), self.alpha);
        extra.insert(MAX_LEN_KEY.into(), self.max_len as f64);
        extra.insert(CLASSES_KEY.into(), self.categories.len() as f64);
        if self.base == TINY {
            let t = &self.tiny;
            for (k, v) in TINY_KEYS
                .iter()
                .zip([t.layers, t.hidden, t.heads, t.intermediate])
            {
                extra.insert(k.to_string(), v as f64);
            }
        }
        Ok(extra)
    }
}

fn target_bit(t: LoraTarget) -> u32 {
    1 << (t as u32)
}

/// An integer the client put in `extra`, refused unless whole and inside `range`.
fn int(extra: &BTreeMap<String, f64>, key: &str, range: &RangeInclusive<usize>) -> Result<usize> {
    let v = *extra
        .get(key)
        .ok_or_else(|| anyhow!("the bert-lora job's {key} is missing from its hyper-parameters"))?;
    if v.fract() != 0.0 || v < *range.start() as f64 || v > *range.end() as f64 {
        bail!(
            "the bert-lora job's {key} ({v}) must be a whole number in {}..={}",
            range.start(),
            range.end()
        );
    }
    Ok(v as usize)
}

/// The keys a text job's `extra` may hold besides `common`.
pub fn known_keys() -> impl Iterator<Item = &'static str> {
    [RANK_KEY, ALPHA_KEY, TARGETS_KEY, MAX_LEN_KEY, CLASSES_KEY]
        .into_iter()
        .chain(TINY_KEYS)
}

/// The trainer's model for a bert-lora spec: the same numbers give the same `ModelSpec` on
/// every node. A pretrained base is named by its model blob, which holds its weights.
pub fn model_spec(extra: &BTreeMap<String, f64>, model_blob: Hash, seed: u64) -> Result<ModelSpec> {
    let rank = int(extra, RANK_KEY, &RANK)?;
    let alpha = *extra
        .get(ALPHA_KEY)
        .ok_or_else(|| anyhow!("the bert-lora job's {ALPHA_KEY} is missing"))?;
    if !ALPHA.contains(&alpha) {
        bail!(
            "the bert-lora job's {ALPHA_KEY} ({alpha}) must lie in {}..={}",
            ALPHA.start(),
            ALPHA.end()
        );
    }
    let bits = int(extra, TARGETS_KEY, &(1..=(1 << LoraTarget::ALL.len()) - 1))? as u32;
    // In ascending order: the trainer's canonical form.
    let targets: Vec<LoraTarget> = LoraTarget::ALL
        .into_iter()
        .filter(|t| bits & target_bit(*t) != 0)
        .collect();
    let max_len = int(extra, MAX_LEN_KEY, &MAX_LEN)?;
    let num_classes = int(extra, CLASSES_KEY, &NUM_CLASSES)?;
    let base = if TINY_KEYS.iter().any(|k| extra.contains_key(*k)) {
        let layers = int(extra, TINY_KEYS[0], &TINY_LAYERS)?;
        let hidden = int(extra, TINY_KEYS[1], &TINY_HIDDEN)?;
        let heads = int(extra, TINY_KEYS[2], &TINY_HEADS)?;
        let intermediate = int(extra, TINY_KEYS[3], &TINY_INTERMEDIATE)?;
        if !hidden.is_multiple_of(heads) {
            bail!("the tiny encoder's tiny_heads ({heads}) must divide tiny_hidden ({hidden})");
        }
        if rank > hidden {
            bail!("the bert-lora job's {RANK_KEY} ({rank}) exceeds the encoder's width ({hidden})");
        }
        BertBase::TinyRandom {
            layers,
            hidden,
            heads,
            intermediate,
            seed,
        }
    } else {
        BertBase::Pretrained {
            name: hex::encode(model_blob),
        }
    };
    Ok(ModelSpec::BertLora {
        base,
        rank,
        alpha,
        targets,
        num_classes,
        max_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extra(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn tiny() -> BTreeMap<String, f64> {
        extra(&[
            ("lora_rank", 4.0),
            ("lora_alpha", 8.0),
            ("lora_targets", 5.0),
            ("max_len", 32.0),
            ("num_classes", 4.0),
            ("tiny_layers", 1.0),
            ("tiny_hidden", 32.0),
            ("tiny_heads", 2.0),
            ("tiny_intermediate", 64.0),
        ])
    }

    #[test]
    fn hostile_numbers_are_refused_by_name() {
        let ok = model_spec(&tiny(), Hash::ZERO, 1).expect("tiny spec");
        assert!(matches!(
            ok,
            ModelSpec::BertLora {
                base: BertBase::TinyRandom { .. },
                ref targets,
                ..
            } if *targets == LoraTarget::DEFAULT
        ));
        for (key, v) in [
            ("max_len", 1e9),
            ("max_len", 0.0),
            ("lora_rank", 65.0),
            ("lora_rank", 33.0),
            ("lora_rank", 2.5),
            ("num_classes", 1e12),
            ("num_classes", 1.0),
            ("lora_alpha", -1.0),
            ("lora_targets", 0.0),
            ("lora_targets", 8.0),
            ("lora_targets", 1.5),
            ("tiny_hidden", 1e6),
            ("tiny_layers", 1e4),
            ("tiny_heads", 3.0),
            ("tiny_intermediate", f64::MAX),
        ] {
            let mut e = tiny();
            e.insert(key.into(), v);
            let err = model_spec(&e, Hash::ZERO, 1).expect_err(key).to_string();
            let named = key.strip_prefix("lora_").unwrap_or(key);
            assert!(err.contains(named), "{key}={v}: {err}");
        }
        let mut e = tiny();
        e.remove("tiny_heads");
        let err = model_spec(&e, Hash::ZERO, 1).expect_err("partial tiny");
        assert!(err.to_string().contains("tiny_heads"), "{err}");
        let mut e = tiny();
        e.remove("max_len");
        assert!(model_spec(&e, Hash::ZERO, 1).is_err());
    }
}
