//! What a job asks the trainer to do. The protocol's `JobSpec` maps onto [`TrainSpec`];
//! the trainer only needs the fields that change the numbers it computes.

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainerError};

/// Which network a job trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ModelSpec {
    /// 784→hidden→10 perceptron on Fashion-MNIST: ≈ 3 ms/step, for fast tests.
    Mlp { hidden: usize },
    /// Two 3×3 convolutions (16, 32 channels), 64 hidden units, 10 classes.
    FashionCnn,
    /// A BERT encoder with frozen base weights, LoRA on the attention projections `targets`
    /// of every layer and a classifier head over mean-pooled tokens.
    BertLora {
        base: BertBase,
        rank: usize,
        alpha: f64,
        /// In ascending order, no repeats, so one set of targets has one spec (and fingerprint).
        targets: Vec<LoraTarget>,
        num_classes: usize,
        /// Sequences are truncated or padded to this many tokens.
        max_len: usize,
    },
}

/// An attention projection that can carry a LoRA adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoraTarget {
    Query,
    Key,
    Value,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 3] = [LoraTarget::Query, LoraTarget::Key, LoraTarget::Value];
    /// The usual choice (the LoRA paper's): query and value.
    pub const DEFAULT: [LoraTarget; 2] = [LoraTarget::Query, LoraTarget::Value];

    /// The name in the encoder's weights (`attention.self.<name>`) and in the adapters'.
    pub fn name(self) -> &'static str {
        match self {
            LoraTarget::Query => "query",
            LoraTarget::Key => "key",
            LoraTarget::Value => "value",
        }
    }

    pub fn parse(name: &str) -> Option<LoraTarget> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Where a `bert-lora` job's frozen encoder comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum BertBase {
    /// `model.safetensors` + `config.json` + `tokenizer.json` from a directory the job names.
    Pretrained { name: String },
    /// A random encoder built from `seed`, for tests and benches that must not need weights.
    TinyRandom {
        layers: usize,
        hidden: usize,
        heads: usize,
        intermediate: usize,
        seed: u64,
    },
}

/// AdamW with a linear warm-up then a cosine decay to `min_lr_ratio × peak_lr`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimSpec {
    pub peak_lr: f64,
    pub warmup_steps: u64,
    pub min_lr_ratio: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
}

impl Default for OptimSpec {
    fn default() -> Self {
        Self {
            peak_lr: 1e-3,
            warmup_steps: 0,
            min_lr_ratio: 1.0,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

/// Thresholds a checkpoint must meet on the held-out set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualitySpec {
    /// Minimum accuracy in [0, 1] on the eval set.
    pub min_accuracy: f64,
    /// Maximum mean cross-entropy on the eval set.
    pub max_loss: f64,
    /// How much accuracy may drop below the previous accepted checkpoint's (absolute, in [0, 1]).
    pub max_regression: f64,
    /// Examples of the eval set used (the first ones, in file order).
    pub eval_examples: usize,
}

/// Everything that fixes the numbers a job's training produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainSpec {
    /// The job's identity (the node uses the on-chain job id or the spec hash).
    pub job_id: String,
    pub model: ModelSpec,
    /// Seeds weight initialisation and data order.
    pub seed: u64,
    pub total_steps: u64,
    /// Examples per optimizer step, whatever micro-batch a provider can afford.
    pub effective_batch: usize,
    pub optim: OptimSpec,
    pub quality: QualitySpec,
}

impl TrainSpec {
    /// The demo job: fashion-cnn, batch 64, warm-up then cosine decay over `total_steps`.
    pub fn fashion_cnn(job_id: impl Into<String>, seed: u64, total_steps: u64) -> Self {
        Self {
            job_id: job_id.into(),
            model: ModelSpec::FashionCnn,
            seed,
            total_steps,
            effective_batch: 64,
            optim: OptimSpec {
                peak_lr: 3e-3,
                warmup_steps: total_steps / 20,
                min_lr_ratio: 0.05,
                ..OptimSpec::default()
            },
            quality: QualitySpec {
                min_accuracy: 0.5,
                max_loss: 1.5,
                max_regression: 0.05,
                eval_examples: 2000,
            },
        }
    }

