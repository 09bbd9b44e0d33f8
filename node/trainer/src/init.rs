//! Seeded weight initialisation. candle's CPU RNG cannot be seeded, so every random tensor
//! comes from ChaCha8 keyed by (job seed, tensor name): the same job gives the same weights
//! on every machine and in any construction order.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::Result;

/// A generator derived from a seed and a purpose, so unrelated streams never overlap.
pub fn rng_for(seed: u64, purpose: &str) -> ChaCha8Rng {
    let mut h = blake3::Hasher::new();
    h.update(b"gpuchain-trainer-rng-v1");
    h.update(&seed.to_le_bytes());
    h.update(purpose.as_bytes());
    ChaCha8Rng::from_seed(*h.finalize().as_bytes())
}

/// Uniform in [-bound, bound): PyTorch's default for linear and conv layers uses
/// bound = 1/sqrt(fan_in), which is what the models pass.
pub fn uniform(seed: u64, name: &str, shape: &[usize], bound: f64, dev: &Device) -> Result<Tensor> {
    let mut rng = rng_for(seed, name);
    let n: usize = shape.iter().product();
    let b = bound as f32;
    let data: Vec<f32> = (0..n).map(|_| rng.random_range(-b..b)).collect();
    Ok(Tensor::from_vec(data, shape, dev)?)
}

/// Normal(0, std) by Box–Muller, for encoder weights of the tiny random BERT and for junk.
pub fn normal(seed: u64, name: &str, shape: &[usize], std: f64, dev: &Device) -> Result<Tensor> {
    let mut rng = rng_for(seed, name);
    let n: usize = shape.iter().product();
    let mut data = Vec::with_capacity(n);
    while data.len() < n {
        // 1 - u keeps the argument of ln in (0, 1].
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt() * std;
        let t = std::f64::consts::TAU * u2;
        data.push((r * t.cos()) as f32);
        if data.len() < n {
            data.push((r * t.sin()) as f32);
        }
    }
    Ok(Tensor::from_vec(data, shape, dev)?)
}
