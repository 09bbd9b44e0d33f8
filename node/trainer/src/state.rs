//! The training state and its hash (docs/interfaces.md, "Training states and spot checks").
//!
//! `state_hash` = BLAKE3 of:
//!   `"gpuchain-state-v1"` ‖ step u64 ‖ data cursor u64 ‖ entry count u32 ‖ entries,
//! entries sorted by name, each `name len u32 ‖ name (UTF-8) ‖ dtype tag u8 (0 = f32) ‖
//! rank u32 ‖ dims u64… ‖ data len u64 ‖ data (little-endian, row-major)`, all integers
//! little-endian. Entry names: `param/<p>`, `adam.m/<p>`, `adam.v/<p>` for every trainable
//! tensor `p`. No file format is involved, so any holder of the tensors can recompute it.
//!
//! The hashed bytes themselves (the *preimage*) are also a wire format: served as an iroh blob,
//! a state's blob address is its state hash, so a verifier fetching the committed hash gets
//! the committed state or nothing.

use std::collections::BTreeMap;
use std::fmt;

use candle_core::{DType, Device, Tensor};

use crate::error::{Result, TrainerError};

const MAGIC: &[u8] = b"gpuchain-state-v1";
const DTYPE_F32: u8 = 0;

/// A 32-byte BLAKE3 state commitment.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateHash(pub [u8; 32]);

impl StateHash {
    /// The hash of a state preimage ([`TrainState::preimage`]), i.e. its blob address.
    pub fn of_preimage(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }
}

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

