//! 784→hidden→10 perceptron: the fast model for tests (≈ 3 ms/step at batch 64 on 2 cores).

use candle_core::{Device, Tensor};

use super::{Model, Params, add_var, images, linear};
use crate::data::Input;
use crate::error::Result;
use crate::init::uniform;

pub struct Mlp {
    params: Params,
    hidden: usize,
}

impl Mlp {
    pub fn new(hidden: usize, seed: u64, dev: &Device) -> Result<Self> {
        let mut params = Params::new();
        for (name, out, inp) in [("fc1", hidden, 784), ("fc2", 10, hidden)] {
            let bound = 1.0 / (inp as f64).sqrt();
            let w = format!("{name}.weight");
            let b = format!("{name}.bias");
            add_var(&mut params, &w, uniform(seed, &w, &[out, inp], bound, dev)?)?;
            add_var(&mut params, &b, uniform(seed, &b, &[out], bound, dev)?)?;
        }
        Ok(Self { params, hidden })
    }

    fn p(&self, name: &str) -> &Tensor {
        // Every name used below is inserted by `new`.
        self.params
            .get(name)
            .expect("MLP parameter created in new()")
            .as_tensor()
    }
}

impl Model for Mlp {
    fn params(&self) -> &Params {
        &self.params
    }

    fn forward(&self, input: &Input) -> Result<Tensor> {
        let x = images(input)?.flatten_from(1)?;
        let h = linear(&x, self.p("fc1.weight"), Some(self.p("fc1.bias")))?.relu()?;
        linear(&h, self.p("fc2.weight"), Some(self.p("fc2.bias")))
    }

    fn bytes_per_example(&self) -> u64 {
        (4 * 3 * (784 + 2 * self.hidden + 20)) as u64
    }
}
