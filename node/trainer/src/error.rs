//! One error type for the crate: every variant names what was wrong and, where it helps,
//! what to do about it, because the node shows these to operators verbatim.

use std::path::PathBuf;

/// Everything the trainer can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    /// A dataset or model directory is missing; `hint` says how to install it.
    #[error("{what} not found at {path}: {hint}")]
    Missing {
        what: &'static str,
        path: PathBuf,
        hint: String,
    },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A data file is malformed; `line` is 1-based, or 0 when the problem is not on one line.
    #[error("{path}:{line}: {reason}")]
    BadData {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// A checkpoint or state file could not be parsed or does not fit the job.
    #[error("checkpoint refused: {0}")]
    Checkpoint(String),
    /// A dataset bundle could not be packed or unpacked (see `data::bundle`).
    #[error("dataset bundle refused: {0}")]
    Bundle(String),
    /// The job specification is inconsistent (e.g. a batch that is zero).
    #[error("invalid job spec: field `{field}`: {reason}")]
    Spec { field: &'static str, reason: String },
    /// A provider's memory cannot train the model even one example at a time.
    #[error(
        "{memory} cannot train this model: its state (weights, gradients, Adam moments) takes {state} and one example's activations {per_example}; at least {minimum} is needed"
    )]
    DoesNotFit {
        memory: String,
        state: String,
        per_example: String,
        minimum: String,
    },
    #[error("model: {0}")]
    Model(String),
    #[error("device: {0}")]
    Device(String),
    #[error("tokenizer {path}: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

pub type Result<T, E = TrainerError> = std::result::Result<T, E>;

impl TrainerError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn ckpt(msg: impl Into<String>) -> Self {
        Self::Checkpoint(msg.into())
    }
}
