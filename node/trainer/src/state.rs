//! The training state and its hash (docs/interfaces.md, "Training states and spot checks").
//!
//! `state_hash` = BLAKE3 of:
//!   `"gpuchain-state-v1"` ‖ step u64 ‖ data cursor u64 ‖ entry count u32 ‖ entries,
//! entries sorted by name, each `name len u32 ‖ name (UTF-8) ‖ dtype tag u8 (0 = f32) ‖
//! rank u32 ‖ dims u64… ‖ data len u64 ‖ data (little-endian, row-major)`, all integers
//! little-endian. Entry names: `param/<p>`, `adam.m/<p>`, `adam.v/<p>` for every trainable
//! tensor `p`. No file format is involved, so any holder of the tensors can recompute it.

use std::collections::BTreeMap;
use std::fmt;

use candle_core::{DType, Tensor};

use crate::error::{Result, TrainerError};

/// A 32-byte BLAKE3 state commitment.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateHash(pub [u8; 32]);

impl fmt::Display for StateHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for StateHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StateHash({self})")
    }
}

/// Everything that determines the next step: step, cursor, weights and optimizer moments.
/// Tensors are copies, so a snapshot does not change when training continues.
#[derive(Clone, Debug)]
pub struct TrainState {
    pub step: u64,
    pub cursor: u64,
    pub params: BTreeMap<String, Tensor>,
    pub adam_m: BTreeMap<String, Tensor>,
    pub adam_v: BTreeMap<String, Tensor>,
}

/// Little-endian bytes of an f32 tensor (moved to the CPU if needed).
pub fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>> {
    if t.dtype() != DType::F32 {
        return Err(TrainerError::Model(format!(
            "expected an f32 tensor, found {:?}",
            t.dtype()
        )));
    }
    let v = t.flatten_all()?.to_vec1::<f32>()?;
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    Ok(out)
}

impl TrainState {
    /// Entries in canonical (sorted-name) order.
    pub fn entries(&self) -> Vec<(String, &Tensor)> {
        let mut all: Vec<(String, &Tensor)> = Vec::new();
        for (prefix, map) in [
            ("param/", &self.params),
            ("adam.m/", &self.adam_m),
            ("adam.v/", &self.adam_v),
        ] {
            all.extend(map.iter().map(|(k, t)| (format!("{prefix}{k}"), t)));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub fn hash(&self) -> Result<StateHash> {
        let entries = self.entries();
        let mut h = blake3::Hasher::new();
        h.update(b"gpuchain-state-v1");
        h.update(&self.step.to_le_bytes());
        h.update(&self.cursor.to_le_bytes());
        h.update(&(entries.len() as u32).to_le_bytes());
        for (name, t) in entries {
            h.update(&(name.len() as u32).to_le_bytes());
            h.update(name.as_bytes());
            h.update(&[0u8]);
            h.update(&(t.rank() as u32).to_le_bytes());
            for d in t.dims() {
                h.update(&(*d as u64).to_le_bytes());
            }
            hash_data(&mut h, t)?;
        }
        Ok(StateHash(*h.finalize().as_bytes()))
    }

    /// BLAKE3 of the trainable weights alone (names, shapes, bytes): equal weights mean no
    /// work was done, whatever the step counter says.
    pub fn weights_hash(&self) -> Result<[u8; 32]> {
        let mut h = blake3::Hasher::new();
        h.update(b"gpuchain-weights-v1");
        for (name, t) in &self.params {
            h.update(&(name.len() as u32).to_le_bytes());
            h.update(name.as_bytes());
            for d in t.dims() {
                h.update(&(*d as u64).to_le_bytes());
            }
            hash_data(&mut h, t)?;
        }
        Ok(*h.finalize().as_bytes())
    }
}

/// `byte len u64 ‖ little-endian data`, converted in small chunks: hashing runs after every
/// step, so it avoids a second full-size copy of each tensor.
fn hash_data(h: &mut blake3::Hasher, t: &Tensor) -> Result<()> {
    if t.dtype() != DType::F32 {
        return Err(TrainerError::Model(format!(
            "expected an f32 tensor, found {:?}",
            t.dtype()
        )));
    }
    let v = t.flatten_all()?.to_vec1::<f32>()?;
    h.update(&(4 * v.len() as u64).to_le_bytes());
    let mut buf = Vec::with_capacity(4 * 1024);
    for chunk in v.chunks(1024) {
        buf.clear();
        for x in chunk {
            buf.extend_from_slice(&x.to_le_bytes());
        }
        h.update(&buf);
    }
    Ok(())
}

/// The commitment root over an interval's ordered state hashes, as docs/interfaces.md fixes it:
/// `state_root = BLAKE3(state_hashes[0] ‖ state_hashes[1] ‖ …)`.
pub fn commitment_root(hashes: &[StateHash]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for s in hashes {
        h.update(&s.0);
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commitment_root_is_blake3_of_the_concatenated_hashes() {
        let a = StateHash([1; 32]);
        let b = StateHash([2; 32]);
        let mut cat = Vec::new();
        cat.extend_from_slice(&a.0);
        cat.extend_from_slice(&b.0);
        assert_eq!(commitment_root(&[a, b]), *blake3::hash(&cat).as_bytes());
        assert_ne!(commitment_root(&[a, b]), commitment_root(&[b, a]));
    }
}