    /// The fast test job: a 784→128→10 MLP, same data and schedule as [`Self::fashion_cnn`].
    pub fn mlp(job_id: impl Into<String>, seed: u64, total_steps: u64) -> Self {
        Self {
            model: ModelSpec::Mlp { hidden: 128 },
            ..Self::fashion_cnn(job_id, seed, total_steps)
        }
    }

    /// A LoRA fine-tune of a BERT encoder for `num_classes`-way text classification.
    pub fn bert_lora(
        job_id: impl Into<String>,
        base: BertBase,
        seed: u64,
        total_steps: u64,
        num_classes: usize,
    ) -> Self {
        Self {
            job_id: job_id.into(),
            model: ModelSpec::BertLora {
                base,
                rank: 8,
                alpha: 16.0,
                targets: LoraTarget::DEFAULT.to_vec(),
                num_classes,
                max_len: 64,
            },
            seed,
            total_steps,
            effective_batch: 16,
            optim: OptimSpec {
                peak_lr: 2e-3,
                warmup_steps: total_steps / 10,
                min_lr_ratio: 0.1,
                ..OptimSpec::default()
            },
            quality: QualitySpec {
                min_accuracy: 0.0,
                max_loss: 10.0,
                max_regression: 0.05,
                eval_examples: 256,
            },
        }
    }

    /// A short name for logs and checkpoint metadata.
    pub fn model_name(&self) -> &'static str {
        match &self.model {
            ModelSpec::Mlp { .. } => "mlp",
            ModelSpec::FashionCnn => "fashion-cnn",
            ModelSpec::BertLora {
                base: BertBase::TinyRandom { .. },
                ..
            } => "tiny-bert-lora",
            ModelSpec::BertLora { .. } => "bert-lora",
        }
    }

    /// BLAKE3 of the spec's JSON (fields in declaration order): checkpoints record it so a
    /// checkpoint from another job, or from the same job id with other numbers, is refused.
    pub fn fingerprint(&self) -> [u8; 32] {
        // Serialising plain structs, strings and numbers cannot fail.
        let json = serde_json::to_vec(self).expect("TrainSpec serialises to JSON");
        *blake3::hash(&json).as_bytes()
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |field, reason: &str| {
            Err(TrainerError::Spec {
                field,
                reason: reason.to_string(),
            })
        };
        if self.effective_batch == 0 {
            return bad("effective_batch", "must be at least 1");
        }
        if self.total_steps == 0 {
            return bad("total_steps", "must be at least 1");
        }
        let o = &self.optim;
        if !(o.peak_lr.is_finite() && o.peak_lr > 0.0) {
            return bad("optim.peak_lr", "must be a positive number");
        }
        if !(0.0..1.0).contains(&o.beta1) || !(0.0..1.0).contains(&o.beta2) {
            return bad("optim.beta1/beta2", "must lie in [0, 1)");
        }
        if !(0.0..=1.0).contains(&o.min_lr_ratio) {
            return bad("optim.min_lr_ratio", "must lie in [0, 1]");
        }
        if self.quality.eval_examples == 0 {
            return bad("quality.eval_examples", "must be at least 1");
        }
        match &self.model {
            ModelSpec::Mlp { hidden } if *hidden == 0 => bad("model.hidden", "must be at least 1"),
            ModelSpec::BertLora {
                rank,
                num_classes,
                max_len,
                base,
                targets,
                ..
            } => {
                if *rank == 0 {
                    return bad("model.rank", "must be at least 1");
                }
                if targets.is_empty() || !targets.windows(2).all(|w| w[0] < w[1]) {
                    return bad(
                        "model.targets",
                        "must name at least one of query, key, value, in that order, once each",
                    );
                }
                if *num_classes < 2 {
                    return bad("model.num_classes", "must be at least 2");
                }
                if *max_len == 0 {
                    return bad("model.max_len", "must be at least 1");
                }
                if let BertBase::TinyRandom { hidden, heads, .. } = base
                    && (*heads == 0 || hidden % heads != 0)
                {
                    return bad("model.base.heads", "must divide hidden");
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
