//! Checkpoint files: safetensors holding every entry of the training state (the same names
//! as the state hash: `param/…`, `adam.m/…`, `adam.v/…`) and metadata naming the job, epoch,
//! step, data cursor, data-order RNG, parent checkpoint and state hash.
//!
//! The bytes are deterministic for a given state: we write the safetensors header ourselves
//! with sorted keys (the safetensors crate keeps metadata in a `HashMap`, whose order varies
//! between processes) and read files back with the safetensors crate, which validates them.
//! So a checkpoint's BLAKE3 (its content address) is reproducible by anyone who replays it.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor};
use safetensors::SafeTensors;

use crate::error::{Result, TrainerError};
use crate::spec::TrainSpec;
use crate::state::{StateHash, TrainState, check_shape, tensor_bytes};

pub const FORMAT: &str = "gpuchain-checkpoint-v1";

/// What a checkpoint says about itself, besides its tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointMeta {
    pub job_id: String,
    /// [`TrainSpec::fingerprint`] of the job that produced it.
    pub spec_fingerprint: [u8; 32],
    pub model: String,
    pub epoch: u64,
    pub step: u64,
    pub data_cursor: u64,
    /// The data-order generator: ChaCha8 keyed by (seed, pass); `pass` is where the cursor is.
    pub rng_seed: u64,
    pub rng_pass: u64,
    /// BLAKE3 of the parent checkpoint's file, `None` for a job's first interval.
    pub parent: Option<[u8; 32]>,
    /// The micro-batch the producer used: exact replays use the same one.
    pub micro_batch: usize,
    pub state_hash: StateHash,
}

#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub meta: CheckpointMeta,
    pub state: TrainState,
}

/// BLAKE3 of a checkpoint file: its content address (iroh-blobs' hash of the same bytes).
pub fn file_hash(bytes: &[u8]) -> [u8; 32] {
    *blake3::hash(bytes).as_bytes()
}

impl Checkpoint {
    /// Serialises to safetensors bytes; the same checkpoint always gives the same bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let m = &self.meta;
        let mut meta = BTreeMap::new();
        meta.insert("format", FORMAT.to_string());
        meta.insert("job_id", m.job_id.clone());
        meta.insert("spec", hex::encode(m.spec_fingerprint));
        meta.insert("model", m.model.clone());
        meta.insert("epoch", m.epoch.to_string());
        meta.insert("step", m.step.to_string());
        meta.insert("data_cursor", m.data_cursor.to_string());
        meta.insert(
            "rng",
            format!("chacha8-data-order seed={} pass={}", m.rng_seed, m.rng_pass),
        );
        meta.insert(
            "parent",
            m.parent.map(hex::encode).unwrap_or_else(|| "none".into()),
        );
        meta.insert("micro_batch", m.micro_batch.to_string());
        meta.insert("state_hash", m.state_hash.to_string());

