//! Seeded random streams. Each purpose (network, churn, one per node, ...) draws from its own
//! ChaCha stream derived from the run seed, so adding a draw in one model does not shift the
//! numbers every other model sees: a seed keeps meaning the same run as the code evolves.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a stream is for; part of its derivation, so streams never overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Purpose {
    Network = 1,
    Churn = 2,
    Partition = 3,
    Node = 4,
    Setup = 5,
    /// Which subscribers a topic-wide gossip message reaches (protocol driver).
    Gossip = 6,
}

/// SplitMix64 finaliser: a bijective mix, so distinct inputs give distinct stream seeds.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn stream(seed: u64, purpose: Purpose, index: u64) -> SimRng {
    let s = mix(seed ^ mix((purpose as u64) << 40 ^ mix(index)));
    SimRng(ChaCha8Rng::seed_from_u64(s))
}

#[derive(Clone, Debug)]
pub struct SimRng(ChaCha8Rng);

impl SimRng {
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0.random::<f64>()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform integer in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }

    pub fn u64(&mut self) -> u64 {
        self.0.random::<u64>()
    }

    /// Exponential with the given mean (memoryless time-to-failure).
    pub fn exp(&mut self, mean: f64) -> f64 {
        // 1 - unit() is in (0, 1], so the log is finite.
        -mean * (1.0 - self.unit()).ln()
    }

    /// Standard normal by Box-Muller (one of the pair; simplicity beats the wasted draw).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Log-normal with the given median and shape: heavy enough tails for network latency.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// An index drawn with probability proportional to `weights` (all zero: index 0).
    pub fn weighted(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return 0;
        }
        let mut x = self.unit() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len().saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u64> = (0..4).map(|_| stream(7, Purpose::Node, 3).u64()).collect();
        assert!(
            a.windows(2).all(|w| w[0] == w[1]),
            "same stream, same first draw"
        );
        let mut x = stream(7, Purpose::Node, 3);
        let mut y = stream(7, Purpose::Node, 4);
        let mut z = stream(8, Purpose::Node, 3);
        let (xs, ys, zs): (Vec<_>, Vec<_>, Vec<_>) = (0..8)
            .map(|_| (x.u64(), y.u64(), z.u64()))
            .fold((vec![], vec![], vec![]), |mut acc, (a, b, c)| {
                acc.0.push(a);
                acc.1.push(b);
                acc.2.push(c);
                acc
            });
        assert_ne!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn exponential_mean_is_close() {
        let mut r = stream(1, Purpose::Churn, 0);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exp(10.0)).sum::<f64>() / f64::from(n);
        assert!((mean - 10.0).abs() < 0.5, "mean {mean}");
    }
}
