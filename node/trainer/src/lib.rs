//! gpuchain's trainer: candle training jobs (`fashion-cnn`, `mlp`, `bert-lora`), deterministic
//! checkpoints and resume, per-step state hashes, and the verifiers' quality test and spot
//! check. It knows nothing of networking or the chain: the node drives it from a blocking
//! thread, one step at a time.
//!
//! The calls the node makes:
//! - build a [`Job`] once per job ([`Job::fashion`], [`Job::bert_lora_pretrained`], [`Job::new`]);
//! - provider: [`Trainer::new`] or [`Trainer::resume`], then [`Trainer::step`] or
//!   [`Trainer::train`] (cancel flag + per-step callback), [`Trainer::checkpoint`] →
//!   [`Checkpoint::to_bytes`], [`Trainer::interval_hashes`] + [`commitment_root`] for the
//!   announce, [`Trainer::serve_state`] or [`Trainer::interval_preimages`] (state blobs
//!   addressed by their state hash) for verifiers, [`Trainer::start_interval`] after it;
//! - verifier: [`quality_test`] and [`spot_check_interval`] (or [`spot_check`] per step, or
//!   [`spot_check_preimage`] from a state blob);
//! - a job's data as one blob per split: [`data::bundle`].
//! - faults for tests and the demo: [`cheat`].

pub mod cheat;
pub mod checkpoint;
pub mod data;
pub mod device;
pub mod error;
pub mod init;
pub mod job;
pub mod model;
pub mod optim;
pub mod spec;
pub mod state;
pub mod trainer;
pub mod verify;

pub use checkpoint::{Checkpoint, CheckpointMeta, file_hash};
pub use device::DeviceChoice;
pub use error::{Result, TrainerError};
pub use job::Job;
pub use job::memory_need;
pub use spec::{BertBase, LoraTarget, ModelSpec, OptimSpec, QualitySpec, TrainSpec};
pub use state::{StateHash, TrainState, commitment_root};
pub use trainer::{
    MemoryNeed, MicroBatchPlan, StepReport, Stop, Trainer, TrainerOptions, plan_for_memory,
    plan_micro_batch,
};
pub use verify::quality::{EvalReport, Reason, Verdict, quality_test, quality_test_cached};
pub use verify::spot::{
    SpotMode, SpotReport, SpotResult, checkpoint_from_preimage, choose_steps, spot_check,
    spot_check_anchored, spot_check_from_anchor, spot_check_interval, spot_check_preimage,
    spot_check_tolerant,
};