        // serde_json's map is either sorted or insertion-ordered depending on features;
        // inserting in sorted order makes both give the same bytes.
        let mut header = serde_json::Map::new();
        header.insert(
            "__metadata__".into(),
            serde_json::to_value(&meta).map_err(|e| TrainerError::ckpt(e.to_string()))?,
        );
        let mut data = Vec::new();
        for (name, t) in self.state.entries() {
            let bytes = tensor_bytes(t)?;
            let start = data.len();
            data.extend_from_slice(&bytes);
            header.insert(
                name,
                serde_json::json!({"dtype": "F32", "shape": t.dims(), "data_offsets": [start, data.len()]}),
            );
        }
        let mut head = serde_json::Value::Object(header).to_string().into_bytes();
        // safetensors pads the header with spaces to a multiple of 8.
        while !head.len().is_multiple_of(8) {
            head.push(b' ');
        }
        let mut out = Vec::with_capacity(8 + head.len() + data.len());
        out.extend_from_slice(&(head.len() as u64).to_le_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&data);
        Ok(out)
    }

    /// Parses a checkpoint and checks it is self-consistent (format, fields, state hash).
    /// Whether it belongs to a given job is [`Checkpoint::check_job`]'s business.
    pub fn from_bytes(bytes: &[u8], dev: &Device) -> Result<Self> {
        let bad = |m: String| TrainerError::ckpt(m);
        let (_, md) = SafeTensors::read_metadata(bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let meta = md
            .metadata()
            .as_ref()
            .ok_or_else(|| bad("no metadata".into()))?;
        let field = |k: &str| -> Result<&String> {
            meta.get(k)
                .ok_or_else(|| bad(format!("metadata field `{k}` is missing")))
        };
        let num = |k: &str| -> Result<u64> {
            field(k)?
                .parse()
                .map_err(|_| bad(format!("metadata field `{k}` is not a number")))
        };
        let hash32 = |k: &str, s: &str| -> Result<[u8; 32]> {
            let mut out = [0u8; 32];
            hex::decode_to_slice(s, &mut out)
                .map_err(|_| bad(format!("metadata field `{k}` is not 64 hex digits")))?;
            Ok(out)
        };
        if field("format")? != FORMAT {
            return Err(bad(format!(
                "format {:?}, expected {FORMAT:?}",
                field("format")?
            )));
        }
        let rng = field("rng")?;
        let (rng_seed, rng_pass) = parse_rng(rng)
            .ok_or_else(|| bad(format!("metadata field `rng` is malformed: {rng:?}")))?;
        let parent = match field("parent")?.as_str() {
            "none" => None,
            s => Some(hash32("parent", s)?),
        };
        let meta = CheckpointMeta {
            job_id: field("job_id")?.clone(),
            spec_fingerprint: hash32("spec", field("spec")?)?,
            model: field("model")?.clone(),
            epoch: num("epoch")?,
            step: num("step")?,
            data_cursor: num("data_cursor")?,
            rng_seed,
            rng_pass,
            parent,
            micro_batch: num("micro_batch")? as usize,
            state_hash: StateHash(hash32("state_hash", field("state_hash")?)?),
        };

        let mut state = TrainState {
            step: meta.step,
            cursor: meta.data_cursor,
            params: BTreeMap::new(),
            adam_m: BTreeMap::new(),
            adam_v: BTreeMap::new(),
        };
        for (name, view) in st.tensors() {
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(bad(format!(
                    "tensor {name} is {:?}, expected F32",
                    view.dtype()
                )));
            }
            check_shape(view.shape()).map_err(|e| bad(format!("tensor {name}: {e}")))?;
            let t = Tensor::from_raw_buffer(view.data(), DType::F32, view.shape(), dev)?;
            let (map, key) = if let Some(k) = name.strip_prefix("param/") {
                (&mut state.params, k)
            } else if let Some(k) = name.strip_prefix("adam.m/") {
                (&mut state.adam_m, k)
            } else if let Some(k) = name.strip_prefix("adam.v/") {
                (&mut state.adam_v, k)
            } else {
                return Err(bad(format!("unexpected tensor {name}")));
            };
            map.insert(key.to_string(), t);
        }
        let found = state.hash()?;
        if found != meta.state_hash {
            return Err(bad(format!(
                "tensors hash to {found}, metadata claims {}; the file was altered or is corrupt",
                meta.state_hash
            )));
        }
        Ok(Self { meta, state })
    }

    /// Refuses a checkpoint that is not this job's, or whose tensors do not fit its model.
    pub fn check_job(&self, spec: &TrainSpec, shapes: &BTreeMap<String, Vec<usize>>) -> Result<()> {
        let m = &self.meta;
        if m.job_id != spec.job_id {
            return Err(TrainerError::ckpt(format!(
                "it belongs to job {:?}, not {:?}",
                m.job_id, spec.job_id
            )));
        }
        if m.spec_fingerprint != spec.fingerprint() {
            return Err(TrainerError::ckpt(format!(
                "job {:?} was trained under a different spec (fingerprint {}, expected {})",
                m.job_id,
                hex::encode(m.spec_fingerprint),
                hex::encode(spec.fingerprint())
            )));
        }
        if m.step > spec.total_steps {
            return Err(TrainerError::ckpt(format!(
                "step {} is past the job's {} steps",
                m.step, spec.total_steps
            )));
        }
        let expected_cursor = m.step * spec.effective_batch as u64;
        if m.data_cursor != expected_cursor {
            return Err(TrainerError::ckpt(format!(
                "data cursor {} at step {} (expected {expected_cursor})",
                m.data_cursor, m.step
            )));
        }
        if m.rng_seed != spec.seed {
            return Err(TrainerError::ckpt(format!(
                "data-order seed {} differs from the job's {}",
                m.rng_seed, spec.seed
            )));
        }
        for (label, map) in [
            ("weights", &self.state.params),
            ("adam.m", &self.state.adam_m),
            ("adam.v", &self.state.adam_v),
        ] {
            for (name, shape) in shapes {
                let t = map.get(name).ok_or_else(|| {
                    TrainerError::ckpt(format!("{label} tensor {name} is missing"))
                })?;
                if t.dims() != shape.as_slice() {
                    return Err(TrainerError::ckpt(format!(
                        "{label} tensor {name} has shape {:?}, the model needs {shape:?}",
                        t.dims()
                    )));
                }
            }
            if let Some(extra) = map.keys().find(|k| !shapes.contains_key(*k)) {
                return Err(TrainerError::ckpt(format!(
                    "{label} tensor {extra} is not in the model"
                )));
            }
        }
        Ok(())
    }
}

fn parse_rng(s: &str) -> Option<(u64, u64)> {
    let rest = s.strip_prefix("chacha8-data-order seed=")?;
    let (seed, pass) = rest.split_once(" pass=")?;
    Some((seed.parse().ok()?, pass.parse().ok()?))
}
