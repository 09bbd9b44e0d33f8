//! A job ready to train or verify: its spec, its data, any frozen base model, the device.
//! Providers and verifiers build one per job and share it (it is immutable).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::Device;

use crate::data::{Dataset, FashionMnist, Split, TextDataset, parse_ag_news_csv, parse_jsonl};
use crate::error::{Result, TrainerError};
use crate::model::bert::{BertConfig, BertEncoder, BertLora, load_tokenizer};
use crate::model::{FashionCnn, Mlp, Model};
use crate::spec::{BertBase, ModelSpec, TrainSpec};
use crate::trainer::MemoryNeed;

/// The tokenizer file of a `bert-lora` job's model folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// A text job's training examples, as JSONL (`data::to_jsonl`), in its training data blob.
pub const TRAIN_JSONL: &str = "train.jsonl";
/// A text job's held-out examples, as JSONL, in its eval data blob.
pub const EVAL_JSONL: &str = "eval.jsonl";

pub struct Job {
    pub spec: TrainSpec,
    pub train: Arc<dyn Dataset>,
    pub eval: Arc<dyn Dataset>,
    encoder: Option<Arc<BertEncoder>>,
    pub device: Device,
}

/// Fashion-MNIST's training set and the first `eval_examples` test images, loaded once and
/// shared by every job on them.
pub fn load_fashion(
    dir: &Path,
    eval_examples: usize,
) -> Result<(Arc<dyn Dataset>, Arc<dyn Dataset>)> {
    let train = FashionMnist::load(dir, Split::Train, None)?;
    let eval = FashionMnist::load(dir, Split::Test, Some(eval_examples))?;
    Ok((Arc::new(train), Arc::new(eval)))
}

impl Job {
    /// `encoder` is required for `bert-lora` with a pretrained base and ignored otherwise.
    pub fn new(
        spec: TrainSpec,
        train: Arc<dyn Dataset>,
        eval: Arc<dyn Dataset>,
        encoder: Option<Arc<BertEncoder>>,
        device: Device,
    ) -> Result<Self> {
        spec.validate()?;
        if train.is_empty() || eval.is_empty() {
            return Err(TrainerError::Spec {
                field: "dataset",
                reason: "training and eval sets must hold at least one example".into(),
            });
        }
        let encoder = match &spec.model {
            ModelSpec::BertLora {
                base:
                    BertBase::TinyRandom {
                        layers,
                        hidden,
                        heads,
                        intermediate,
                        seed,
                    },
                max_len,
                ..
            } => {
                let cfg = tiny_config(*layers, *hidden, *heads, *intermediate, *max_len);
                Some(Arc::new(BertEncoder::tiny_random(cfg, *seed, &device)?))
            }
            ModelSpec::BertLora {
                base: BertBase::Pretrained { name },
                ..
            } => Some(encoder.ok_or_else(|| {
                TrainerError::Model(format!(
                    "bert-lora job needs the pretrained encoder {name:?}"
                ))
            })?),
            _ => None,
        };
        let classes = match &spec.model {
            ModelSpec::BertLora { num_classes, .. } => *num_classes,
            _ => 10,
        };
        if train.num_classes() != classes || eval.num_classes() != classes {
            return Err(TrainerError::Spec {
                field: "model.num_classes",
                reason: format!(
                    "the model has {classes} classes, the data {}",
                    train.num_classes()
                ),
            });
        }
        Ok(Self {
            spec,
            train,
            eval,
            encoder,
            device,
        })
    }

    /// A Fashion-MNIST job (`mlp` or `fashion-cnn`) read from `dir`.
    pub fn fashion(spec: TrainSpec, dir: &Path, device: Device) -> Result<Self> {
        let (train, eval) = load_fashion(dir, spec.quality.eval_examples)?;
        Self::new(spec, train, eval, None, device)
    }

    /// A pretrained `bert-lora` job: encoder and tokenizer from `model_dir`; train and eval
    /// data from AG News CSV (`.csv`) or JSONL (anything else) files.
    pub fn bert_lora_pretrained(
        spec: TrainSpec,
        model_dir: &Path,
        train: &Path,
        eval: &Path,
        device: Device,
    ) -> Result<Self> {
        let encoder = Arc::new(BertEncoder::load(model_dir, &device)?);
        Self::text(
            spec,
            Some(encoder),
            &model_dir.join(TOKENIZER_FILE),
            train,
            eval,
            device,
        )
    }

    /// A `bert-lora` job as the node unpacks it: `tokenizer.json` (and, for a pretrained
    /// base, `config.json` + `model.safetensors`) in `model_dir`; [`TRAIN_JSONL`] and
    /// [`EVAL_JSONL`] in `data_dir`.
    pub fn bert_lora_dirs(
        spec: TrainSpec,
        model_dir: &Path,
        data_dir: &Path,
        device: Device,
    ) -> Result<Self> {
        let encoder = match &spec.model {
            ModelSpec::BertLora {
                base: BertBase::Pretrained { .. },
                ..
            } => Some(Arc::new(BertEncoder::load(model_dir, &device)?)),
            _ => None,
        };
        Self::text(
            spec,
            encoder,
            &model_dir.join(TOKENIZER_FILE),
            &data_dir.join(TRAIN_JSONL),
            &data_dir.join(EVAL_JSONL),
            device,
        )
    }

