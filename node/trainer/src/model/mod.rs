//! The networks. Each owns its trainable tensors as named `Var`s (sorted by name, which is
//! the order the state hash and checkpoints use) and computes logits from a batch's input.

pub mod bert;
mod cnn;
mod mlp;

pub use bert::{BertConfig, BertEncoder, BertLora};
pub use cnn::FashionCnn;
pub use mlp::Mlp;

use std::collections::BTreeMap;

use candle_core::{Tensor, Var};

use crate::data::Input;
use crate::error::{Result, TrainerError};

/// Trainable tensors by name.
pub type Params = BTreeMap<String, Var>;

pub trait Model: Send {
    fn params(&self) -> &Params;
    /// Logits `[batch, classes]`.
    fn forward(&self, input: &Input) -> Result<Tensor>;
    /// Rough bytes of activations and their gradients per training example, for choosing
    /// the micro-batch that fits a provider's memory.
    fn bytes_per_example(&self) -> u64;
}

/// `x · wᵀ + b` for `x` of rank 2 or 3.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let y = match x.rank() {
        2 => x.matmul(&w.t()?)?,
        _ => x.broadcast_matmul(&w.t()?)?,
    };
    Ok(match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    })
}

pub(crate) fn images(input: &Input) -> Result<&Tensor> {
    match input {
        Input::Images(t) => Ok(t),
        Input::Tokens { .. } => Err(TrainerError::Model(
            "this model takes images, the dataset gives tokens".into(),
        )),
    }
}

/// Adds a `Var` built from `init` under `name`.
pub(crate) fn add_var(params: &mut Params, name: &str, init: Tensor) -> Result<()> {
    params.insert(name.to_string(), Var::from_tensor(&init)?);
    Ok(())
}
