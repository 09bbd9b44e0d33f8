//! AdamW with its moments in the open, so checkpoints carry them and a resume continues
//! bit-exactly (candle's `AdamW` keeps its moments private). Same update rule as candle's:
//! decoupled weight decay, bias-corrected moments.

use std::collections::BTreeMap;

use candle_core::Tensor;

use crate::error::{Result, TrainerError};
use crate::model::Params;
use crate::spec::OptimSpec;

/// First and second moments by parameter name.
#[derive(Clone, Debug)]
pub struct AdamState {
    pub m: BTreeMap<String, Tensor>,
    pub v: BTreeMap<String, Tensor>,
}

impl AdamState {
    pub fn zeros(params: &Params) -> Result<Self> {
        let mut m = BTreeMap::new();
        let mut v = BTreeMap::new();
        for (name, p) in params {
            m.insert(name.clone(), p.as_tensor().zeros_like()?);
            v.insert(name.clone(), p.as_tensor().zeros_like()?);
        }
        Ok(Self { m, v })
    }

    /// One update. `t` counts updates made before this one; `grads` holds a gradient for
    /// every parameter.
    pub fn update(
        &mut self,
        cfg: &OptimSpec,
        params: &Params,
        grads: &BTreeMap<String, Tensor>,
        t: u64,
        lr: f64,
    ) -> Result<()> {
        let t = (t + 1) as i32;
        let c1 = 1.0 - cfg.beta1.powi(t);
        let c2 = 1.0 - cfg.beta2.powi(t);
        for (name, p) in params {
            let missing =
                || TrainerError::Model(format!("no optimizer state or gradient for {name}"));
            let g = grads.get(name).ok_or_else(missing)?;
            let m = self.m.get_mut(name).ok_or_else(missing)?;
            let v = self.v.get_mut(name).ok_or_else(missing)?;
            let new_m = ((&*m * cfg.beta1)? + (g * (1.0 - cfg.beta1))?)?;
            let new_v = ((&*v * cfg.beta2)? + (g.sqr()? * (1.0 - cfg.beta2))?)?;
            let m_hat = (&new_m / c1)?;
            let v_hat = (&new_v / c2)?;
            let step = (m_hat / (v_hat.sqrt()? + cfg.eps)?)?;
            let decayed = (p.as_tensor() * (1.0 - lr * cfg.weight_decay))?;
            p.set(&(decayed - (step * lr)?)?)?;
            // Detached, or each moment would keep the previous step's graph (and through the
            // gradients, its whole forward pass) alive: memory and time would grow per step.
            *m = new_m.detach();
            *v = new_v.detach();
        }
        Ok(())
    }
}

/// Linear warm-up to `peak_lr` over `warmup_steps`, then cosine decay to
/// `min_lr_ratio × peak_lr` at `total` steps. A function of the step alone, so resumes agree.
pub fn learning_rate(cfg: &OptimSpec, step: u64, total: u64) -> f64 {
    let peak = cfg.peak_lr;
    if step < cfg.warmup_steps {
        return peak * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    let span = total.saturating_sub(cfg.warmup_steps).max(1);
    let progress = ((step - cfg.warmup_steps) as f64 / span as f64).min(1.0);
    let floor = peak * cfg.min_lr_ratio;
    floor + (peak - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays() {
        let cfg = OptimSpec {
            peak_lr: 1.0,
            warmup_steps: 10,
            min_lr_ratio: 0.1,
            ..OptimSpec::default()
        };
        assert!((learning_rate(&cfg, 0, 100) - 0.1).abs() < 1e-12);
        assert!((learning_rate(&cfg, 9, 100) - 1.0).abs() < 1e-12);
        assert!((learning_rate(&cfg, 10, 100) - 1.0).abs() < 1e-12);
        assert!((learning_rate(&cfg, 100, 100) - 0.1).abs() < 1e-12);
        let mid = learning_rate(&cfg, 55, 100);
        assert!((mid - 0.55).abs() < 1e-9, "{mid}");
    }
}
