//! Which examples each step reads. Step `s` reads stream positions `s·B .. (s+1)·B`; position
//! `p` is example `perm(p / n)[p % n]`, where `perm(pass)` is a Fisher–Yates shuffle keyed by
//! (seed, pass). So the order depends only on the seed and the data cursor, and a resume at
//! any step reads exactly what an uninterrupted run would.

use rand::Rng;

use crate::init::rng_for;

#[derive(Clone, Debug)]
pub struct DataOrder {
    seed: u64,
    n: usize,
    cached: Option<(u64, Vec<usize>)>,
}

impl DataOrder {
    /// `n` must be non-zero (the trainer refuses empty datasets before building one).
    pub fn new(seed: u64, n: usize) -> Self {
        Self {
            seed,
            n,
            cached: None,
        }
    }

    /// The pass over the dataset that stream position `cursor` falls in.
    pub fn pass(&self, cursor: u64) -> u64 {
        cursor / self.n as u64
    }

    /// The `count` example indices starting at stream position `cursor`.
    pub fn indices(&mut self, cursor: u64, count: usize) -> Vec<usize> {
        (0..count as u64)
            .map(|k| {
                let p = cursor + k;
                let pass = p / self.n as u64;
                let at = (p % self.n as u64) as usize;
                self.perm(pass)[at]
            })
            .collect()
    }

    fn perm(&mut self, pass: u64) -> &[usize] {
        let fresh = !matches!(&self.cached, Some((p, _)) if *p == pass);
        if fresh {
            let mut rng = rng_for(self.seed, &format!("data-order/pass-{pass}"));
            let mut v: Vec<usize> = (0..self.n).collect();
            for i in (1..v.len()).rev() {
                let j = rng.random_range(0..=i);
                v.swap(i, j);
            }
            self.cached = Some((pass, v));
        }
        match &self.cached {
            Some((_, v)) => v,
            None => unreachable!("the permutation was cached just above"),
        }
    }
}