/// Refuses a shape from outside that candle cannot lay out: with a zero dim a tensor holds no
/// data however large its other dims, but candle multiplies them into strides, which
/// overflows (a panic in builds with overflow checks). The product of the nonzero dims must
/// fit a usize.
pub(crate) fn check_shape(dims: &[usize]) -> std::result::Result<(), String> {
    dims.iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .map(|_| ())
        .ok_or_else(|| format!("shape {dims:?} is too large to lay out"))
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
        let mut h = blake3::Hasher::new();
        self.encode(&mut |b: &[u8]| {
            h.update(b);
        })?;
        Ok(StateHash(*h.finalize().as_bytes()))
    }

    /// The exact bytes [`TrainState::hash`] feeds BLAKE3, so `blake3(preimage) == hash()`:
    /// served as a content-addressed blob, the state needs no other integrity check.
    pub fn preimage(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.preimage_len());
        self.encode(&mut |b: &[u8]| out.extend_from_slice(b))?;
        Ok(out)
    }

    /// Parses [`TrainState::preimage`] bytes back into tensors on `device`. Only the canonical
    /// encoding is accepted (names strictly increasing, nothing trailing), so whatever parses
    /// re-encodes to the same bytes and hence to the same hash.
    pub fn from_preimage(bytes: &[u8], device: &Device) -> Result<TrainState> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.take(MAGIC.len(), "the magic")?;
        if magic != MAGIC {
            return Err(bad_preimage(format!(
                "does not start with {:?}",
                String::from_utf8_lossy(MAGIC)
            )));
        }
        let step = r.u64("the step")?;
        let cursor = r.u64("the data cursor")?;
        let count = r.u32("the entry count")?;
        let mut state = TrainState {
            step,
            cursor,
            params: BTreeMap::new(),
            adam_m: BTreeMap::new(),
            adam_v: BTreeMap::new(),
        };
        let mut previous: Option<&str> = None;
        for i in 0..count {
            let name_len = r.u32("an entry's name length")? as usize;
            let name = std::str::from_utf8(r.take(name_len, "an entry's name")?)
                .map_err(|_| bad_preimage(format!("entry {i}'s name is not UTF-8")))?;
            if previous.is_some_and(|p| p >= name) {
                return Err(bad_preimage(format!(
                    "entry {name:?} is out of order or repeated (names must be strictly \
                     increasing)"
                )));
            }
            previous = Some(name);
            let (map, key) = if let Some(k) = name.strip_prefix("param/") {
                (&mut state.params, k)
            } else if let Some(k) = name.strip_prefix("adam.m/") {
                (&mut state.adam_m, k)
            } else if let Some(k) = name.strip_prefix("adam.v/") {
                (&mut state.adam_v, k)
            } else {
                return Err(bad_preimage(format!(
                    "entry {name:?} is not param/…, adam.m/… or adam.v/…"
                )));
            };
            if key.is_empty() {
                return Err(bad_preimage(format!("entry {name:?} names no tensor")));
            }
            let dtype = r.take(1, "a dtype tag")?[0];
            if dtype != DTYPE_F32 {
                return Err(bad_preimage(format!(
                    "entry {name:?} has dtype tag {dtype}, only 0 (f32) is defined"
                )));
            }
            let rank = r.u32("a rank")? as usize;
            // Each dim takes 8 bytes: a rank the input cannot hold is refused before allocating.
            if rank > r.remaining() / 8 {
                return Err(bad_preimage(format!(
                    "entry {name:?} claims rank {rank}, more than the input can hold"
                )));
            }
            let mut dims = Vec::with_capacity(rank);
            let mut elems = 1usize;
            for _ in 0..rank {
                let d = usize::try_from(r.u64("a dim")?)
                    .map_err(|_| bad_preimage(format!("entry {name:?} has a dim too large")))?;
                elems = elems.checked_mul(d).ok_or_else(|| {
                    bad_preimage(format!(
                        "entry {name:?} has more elements than fit in memory"
                    ))
                })?;
                dims.push(d);
            }
            let len = r.u64("a data length")?;
            let expected = elems.checked_mul(4).ok_or_else(|| {
                bad_preimage(format!(
                    "entry {name:?} has more elements than fit in memory"
                ))
            })?;
            if len != expected as u64 {
                return Err(bad_preimage(format!(
                    "entry {name:?} of shape {dims:?} holds {len} data bytes, expected {expected}"
                )));
            }
            let data = r.take(expected, "tensor data")?;
            check_shape(&dims).map_err(|e| bad_preimage(format!("entry {name:?}: {e}")))?;
            let t = Tensor::from_raw_buffer(data, DType::F32, &dims, device)?;
            map.insert(key.to_string(), t);
        }
        if r.remaining() != 0 {
            return Err(bad_preimage(format!(
                "{} bytes follow the last of its {count} entries",
                r.remaining()
            )));
        }
        Ok(state)
    }

    /// The preimage's length, so it is built without reallocating.
    fn preimage_len(&self) -> usize {
        let head = MAGIC.len() + 8 + 8 + 4;
        let entries: usize = self
            .entries()
            .iter()
            .map(|(name, t)| 4 + name.len() + 1 + 4 + 8 * t.rank() + 8 + 4 * t.elem_count())
            .sum();
        head + entries
    }

    /// The one definition of the state layout: [`TrainState::hash`] and
    /// [`TrainState::preimage`] both stream through it, so they cannot drift apart.
    fn encode(&self, out: &mut dyn FnMut(&[u8])) -> Result<()> {
        let entries = self.entries();
        out(MAGIC);
        out(&self.step.to_le_bytes());
        out(&self.cursor.to_le_bytes());
        out(&(entries.len() as u32).to_le_bytes());
        for (name, t) in entries {
            out(&(name.len() as u32).to_le_bytes());
            out(name.as_bytes());
            out(&[DTYPE_F32]);
            out(&(t.rank() as u32).to_le_bytes());
            for d in t.dims() {
                out(&(*d as u64).to_le_bytes());
            }
            write_data(out, t)?;
        }
        Ok(())
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
            write_data(
                &mut |b: &[u8]| {
                    h.update(b);
                },
                t,
            )?;
        }
        Ok(*h.finalize().as_bytes())
    }
}

