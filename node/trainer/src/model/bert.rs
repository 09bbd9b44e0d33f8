//! A BERT encoder whose forward pass we write ourselves, so gradients reach LoRA adapters in
//! every layer: candle's fused LayerNorm records no backward op, which would cut the
//! gradient path at the first LayerNorm. Ours is built from primitive ops.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::{D, Device, Tensor};
use serde::Deserialize;
use tokenizers::Tokenizer;

use super::{Model, Params, add_var, frozen_linear, linear};
use crate::data::Input;
use crate::error::{Result, TrainerError};
use crate::init::{normal, uniform};
use crate::spec::LoraTarget;

/// The fields of a Hugging Face BERT `config.json` the encoder needs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}

/// Frozen encoder weights by their Hugging Face names (any `bert.` prefix removed).
pub struct BertEncoder {
    pub config: BertConfig,
    weights: HashMap<String, Tensor>,
}

impl BertEncoder {
    /// Loads `config.json` and `model.safetensors` from `dir`.
    pub fn load(dir: &Path, dev: &Device) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        let st_path = dir.join("model.safetensors");
        if !st_path.is_file() {
            return Err(TrainerError::Missing {
                what: "BERT weights",
                path: st_path,
                hint: "run scripts/setup (installs all-MiniLM-L6-v2) or set GPUCHAIN_MINILM_DIR"
                    .into(),
            });
        }
        let text =
            std::fs::read_to_string(&cfg_path).map_err(|e| TrainerError::io(&cfg_path, e))?;
        let config: BertConfig =
            serde_json::from_str(&text).map_err(|e| TrainerError::BadData {
                path: cfg_path.clone(),
                line: e.line(),
                reason: e.to_string(),
            })?;
        if config.hidden_act != "gelu" {
            return Err(TrainerError::Model(format!(
                "{}: hidden_act {:?} is not supported (only \"gelu\")",
                cfg_path.display(),
                config.hidden_act
            )));
        }
        let raw = candle_core::safetensors::load(&st_path, dev)
            .map_err(|e| TrainerError::Model(format!("{}: {e}", st_path.display())))?;
        let weights = raw
            .into_iter()
            .map(|(k, v)| (k.strip_prefix("bert.").map(str::to_string).unwrap_or(k), v))
            .collect();
        let enc = Self { config, weights };
        enc.check_shapes()
            .map_err(|e| TrainerError::Model(format!("{}: {e}", st_path.display())))?;
        Ok(enc)
    }

    /// A random encoder (normal 0.02 weights, unit LayerNorms) for tests and benches.
    pub fn tiny_random(config: BertConfig, seed: u64, dev: &Device) -> Result<Self> {
        let mut weights = HashMap::new();
        for (name, shape) in expected_shapes(&config) {
            let t = if name.ends_with("LayerNorm.weight") {
                Tensor::ones(shape.as_slice(), candle_core::DType::F32, dev)?
            } else if name.ends_with(".bias") {
                Tensor::zeros(shape.as_slice(), candle_core::DType::F32, dev)?
            } else {
                normal(seed, &name, &shape, 0.02, dev)?
            };
            weights.insert(name, t);
        }
        Ok(Self { config, weights })
    }

    /// The frozen tensors by Hugging Face name.
    pub fn weights(&self) -> &HashMap<String, Tensor> {
        &self.weights
    }

    fn check_shapes(&self) -> std::result::Result<(), String> {
        for (name, shape) in expected_shapes(&self.config) {
            let t = self
                .weights
                .get(&name)
                .ok_or_else(|| format!("tensor {name} is missing"))?;
            if t.dims() != shape.as_slice() {
                return Err(format!(
                    "tensor {name} has shape {:?}, config implies {shape:?}",
                    t.dims()
                ));
            }
            if t.dtype() != candle_core::DType::F32 {
                return Err(format!("tensor {name} is {:?}, expected F32", t.dtype()));
            }
        }
        Ok(())
    }

    fn w(&self, name: &str) -> &Tensor {
        // `load` and `tiny_random` guarantee every name of `expected_shapes`.
        self.weights
            .get(name)
            .expect("encoder tensor checked at load")
    }

    /// Hidden states `[batch, len, hidden]`. `lora` adds the adapters' low-rank updates to
    /// query and value; `fused_ln` swaps in candle's fused LayerNorm, which only the test that
    /// cross-checks our primitive LayerNorm uses.
    pub fn forward(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        lora: Option<&Lora<'_>>,
        fused_ln: bool,
    ) -> Result<Tensor> {
        self.forward_impl(ids, mask, lora, fused_ln, Projections::Frozen)
    }

    fn forward_impl(
        &self,
        ids: &Tensor,
        mask: &Tensor,
        lora: Option<&Lora<'_>>,
        fused_ln: bool,
        projections: Projections,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (b, s) = ids.dims2()?;
        if s > c.max_position_embeddings {
            return Err(TrainerError::Model(format!(
                "sequence length {s} exceeds max_position_embeddings {}",
                c.max_position_embeddings
            )));
        }
        let top = ids.max_all()?.to_scalar::<u32>()? as usize;
        if top >= c.vocab_size {
            return Err(TrainerError::Model(format!(
                "token id {top} is outside the encoder's vocabulary of {} (tokenizer and model do not match)",
                c.vocab_size
            )));
        }
        let h = c.hidden_size;
        let ln = |x: &Tensor, name: &str| -> Result<Tensor> {
            let g = self.w(&format!("{name}.weight"));
            let beta = self.w(&format!("{name}.bias"));
            if fused_ln {
                Ok(candle_nn::ops::layer_norm(
                    &x.contiguous()?,
                    g,
                    beta,
                    c.layer_norm_eps as f32,
                )?)
            } else {
                layer_norm(x, g, beta, c.layer_norm_eps)
            }
        };
        let words = self
            .w("embeddings.word_embeddings.weight")
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, s, h))?;
        let pos = self
            .w("embeddings.position_embeddings.weight")
            .narrow(0, 0, s)?;
        let tt = self
            .w("embeddings.token_type_embeddings.weight")
            .narrow(0, 0, 1)?;
        let x = words.broadcast_add(&pos)?.broadcast_add(&tt)?;
        let mut x = ln(&x, "embeddings.LayerNorm")?;

        let nh = c.num_attention_heads;
        let d = h / nh;
        // 0 where attended, a large negative number on padding: softmax then ignores it.
        let bias = mask.affine(1e9, -1e9)?.reshape((b, 1, 1, s))?;
        let heads = |t: Tensor| -> Result<Tensor> {
            Ok(t.reshape((b, s, nh, d))?.transpose(1, 2)?.contiguous()?)
        };
        for i in 0..c.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            let lin = |x: &Tensor, name: &str| -> Result<Tensor> {
                let w = self.w(&format!("{p}.{name}.weight"));
                let b = Some(self.w(&format!("{p}.{name}.bias")));
                match projections {
                    Projections::Frozen => frozen_linear(x, w, b),
                    Projections::Plain => linear(x, w, b),
                }
            };
            let mut q = lin(&x, "attention.self.query")?;
            let mut k = lin(&x, "attention.self.key")?;
            let mut v = lin(&x, "attention.self.value")?;
            if let Some(l) = lora {
                for (out, which) in [(&mut q, "query"), (&mut k, "key"), (&mut v, "value")] {
                    // The model's targets decide which adapters exist; a checkpoint must hold
                    // exactly those (its shapes are checked against the job's), so absent
                    // means not a target.
                    if let Some(d) = l.delta(&x, i, which)? {
                        *out = (&*out + d)?;
                    }
                }
            }
            let (q, k, v) = (heads(q)?, heads(k)?, heads(v)?);
            let scores = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?.broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let ctx = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b, s, h))?;
            let attn = ln(
                &(lin(&ctx, "attention.output.dense")? + &x)?,
                &format!("{p}.attention.output.LayerNorm"),
            )?;
            let inter = lin(&attn, "intermediate.dense")?.gelu_erf()?;
            x = ln(
                &(lin(&inter, "output.dense")? + &attn)?,
                &format!("{p}.output.LayerNorm"),
            )?;
        }
        Ok(x)
    }
}