    fn text(
        spec: TrainSpec,
        encoder: Option<Arc<BertEncoder>>,
        tokenizer: &Path,
        train: &Path,
        eval: &Path,
        device: Device,
    ) -> Result<Self> {
        let ModelSpec::BertLora {
            max_len,
            num_classes,
            ..
        } = &spec.model
        else {
            return Err(TrainerError::Spec {
                field: "model",
                reason: "not a bert-lora job".into(),
            });
        };
        let tok = load_tokenizer(tokenizer)?;
        let read = |p: &Path| -> Result<Arc<dyn Dataset>> {
            let ex = if p.extension().is_some_and(|e| e == "csv") {
                parse_ag_news_csv(p)?
            } else {
                parse_jsonl(p, *num_classes)?
            };
            Ok(Arc::new(TextDataset::tokenize(
                &ex,
                &tok,
                *max_len,
                *num_classes,
            )?))
        };
        let (tr, ev) = (read(train)?, read(eval)?);
        let job = Self::new(spec, tr, ev, encoder, device)?;
        // Every id the tokenizer can produce must have an embedding row, or training fails
        // at the first unlucky batch instead of here.
        let vocab = job.encoder.as_ref().map_or(0, |e| e.config.vocab_size);
        if tok.get_vocab_size(true) > vocab {
            return Err(TrainerError::Tokenizer {
                path: tokenizer.to_path_buf(),
                reason: format!(
                    "{} tokens but the encoder embeds {vocab}: tokenizer and model do not match",
                    tok.get_vocab_size(true)
                ),
            });
        }
        Ok(job)
    }

    /// A fresh model initialised from `seed` (the job seed, or another for the junk cheat).
    pub fn build_model(&self, seed: u64) -> Result<Box<dyn Model>> {
        let dev = &self.device;
        Ok(match &self.spec.model {
            ModelSpec::Mlp { hidden } => Box::new(Mlp::new(*hidden, seed, dev)?),
            ModelSpec::FashionCnn => Box::new(FashionCnn::new(seed, dev)?),
            ModelSpec::BertLora {
                rank,
                alpha,
                targets,
                num_classes,
                ..
            } => {
                let enc = self.encoder.clone().ok_or_else(|| {
                    TrainerError::Model("bert-lora job without an encoder".into())
                })?;
                Box::new(BertLora::new(
                    enc,
                    *rank,
                    *alpha,
                    targets,
                    *num_classes,
                    seed,
                    dev,
                )?)
            }
        })
    }

    /// The trainable tensors' shapes by name: what a checkpoint of this job must hold.
    pub fn param_shapes(&self) -> Result<BTreeMap<String, Vec<usize>>> {
        let m = self.build_model(0)?;
        Ok(m.params()
            .iter()
            .map(|(k, v)| (k.clone(), v.dims().to_vec()))
            .collect())
    }

    /// How many eval examples the quality test uses.
    pub fn eval_len(&self) -> usize {
        self.eval.len().min(self.spec.quality.eval_examples)
    }
}

/// What `model` needs in memory to train ([`MemoryNeed`]), worked out before any data or
/// weights are fetched, so a provider can decide whether to bid. The model is built on the
/// CPU from the spec alone (weights from `seed`; their values do not matter here). `None` for
/// a pretrained encoder: its size is in its weights, which come with the job's model blob,
/// so the trainer checks it when it starts.
pub fn memory_need(model: &ModelSpec, seed: u64) -> Result<Option<MemoryNeed>> {
    let dev = Device::Cpu;
    let built: Box<dyn Model> = match model {
        ModelSpec::Mlp { hidden } => Box::new(Mlp::new(*hidden, seed, &dev)?),
        ModelSpec::FashionCnn => Box::new(FashionCnn::new(seed, &dev)?),
        ModelSpec::BertLora {
            base: BertBase::Pretrained { .. },
            ..
        } => return Ok(None),
        ModelSpec::BertLora {
            base:
                BertBase::TinyRandom {
                    layers,
                    hidden,
                    heads,
                    intermediate,
                    seed: base_seed,
                },
            rank,
            alpha,
            targets,
            num_classes,
            max_len,
        } => {
            let cfg = tiny_config(*layers, *hidden, *heads, *intermediate, *max_len);
            let enc = Arc::new(BertEncoder::tiny_random(cfg, *base_seed, &dev)?);
            Box::new(BertLora::new(
                enc,
                *rank,
                *alpha,
                targets,
                *num_classes,
                seed,
                &dev,
            )?)
        }
    };
    Ok(Some(MemoryNeed::of(built.as_ref())))
}

/// The tiny random BERT's vocabulary size: a job's word tokenizer may use at most this many ids.
pub const TINY_VOCAB: usize = 512;

/// The config of a tiny random BERT (vocabulary size fixed at [`TINY_VOCAB`] ids).
pub fn tiny_config(
    layers: usize,
    hidden: usize,
    heads: usize,
    intermediate: usize,
    max_len: usize,
) -> BertConfig {
    BertConfig {
        vocab_size: TINY_VOCAB,
        hidden_size: hidden,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        intermediate_size: intermediate,
        max_position_embeddings: max_len.max(8),
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        hidden_act: "gelu".into(),
    }
}
