//! Datasets and the deterministic order in which a job reads them.

pub mod bundle;
mod fashion;
pub mod fortunes;
mod order;
mod text;

pub use bundle::{pack_dir_files, pack_files, unpack_to_dir};
pub use fashion::{
    FASHION_EVAL_FILES, FASHION_TRAIN_FILES, FashionMnist, MAX_IDX_BYTES, Split, fashion_dir,
};
pub use order::DataOrder;
pub use text::{
    TextDataset, TextExample, parse_ag_news_csv, parse_jsonl, parse_jsonl_text, to_jsonl,
    word_vocabulary,
};

use candle_core::{Device, Tensor};

use crate::error::{Result, TrainerError};

/// A model's input for one batch.
#[derive(Clone, Debug)]
pub enum Input {
    /// `[batch, 1, 28, 28]` f32, normalised.
    Images(Tensor),
    /// `ids`: `[batch, len]` u32 token ids; `mask`: `[batch, len]` f32, 1 for real tokens.
    Tokens { ids: Tensor, mask: Tensor },
}

/// Inputs and their `[batch]` u32 labels.
#[derive(Clone, Debug)]
pub struct Batch {
    pub input: Input,
    pub labels: Tensor,
}

/// Labelled examples addressed by index, so a job can read them in any seeded order.
pub trait Dataset: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn num_classes(&self) -> usize;
    /// Builds the batch of the examples at `indices` (all `< len()`), on `device`.
    fn batch(&self, indices: &[usize], device: &Device) -> Result<Batch>;
}

pub(crate) fn check_indices(indices: &[usize], len: usize) -> Result<()> {
    match indices.iter().find(|&&i| i >= len) {
        Some(i) => Err(TrainerError::Model(format!(
            "example index {i} is past the dataset's {len} examples"
        ))),
        None => Ok(()),
    }
}