/// How the encoder's frozen projections are recorded for backward. Both give the same numbers
/// bit for bit; `Plain` also computes the (discarded) gradients of the frozen weights, as
/// candle's `Matmul` does, and is kept as the reference the tests compare `Frozen` against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Projections {
    Frozen,
    #[cfg_attr(not(test), allow(dead_code))] // only the tests build the reference
    Plain,
}

/// LayerNorm over the last dimension from primitive ops, so it has a backward pass.
pub fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let y = xc.broadcast_div(&(var + eps)?.sqrt()?)?;
    Ok(y.broadcast_mul(gamma)?.broadcast_add(beta)?)
}

fn expected_shapes(c: &BertConfig) -> Vec<(String, Vec<usize>)> {
    let h = c.hidden_size;
    let mut v = vec![
        (
            "embeddings.word_embeddings.weight".to_string(),
            vec![c.vocab_size, h],
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![c.max_position_embeddings, h],
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![c.type_vocab_size, h],
        ),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
    ];
    for i in 0..c.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        for (name, out, inp) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", c.intermediate_size, h),
            ("output.dense", h, c.intermediate_size),
        ] {
            v.push((format!("{p}.{name}.weight"), vec![out, inp]));
            v.push((format!("{p}.{name}.bias"), vec![out]));
        }
        for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
            v.push((format!("{p}.{ln}.weight"), vec![h]));
            v.push((format!("{p}.{ln}.bias"), vec![h]));
        }
    }
    v
}

