//! Checkpoint blobs (safetensors with our metadata) and state preimages (what a provider serves
//! for a spot check), as fetched from untrusted providers. Two inputs per run:
//! - the raw bytes, as a checkpoint and as a preimage;
//! - a real checkpoint and preimage built from a small state the bytes describe, then damaged
//!   by edits the bytes choose, so the fuzzer gets past the headers into the fields.
//!
//! Properties: nothing panics or allocates beyond its input (libFuzzer's `-malloc_limit_mb`
//! catches a claim of huge tensors believed); a checkpoint that is read re-encodes to one that
//! reads to the same metadata and state hash; a preimage that is read re-encodes to exactly its
//! bytes and hashes to their BLAKE3 (its content address).
#![no_main]

use std::collections::BTreeMap;

use candle_core::{Device, Tensor};
use gpuchain_trainer::{Checkpoint, CheckpointMeta, StateHash, TrainState};
use libfuzzer_sys::fuzz_target;

fn check_checkpoint(bytes: &[u8]) {
    if let Ok(c) = Checkpoint::from_bytes(bytes, &Device::Cpu) {
        assert_eq!(c.state.hash().expect("hash"), c.meta.state_hash);
        let again = c.to_bytes().expect("an accepted checkpoint re-encodes");
        let back = Checkpoint::from_bytes(&again, &Device::Cpu)
            .expect("a re-encoded checkpoint reads back");
        assert_eq!(back.meta, c.meta);
        assert_eq!(
            back.to_bytes().expect("re-encodes"),
            again,
            "encoding is deterministic"
        );
    }
}

fn check_preimage(bytes: &[u8]) {
    if let Ok(s) = TrainState::from_preimage(bytes, &Device::Cpu) {
        assert_eq!(
            s.preimage().expect("preimage"),
            bytes,
            "only the canonical form is read"
        );
        assert_eq!(s.hash().expect("hash"), StateHash::of_preimage(bytes));
    }
}

/// A small state whose shapes and values come from `data`.
fn state_from(data: &[u8]) -> Option<TrainState> {
    let (&head, rest) = data.split_first()?;
    let n = usize::from(head % 4) + 1;
    let mut params = BTreeMap::new();
    let mut adam_m = BTreeMap::new();
    let mut adam_v = BTreeMap::new();
    let mut at = 0;
    for k in 0..n {
        let len = usize::from(*rest.get(k).unwrap_or(&1) % 5) + 1;
        let vals: Vec<f32> = (0..len)
            .map(|i| f32::from(*rest.get(at + i).unwrap_or(&0)) / 16.0 - 4.0)
            .collect();
        at += len;
        let t = Tensor::from_vec(vals, len, &Device::Cpu).ok()?;
        let name = format!("layer{k}.w");
        adam_m.insert(name.clone(), t.zeros_like().ok()?);
        adam_v.insert(name.clone(), t.ones_like().ok()?);
        params.insert(name, t);
    }
    Some(TrainState {
        step: u64::from(head),
        cursor: u64::from(head) * 4,
        params,
        adam_m,
        adam_v,
    })
}

/// `bytes` with the edits `data` names: (offset, new byte) pairs, then an optional cut.
fn damage(mut bytes: Vec<u8>, data: &[u8]) -> Vec<u8> {
    let mut edits = data.chunks_exact(3);
    for e in &mut edits {
        if bytes.is_empty() {
            break;
        }
        let at = usize::from(u16::from_le_bytes([e[0], e[1]])) % bytes.len();
        if e[2] == 0xff {
            bytes.truncate(at);
        } else {
            bytes[at] = e[2];
        }
    }
    bytes
}

fuzz_target!(|data: &[u8]| {
    check_checkpoint(data);
    check_preimage(data);

    // A real checkpoint and preimage, damaged where the second half of the input says.
    let (shape, edits) = data.split_at(data.len().min(12));
    let Some(state) = state_from(shape) else {
        return;
    };
    let meta = CheckpointMeta {
        job_id: "fuzz".into(),
        spec_fingerprint: [7; 32],
        model: "mlp".into(),
        epoch: 1,
        step: state.step,
        data_cursor: state.cursor,
        rng_seed: 4,
        rng_pass: 0,
        parent: (state.step % 2 == 0).then_some([9; 32]),
        micro_batch: 4,
        state_hash: state.hash().expect("hash"),
    };
    let preimage = state.preimage().expect("preimage");
    let ckpt = Checkpoint { meta, state };
    let bytes = ckpt.to_bytes().expect("encode");
    let undamaged = Checkpoint::from_bytes(&bytes, &Device::Cpu).expect("a real checkpoint reads");
    assert_eq!(undamaged.meta, ckpt.meta);
    check_checkpoint(&damage(bytes, edits));
    check_preimage(&damage(preimage, edits));
});
