//! A fast, deterministic hasher for the simulator's look-up tables (topics, checkpoint ids,
//! transaction tags, ground truth): the multiply-and-add of rustc's own `FxHasher` over
//! 8-byte words, finished with SplitMix64's mix. The
//! standard `SipHash` resists hash flooding, which matters for a node's maps fed by peers and
//! not at all for tables the simulator fills itself, where it was a visible part of every
//! publication's cost. Nothing iterates these maps in an order that reaches a report.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// rustc-hash's multiplier (an odd constant with well-spread bits).
const K: u64 = 0xf135_7aea_2e62_a9c5;

#[derive(Clone, Copy, Default)]
pub struct FastHasher {
    hash: u64,
}

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.add(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // A multiply only carries a word's differences upwards, and the sim's 256-bit ids
        // differ in their last bytes, which land in a word's top bits; hashbrown takes the
        // bucket from the low bits and the tag from the top ones. The SplitMix64 finaliser
        // spreads every bit over both.
        let mut z = self.hash;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_with_every_key_shape_the_sim_uses() {
        let mut m: FastMap<String, u32> = FastMap::default();
        m.insert("gpuchain/1/job/1".into(), 1);
        m.insert("gpuchain/1/job/1/heartbeats".into(), 2);
        m.insert("gpuchain/1/job/10".into(), 3);
        assert_eq!(m.get("gpuchain/1/job/1"), Some(&1));
        assert_eq!(m.get("gpuchain/1/job/10"), Some(&3));
        let mut ids: FastMap<u64, u64> = FastMap::default();
        for i in 0..10_000 {
            ids.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| ids.get(&i) == Some(&(i * 2))));
    }

    /// 256-bit ids that differ only in their last bytes (the driver's checkpoint ids) spread
    /// over the buckets: without the final mix they all shared one.
    #[test]
    fn ids_differing_in_their_last_bytes_spread() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<FastHasher>::default();
        let low: HashSet<u64> = (0..4096u64)
            .map(|i| {
                build.hash_one(gpuchain_protocol::B256::left_padding_from(&i.to_be_bytes())) & 4095
            })
            .collect();
        assert!(low.len() > 2_000, "{} distinct buckets of 4096", low.len());
    }
}