/// The adapters of one forward pass: `delta = x·Aᵀ·Bᵀ · alpha/rank`.
pub struct Lora<'a> {
    params: &'a Params,
    scale: f64,
}

impl Lora<'_> {
    /// `None` where the projection carries no adapter.
    fn delta(&self, x: &Tensor, layer: usize, which: &str) -> Result<Option<Tensor>> {
        let get = |ab: &str| {
            self.params
                .get(&format!("lora.{layer}.{which}.{ab}"))
                .map(|v| v.as_tensor())
        };
        match (get("a"), get("b")) {
            (Some(a), Some(b)) => {
                let down = linear(x, a, None)?;
                Ok(Some((linear(&down, b, None)? * self.scale)?))
            }
            (None, None) => Ok(None),
            _ => Err(TrainerError::Model(format!(
                "LoRA adapter lora.{layer}.{which} has only one of its two matrices"
            ))),
        }
    }
}

/// Frozen encoder + LoRA on the chosen attention projections of every layer + a linear head on
/// mean-pooled tokens.
pub struct BertLora {
    encoder: Arc<BertEncoder>,
    params: Params,
    scale: f64,
}

impl BertLora {
    /// A's are uniform(±1/√hidden) and B's zero, so training starts from the base model.
    pub fn new(
        encoder: Arc<BertEncoder>,
        rank: usize,
        alpha: f64,
        targets: &[LoraTarget],
        classes: usize,
        seed: u64,
        dev: &Device,
    ) -> Result<Self> {
        let h = encoder.config.hidden_size;
        let bound = 1.0 / (h as f64).sqrt();
        let mut params = Params::new();
        for i in 0..encoder.config.num_hidden_layers {
            for which in targets.iter().map(|t| t.name()) {
                let a = format!("lora.{i}.{which}.a");
                add_var(&mut params, &a, uniform(seed, &a, &[rank, h], bound, dev)?)?;
                let b = format!("lora.{i}.{which}.b");
                add_var(
                    &mut params,
                    &b,
                    Tensor::zeros((h, rank), candle_core::DType::F32, dev)?,
                )?;
            }
        }
        add_var(
            &mut params,
            "head.weight",
            uniform(seed, "head.weight", &[classes, h], bound, dev)?,
        )?;
        add_var(
            &mut params,
            "head.bias",
            uniform(seed, "head.bias", &[classes], bound, dev)?,
        )?;
        Ok(Self {
            encoder,
            params,
            scale: alpha / rank as f64,
        })
    }

