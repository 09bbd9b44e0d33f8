//! The networks. Each owns its trainable tensors as named `Var`s (sorted by name, which is
//! the order the state hash and checkpoints use) and computes logits from a batch's input.

pub mod bert;
mod cnn;
mod mlp;

pub use bert::{BertConfig, BertEncoder, BertLora};
pub use cnn::FashionCnn;
pub use mlp::Mlp;

use std::collections::BTreeMap;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp2, Layout, MetalStorage, Shape, Tensor, Var};

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

/// `x · wᵀ + b` for a frozen `w` (a plain tensor, not a `Var`) and `x` of rank 3: the same
/// numbers as [`linear`], forward and backward, without the gradient of `w`.
///
/// candle's `Matmul` backward computes the gradients of both operands whether or not anything
/// needs them. For an encoder's frozen weights that is one wasted matmul per projection per
/// step, as large as the forward one: a third of the encoder's matmul work. This records the
/// product as a custom op whose backward returns `x`'s gradient only. It calls the same storage
/// matmul with the same layouts as `broadcast_matmul` (which folds `x` to `[b·s, k]` against
/// `wᵀ`), and its backward is `grad · w` exactly as `Matmul`'s `grad · (wᵀ)ᵀ`, on the same node
/// of the graph, so results are bit-identical to [`linear`] (tested in `bert.rs`). Anything
/// else (a `Var`, another rank, a strided `x`, an empty tensor) goes through [`linear`].
pub(crate) fn frozen_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let plain = x.rank() != 3
        || w.rank() != 2
        || !x.is_contiguous()
        || w.is_variable()
        || w.track_op()
        || x.elem_count() == 0
        || w.elem_count() == 0
        || x.dims()[2] != w.dims()[1];
    if plain {
        return linear(x, w, b);
    }
    let (batch, seq, k) = x.dims3()?;
    let n = w.dims()[0];
    let y = x
        .reshape((batch * seq, k))?
        .apply_op2(w, FrozenMatmul)?
        .reshape((batch, seq, n))?;
    Ok(match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    })
}

/// `x [m, k] · wᵀ` with `w [n, k]` frozen: see [`frozen_linear`].
struct FrozenMatmul;

impl FrozenMatmul {
    fn fwd<S: BackendStorage>(
        x: &S,
        xl: &Layout,
        w: &S,
        wl: &Layout,
    ) -> candle_core::Result<(S, Shape)> {
        let (m, k) = xl.shape().dims2()?;
        let (n, _) = wl.shape().dims2()?;
        // `w.t()`'s layout: what `Tensor::matmul` hands the backend as the right operand.
        let wt = wl.transpose(0, 1)?;
        Ok((x.matmul(w, (1, m, n, k), xl, &wt)?, Shape::from((m, n))))
    }
}

impl CustomOp2 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        w: &CpuStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Self::fwd(x, xl, w, wl)
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        w: &CudaStorage,
        wl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        Self::fwd(x, xl, w, wl)
    }

    fn metal_fwd(
        &self,
        x: &MetalStorage,
        xl: &Layout,
        w: &MetalStorage,
        wl: &Layout,
    ) -> candle_core::Result<(MetalStorage, Shape)> {
        Self::fwd(x, xl, w, wl)
    }

    fn bwd(
        &self,
        _x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.matmul(w)?), None))
    }
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