/// `byte len u64 ‖ little-endian data`, converted in small chunks: hashing runs after every
/// step, so it avoids a second full-size copy of each tensor.
fn write_data(out: &mut dyn FnMut(&[u8]), t: &Tensor) -> Result<()> {
    if t.dtype() != DType::F32 {
        return Err(TrainerError::Model(format!(
            "expected an f32 tensor, found {:?}",
            t.dtype()
        )));
    }
    let v = t.flatten_all()?.to_vec1::<f32>()?;
    out(&(4 * v.len() as u64).to_le_bytes());
    let mut buf = Vec::with_capacity(4 * 1024);
    for chunk in v.chunks(1024) {
        buf.clear();
        for x in chunk {
            buf.extend_from_slice(&x.to_le_bytes());
        }
        out(&buf);
    }
    Ok(())
}

fn bad_preimage(reason: String) -> TrainerError {
    TrainerError::ckpt(format!("state preimage: {reason}"))
}

/// A bounds-checked cursor: every read names what it was reading when the input ran out.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(bad_preimage(format!(
                "truncated: {what} needs {n} bytes at offset {}, {} remain",
                self.at,
                self.remaining()
            )));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
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

    fn t(v: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), dims, &Device::Cpu).unwrap()
    }

    /// Two tensors (a matrix and a scalar) with distinct moments: small enough to try every
    /// truncation, varied enough to cover ranks 0 and 2.
    fn small() -> TrainState {
        let mut s = TrainState {
            step: 7,
            cursor: 448,
            params: BTreeMap::new(),
            adam_m: BTreeMap::new(),
            adam_v: BTreeMap::new(),
        };
        for (map, k) in [
            (&mut s.params, 1.0),
            (&mut s.adam_m, 0.1),
            (&mut s.adam_v, 0.01),
        ] {
            map.insert(
                "w".into(),
                t(&[k, -2.0 * k, 3.0 * k, f32::MIN_POSITIVE], &[2, 2]),
            );
            map.insert("b".into(), t(&[k * 0.5], &[]));
        }
        s
    }

    fn floats(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn preimage_is_what_the_hash_hashes() {
        let s = small();
        let pre = s.preimage().unwrap();
        assert_eq!(StateHash::of_preimage(&pre), s.hash().unwrap());
        assert_eq!(pre.len(), s.preimage_len());
    }

    #[test]
    fn preimage_follows_the_documented_layout() {
        // Written out by hand from docs/interfaces.md, so a change to the shared encoder that
        // would silently change every state hash fails here.
        let mut s = small();
        for map in [&mut s.params, &mut s.adam_m, &mut s.adam_v] {
            map.remove("w");
        }
        let mut want = b"gpuchain-state-v1".to_vec();
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(&448u64.to_le_bytes());
        want.extend_from_slice(&3u32.to_le_bytes());
        for (name, x) in [("adam.m/b", 0.05f32), ("adam.v/b", 0.005), ("param/b", 0.5)] {
            want.extend_from_slice(&(name.len() as u32).to_le_bytes());
            want.extend_from_slice(name.as_bytes());
            want.push(0);
            want.extend_from_slice(&0u32.to_le_bytes());
            want.extend_from_slice(&4u64.to_le_bytes());
            want.extend_from_slice(&x.to_le_bytes());
        }
        assert_eq!(s.preimage().unwrap(), want);
        assert_eq!(s.hash().unwrap().0, *blake3::hash(&want).as_bytes());
    }

    #[test]
    fn preimage_round_trips() {
        let s = small();
        let pre = s.preimage().unwrap();
        let back = TrainState::from_preimage(&pre, &Device::Cpu).unwrap();
        assert_eq!((back.step, back.cursor), (7, 448));
        assert_eq!(back.hash().unwrap(), s.hash().unwrap());
        assert_eq!(back.preimage().unwrap(), pre);
        for (a, b) in [
            (&s.params, &back.params),
            (&s.adam_m, &back.adam_m),
            (&s.adam_v, &back.adam_v),
        ] {
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
            for (k, t) in a {
                assert_eq!(t.dims(), b[k].dims(), "{k}");
                assert_eq!(floats(t), floats(&b[k]), "{k}");
            }
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let pre = small().preimage().unwrap();
        for n in 0..pre.len() {
            let e = TrainState::from_preimage(&pre[..n], &Device::Cpu).unwrap_err();
            assert!(e.to_string().contains("state preimage"), "prefix {n}: {e}");
        }
        let mut long = pre.clone();
        long.push(0);
        let e = TrainState::from_preimage(&long, &Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("follow"), "{e}");
    }

    /// A preimage with one entry, every field given, to corrupt one at a time.
    fn one_entry(name: &[u8], dtype: u8, dims: &[u64], len: u64, data: &[u8]) -> Vec<u8> {
        let mut b = b"gpuchain-state-v1".to_vec();
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&64u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&(name.len() as u32).to_le_bytes());
        b.extend_from_slice(name);
        b.push(dtype);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(data);
        b
    }

    fn refusal(bytes: &[u8]) -> String {
        match TrainState::from_preimage(bytes, &Device::Cpu) {
            Ok(_) => panic!("accepted a malformed preimage"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn malformed_preimages_are_refused_with_a_reason() {
        let data = [0u8; 8];
        let ok = one_entry(b"param/x", 0, &[2], 8, &data);
        assert!(TrainState::from_preimage(&ok, &Device::Cpu).is_ok());

        let mut magic = ok.clone();
        magic[0] = b'G';
        assert!(refusal(&magic).contains("does not start with"));
        assert!(refusal(&one_entry(b"grad/x", 0, &[2], 8, &data)).contains("not param/"));
        assert!(refusal(&one_entry(b"param/", 0, &[2], 8, &data)).contains("names no tensor"));
        assert!(refusal(&one_entry(b"param/\xff", 0, &[2], 8, &data)).contains("UTF-8"));
        assert!(refusal(&one_entry(b"param/x", 1, &[2], 8, &data)).contains("dtype tag 1"));
        assert!(refusal(&one_entry(b"param/x", 0, &[3], 8, &data)).contains("expected 12"));
        assert!(refusal(&one_entry(b"param/x", 0, &[2], 12, &data)).contains("expected 8"));
        // Lengths far beyond the input fail on the bounds, never by allocating or overflowing.
        let huge_dims = one_entry(b"param/x", 0, &[u64::MAX, u64::MAX], 8, &data);
        assert!(refusal(&huge_dims).contains("state preimage"));
        let huge_elems = one_entry(b"param/x", 0, &[1 << 62], 1 << 62, &data);
        assert!(refusal(&huge_elems).contains("state preimage"));
        let mut huge_rank = ok.clone();
        let rank_at = 17 + 8 + 8 + 4 + 4 + 7 + 1;
        huge_rank[rank_at..rank_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refusal(&huge_rank).contains("rank"));
        let mut huge_name = ok.clone();
        huge_name[37..41].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refusal(&huge_name).contains("truncated"));
        let mut huge_count = ok.clone();
        huge_count[33..37].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(refusal(&huge_count).contains("truncated"));
    }

    #[test]
    fn non_canonical_order_is_refused() {
        // Same entries, swapped: it would parse to the same state but hash differently, so a
        // blob's address would no longer be its state hash.
        let s = small();
        let pre = s.preimage().unwrap();
        let entries = &pre[37..];
        // Split off the first entry (adam.m/b, a scalar): 4 + 8 + 1 + 4 + 8 + 4 bytes.
        let first = 4 + 8 + 1 + 4 + 8 + 4;
        let mut swapped = pre[..37].to_vec();
        swapped.extend_from_slice(&entries[first..]);
        swapped.extend_from_slice(&entries[..first]);
        assert!(refusal(&swapped).contains("out of order"));
        let mut dup = pre[..33].to_vec();
        dup.extend_from_slice(&2u32.to_le_bytes());
        dup.extend_from_slice(&entries[..first]);
        dup.extend_from_slice(&entries[..first]);
        assert!(refusal(&dup).contains("out of order or repeated"));
    }

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