    /// Logits with candle's fused LayerNorm (no gradients): the cross-check for our forward.
    pub fn forward_fused_ln(&self, input: &Input) -> Result<Tensor> {
        self.forward_inner(input, true, Projections::Frozen)
    }

    fn forward_inner(
        &self,
        input: &Input,
        fused_ln: bool,
        projections: Projections,
    ) -> Result<Tensor> {
        let Input::Tokens { ids, mask } = input else {
            return Err(TrainerError::Model(
                "bert-lora takes tokens, the dataset gives images".into(),
            ));
        };
        let lora = Lora {
            params: &self.params,
            scale: self.scale,
        };
        let hs = self
            .encoder
            .forward_impl(ids, mask, Some(&lora), fused_ln, projections)?;
        let m = mask.unsqueeze(2)?;
        // Mean over real tokens; the clamp keeps an all-padding row finite.
        let pooled = hs
            .broadcast_mul(&m)?
            .sum(1)?
            .broadcast_div(&m.sum(1)?.clamp(1.0, f64::MAX)?)?;
        let p = |n: &str| -> Result<&Tensor> {
            self.params
                .get(n)
                .map(|v| v.as_tensor())
                .ok_or_else(|| TrainerError::Model(format!("head tensor {n} is missing")))
        };
        linear(&pooled, p("head.weight")?, Some(p("head.bias")?))
    }
}

impl Model for BertLora {
    fn params(&self) -> &Params {
        &self.params
    }

    fn forward(&self, input: &Input) -> Result<Tensor> {
        self.forward_inner(input, false, Projections::Frozen)
    }

    fn bytes_per_example(&self) -> u64 {
        let c = &self.encoder.config;
        // Per layer and token: ~12 hidden-sized and 2 intermediate-sized activations kept for
        // backward, plus the attention matrix per head; doubled for their gradients.
        let per_token =
            12 * c.hidden_size + 2 * c.intermediate_size + 3 * c.num_attention_heads * 128;
        (2 * 4 * c.num_hidden_layers * 128 * per_token) as u64
    }
}

/// Loads `tokenizer.json` with its own padding and truncation switched off: the dataset pads
/// and truncates to the job's `max_len`.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    let mut t = Tokenizer::from_file(path).map_err(|e| TrainerError::Tokenizer {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    t.with_padding(None);
    t.with_truncation(None)
        .map_err(|e| TrainerError::Tokenizer {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok(t)
}

/// A whitespace, lower-casing word-level tokenizer over `words` (id 0 = `[PAD]`, 1 = `[UNK]`):
/// the tiny BERT's vocabulary, built in memory.
pub fn word_tokenizer(words: &[&str]) -> Result<Tokenizer> {
    Tokenizer::from_bytes(word_tokenizer_json(words).as_bytes()).map_err(|e| {
        TrainerError::Tokenizer {
            path: "<in-memory word tokenizer>".into(),
            reason: e.to_string(),
        }
    })
}

/// [`word_tokenizer`] as a `tokenizer.json` (the same words give the same bytes), for a job
/// that ships its vocabulary as a blob.
pub fn word_tokenizer_json(words: &[&str]) -> String {
    let mut vocab = serde_json::Map::new();
    vocab.insert("[PAD]".into(), 0.into());
    vocab.insert("[UNK]".into(), 1.into());
    for w in words {
        let next = vocab.len();
        vocab.entry(w.to_lowercase()).or_insert(next.into());
    }
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    })
    .to_string()
}

