//! The demo CNN: conv 3×3 (16, padding 1) → ReLU → max-pool 2 → conv 3×3 (32) → ReLU →
//! max-pool 2 → 64 → 10. Sizes 28→28→14→12→6 divide evenly, which candle's max-pool
//! backward needs (it maps gradients back by nearest upsampling).

use candle_core::{Device, Tensor};

use super::{Model, Params, add_var, images, linear};
use crate::data::Input;
use crate::error::Result;
use crate::init::uniform;

pub struct FashionCnn {
    params: Params,
}

const FLAT: usize = 32 * 6 * 6;

impl FashionCnn {
    pub fn new(seed: u64, dev: &Device) -> Result<Self> {
        let mut params = Params::new();
        let layers: [(&str, Vec<usize>, usize); 4] = [
            ("conv1", vec![16, 1, 3, 3], 9),
            ("conv2", vec![32, 16, 3, 3], 16 * 9),
            ("fc1", vec![64, FLAT], FLAT),
            ("fc2", vec![10, 64], 64),
        ];
        for (name, shape, fan_in) in layers {
            let bound = 1.0 / (fan_in as f64).sqrt();
            let w = format!("{name}.weight");
            let b = format!("{name}.bias");
            add_var(&mut params, &w, uniform(seed, &w, &shape, bound, dev)?)?;
            add_var(&mut params, &b, uniform(seed, &b, &[shape[0]], bound, dev)?)?;
        }
        Ok(Self { params })
    }

    fn p(&self, name: &str) -> &Tensor {
        // Every name used below is inserted by `new`.
        self.params
            .get(name)
            .expect("CNN parameter created in new()")
            .as_tensor()
    }

    fn conv(&self, x: &Tensor, name: &str, padding: usize) -> Result<Tensor> {
        let w = self.p(&format!("{name}.weight"));
        let b = self.p(&format!("{name}.bias"));
        let y = x.conv2d(w, padding, 1, 1, 1)?;
        Ok(y.broadcast_add(&b.reshape((1, b.dim(0)?, 1, 1))?)?)
    }
}

impl Model for FashionCnn {
    fn params(&self) -> &Params {
        &self.params
    }

    fn forward(&self, input: &Input) -> Result<Tensor> {
        let x = images(input)?;
        let x = self.conv(x, "conv1", 1)?.relu()?.max_pool2d(2)?;
        let x = self.conv(&x, "conv2", 0)?.relu()?.max_pool2d(2)?;
        let x = x.flatten_from(1)?;
        let x = linear(&x, self.p("fc1.weight"), Some(self.p("fc1.bias")))?.relu()?;
        linear(&x, self.p("fc2.weight"), Some(self.p("fc2.bias")))
    }

    fn bytes_per_example(&self) -> u64 {
        // conv1 out + pool + conv2 out + pool, each kept for backward and its gradient.
        (4 * 4 * (16 * 28 * 28 + 16 * 14 * 14 + 32 * 12 * 12 + FLAT + 64)) as u64
    }
}