/// `GPUCHAIN_MINILM_DIR`, else `.cache/models/all-MiniLM-L6-v2` under the workspace root
/// (where scripts/setup unpacks the all-MiniLM-L6-v2 wheel).
pub fn minilm_dir() -> std::path::PathBuf {
    std::env::var_os("GPUCHAIN_MINILM_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/models/all-MiniLM-L6-v2")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;

    /// Bits of every element, so equality means bit-identical (NaNs included).
    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("f32 tensor")
            .into_iter()
            .map(f32::to_bits)
            .collect()
    }

    /// Logits, loss and every trainable tensor's gradient with the frozen projections recorded
    /// as `FrozenMatmul` and as candle's `Matmul`: they must agree bit for bit, since training,
    /// checkpoints and the spot check rely on CPU steps being reproducible across versions.
    fn frozen_matches_plain(enc: Arc<BertEncoder>, batch: usize, len: usize) {
        let dev = Device::Cpu;
        let vocab = enc.config.vocab_size as u32;
        for targets in [&LoraTarget::DEFAULT[..], &LoraTarget::ALL[..]] {
            let model = BertLora::new(enc.clone(), 4, 8.0, targets, 3, 5, &dev).unwrap();
            // B starts at zero, which would leave A's gradient zero: give B values.
            for (name, var) in model.params() {
                if name.ends_with(".b") {
                    var.set(&normal(9, name, var.dims(), 0.05, &dev).unwrap())
                        .unwrap();
                }
            }
            let ids: Vec<u32> = (0..batch * len)
                .map(|i| ((i as u32).wrapping_mul(2_654_435_761) % vocab).max(1))
                .collect();
            let ids = Tensor::from_vec(ids, (batch, len), &dev).unwrap();
            // The last row is half padding, so the attention bias and pooling take part.
            let mask: Vec<f32> = (0..batch * len)
                .map(|i| {
                    if i / len == batch - 1 && i % len >= len / 2 {
                        0.0
                    } else {
                        1.0
                    }
                })
                .collect();
            let mask = Tensor::from_vec(mask, (batch, len), &dev).unwrap();
            let labels: Vec<u32> = (0..batch as u32).map(|i| i % 3).collect();
            let labels = Tensor::from_vec(labels, batch, &dev).unwrap();
            let input = Input::Tokens { ids, mask };
            let run = |projections| {
                let logits = model.forward_inner(&input, false, projections).unwrap();
                let loss = candle_nn::loss::cross_entropy(&logits, &labels).unwrap();
                let grads = loss.backward().unwrap();
                let g: Vec<(String, Vec<u32>)> = model
                    .params()
                    .iter()
                    .map(|(n, v)| (n.clone(), bits(grads.get(v.as_tensor()).expect(n))))
                    .collect();
                (bits(&logits), bits(&loss), g)
            };
            let (frozen, plain) = (run(Projections::Frozen), run(Projections::Plain));
            assert_eq!(frozen.0, plain.0, "logits differ ({targets:?})");
            assert_eq!(frozen.1, plain.1, "loss differs ({targets:?})");
            for ((name, f), (_, p)) in frozen.2.iter().zip(&plain.2) {
                assert!(f.iter().any(|&b| b != 0), "{name}: zero gradient");
                assert_eq!(f, p, "gradient of {name} differs ({targets:?})");
            }
        }
    }

    #[test]
    fn frozen_projections_give_bit_identical_gradients_tiny() {
        let config = BertConfig {
            vocab_size: 50,
            hidden_size: 32,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 64,
            max_position_embeddings: 64,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_act: "gelu".into(),
        };
        let enc = BertEncoder::tiny_random(config, 3, &Device::Cpu).unwrap();
        frozen_matches_plain(Arc::new(enc), 3, 12);
    }

    #[test]
    fn frozen_projections_give_bit_identical_gradients_minilm() {
        let dir = minilm_dir();
        if !dir.join("model.safetensors").is_file() {
            println!("note: skipping, no MiniLM weights at {}", dir.display());
            return;
        }
        let enc = BertEncoder::load(&dir, &Device::Cpu).unwrap();
        frozen_matches_plain(Arc::new(enc), 4, 32);
    }
}
