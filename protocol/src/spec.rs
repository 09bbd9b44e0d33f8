//! The job specification. Its CBOR encoding (this crate's, field order as declared) hashed with
//! BLAKE3 is the `specHash` the client passes to `createJob`, and the blob providers fetch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::{Hash, blake3_hash};
use crate::wire::WireError;

/// Longest checkpoint interval: a `CheckpointAnnounce` carries one 32-byte state hash per step
/// of the interval, and has to fit in a gossip message with room to spare.
pub const MAX_CHECKPOINT_INTERVAL: u64 = 1024;

/// Largest effective batch. A step is the unit of pay, of the stall rule's pace and of a
/// spot check's replay: a client that packed a whole data set into one step would make each
/// of them as long as it liked at the price of one step. A bigger batch belongs in more steps.
pub const MAX_EFFECTIVE_BATCH: u32 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    FashionCnn,
    BertLora,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HyperParams {
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub warmup_steps: u64,
    /// Model-specific knobs (e.g. `lora_rank`), sorted so the encoding is canonical.
    pub extra: BTreeMap<String, f64>,
}

/// What a verifier's quality test demands of a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QualityThresholds {
    /// Held-out accuracy the checkpoint must reach once `after_step` is passed.
    pub min_accuracy: f64,
    pub after_step: u64,
    /// Largest accuracy drop tolerated against the previous accepted checkpoint.
    pub max_accuracy_drop: f64,
    /// Eval loss above this (or non-finite) fails.
    pub max_loss: f64,
    /// Steps re-executed per checkpoint by the spot check.
    pub spot_check_steps: u32,
    /// Relative tolerance of the spot check's comparison (0 = bit-exact).
    pub spot_check_tolerance: f64,
}

/// Why a checkpoint's held-out figures fail its job's thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QualityFailure {
    /// Accuracy or loss is NaN or infinite.
    NonFinite {
        accuracy: f64,
        loss: f64,
    },
    AboveMaxLoss {
        loss: f64,
        max: f64,
    },
    /// Below the floor, which applies once `after_step` is reached: early checkpoints of an
    /// honest run are below it.
    BelowMinAccuracy {
        accuracy: f64,
        min: f64,
    },
    /// Dropped more than tolerated against the previous accepted checkpoint.
    Regressed {
        accuracy: f64,
        previous: f64,
        tolerance: f64,
    },
}

impl QualityThresholds {
    /// The one judgement of a checkpoint's held-out figures, for the node's verifier and the
    /// simulator's alike: every threshold it fails, none when it passes. `previous_accuracy`
    /// is the previous accepted checkpoint's (none for the first checkpoint of a job).
    pub fn failures(
        &self,
        step: u64,
        accuracy: f64,
        loss: f64,
        previous_accuracy: Option<f64>,
    ) -> Vec<QualityFailure> {
        if !accuracy.is_finite() || !loss.is_finite() {
            return vec![QualityFailure::NonFinite { accuracy, loss }];
        }
        let mut out = Vec::new();
        if loss > self.max_loss {
            out.push(QualityFailure::AboveMaxLoss {
                loss,
                max: self.max_loss,
            });
        }
        if step >= self.after_step && accuracy < self.min_accuracy {
            out.push(QualityFailure::BelowMinAccuracy {
                accuracy,
                min: self.min_accuracy,
            });
        }
        if let Some(previous) = previous_accuracy
            && accuracy + self.max_accuracy_drop < previous
        {
            out.push(QualityFailure::Regressed {
                accuracy,
                previous,
                tolerance: self.max_accuracy_drop,
            });
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub model: ModelKind,
    pub model_blob: Hash,
    pub dataset_blob: Hash,
    pub eval_blob: Hash,
    pub hyper: HyperParams,
    pub seed: u64,
    pub total_steps: u64,
    pub checkpoint_interval: u64,
    pub effective_batch: u32,
    /// Device memory a provider needs for the smallest micro-batch; the hardware-fit filter.
    pub min_memory_bytes: u64,
    pub quality: QualityThresholds,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("total_steps must be positive")]
    NoSteps,
    #[error("checkpoint_interval must be in 1..={MAX_CHECKPOINT_INTERVAL}")]
    BadInterval,
    #[error("effective_batch must be positive")]
    NoBatch,
    #[error(
        "effective_batch must be at most {MAX_EFFECTIVE_BATCH}: split a larger batch into more steps"
    )]
    BatchTooLarge,
    #[error("a hyper-parameter or threshold is not finite")]
    NotFinite,
}

impl JobSpec {
    pub fn to_cbor(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Serializing plain structs into a Vec cannot fail: no I/O, no non-string map keys.
        ciborium::into_writer(self, &mut out).expect("JobSpec serializes into memory");
        out
    }

    pub fn from_cbor(bytes: &[u8]) -> Result<Self, WireError> {
        crate::wire::decode_bounded(bytes)
    }

    /// The on-chain `specHash`.
    pub fn spec_hash(&self) -> Hash {
        blake3_hash(&self.to_cbor())
    }

    pub fn check(&self) -> Result<(), SpecError> {
        if self.total_steps == 0 {
            return Err(SpecError::NoSteps);
        }
        if self.checkpoint_interval == 0 || self.checkpoint_interval > MAX_CHECKPOINT_INTERVAL {
            return Err(SpecError::BadInterval);
        }
        if self.effective_batch == 0 {
            return Err(SpecError::NoBatch);
        }
        if self.effective_batch > MAX_EFFECTIVE_BATCH {
            return Err(SpecError::BatchTooLarge);
        }
        let q = &self.quality;
        let floats = [
            self.hyper.learning_rate,
            self.hyper.weight_decay,
            q.min_accuracy,
            q.max_accuracy_drop,
            q.max_loss,
            q.spot_check_tolerance,
        ];
        if floats
            .iter()
            .chain(self.hyper.extra.values())
            .any(|f| !f.is_finite())
        {
            return Err(SpecError::NotFinite);
        }
        Ok(())
    }

    /// Whether `step` is one at which a checkpoint is due.
    pub fn is_checkpoint_step(&self, step: u64) -> bool {
        step > 0
            && step <= self.total_steps
            && (step.is_multiple_of(self.checkpoint_interval) || step == self.total_steps)
    }

    /// The first checkpoint step after `step`, where an interval starting at `step` ends;
    /// None when the job's steps are done (or the interval is 0, which `check` refuses).
    pub fn next_checkpoint_step(&self, step: u64) -> Option<u64> {
        if step >= self.total_steps || self.checkpoint_interval == 0 {
            return None;
        }
        let next = (step / self.checkpoint_interval)
            .checked_add(1)?
            .checked_mul(self.checkpoint_interval)?;
        Some(next.min(self.total_steps))
    }

    /// The fashion-cnn job of the product page's 4 Nov run; tests and the demo share it.
    pub fn fashion_cnn_demo(model_blob: Hash, dataset_blob: Hash, eval_blob: Hash) -> Self {
        JobSpec {
            model: ModelKind::FashionCnn,
            model_blob,
            dataset_blob,
            eval_blob,
            hyper: HyperParams {
                learning_rate: 1e-3,
                weight_decay: 1e-2,
                warmup_steps: 20,
                extra: BTreeMap::new(),
            },
            seed: 4,
            total_steps: 400,
            checkpoint_interval: 50,
            effective_batch: 64,
            min_memory_bytes: 256 << 20,
            quality: QualityThresholds {
                min_accuracy: 0.5,
                after_step: 100,
                max_accuracy_drop: 0.05,
                max_loss: 10.0,
                spot_check_steps: 2,
                spot_check_tolerance: 0.0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> JobSpec {
        JobSpec::fashion_cnn_demo(
            Hash::repeat_byte(1),
            Hash::repeat_byte(2),
            Hash::repeat_byte(3),
        )
    }

    #[test]
    fn quality_thresholds_judge_loss_floor_after_its_step_and_drop() {
        let q = demo().quality; // floor 0.5 from step 100, drop 0.05, loss 10
        assert!(q.failures(200, 0.8, 0.5, Some(0.78)).is_empty());
        // Below the floor only counts from `after_step` on.
        assert!(q.failures(50, 0.3, 0.5, Some(0.28)).is_empty());
        assert_eq!(
            q.failures(100, 0.3, 0.5, Some(0.28)),
            vec![QualityFailure::BelowMinAccuracy {
                accuracy: 0.3,
                min: 0.5
            }]
        );
        assert!(matches!(
            q.failures(200, 0.7, 0.5, Some(0.8))[..],
            [QualityFailure::Regressed { .. }]
        ));
        assert!(matches!(
            q.failures(200, 0.8, 11.0, None)[..],
            [QualityFailure::AboveMaxLoss { .. }]
        ));
        for (acc, loss) in [(f64::NAN, 0.5), (0.8, f64::INFINITY)] {
            assert!(matches!(
                q.failures(200, acc, loss, None)[..],
                [QualityFailure::NonFinite { .. }]
            ));
        }
    }

    #[test]
    fn spec_hash_is_blake3_of_cbor_and_stable_across_round_trip() {
        let spec = demo();
        let bytes = spec.to_cbor();
        assert_eq!(spec.spec_hash(), blake3_hash(&bytes));
        let back = JobSpec::from_cbor(&bytes).unwrap();
        assert_eq!(back, spec);
        assert_eq!(back.spec_hash(), spec.spec_hash());
        let mut other = demo();
        other.seed += 1;
        assert_ne!(other.spec_hash(), spec.spec_hash());
    }

    #[test]
    fn check_rejects_degenerate_specs() {
        assert_eq!(demo().check(), Ok(()));
        let mut s = demo();
        s.total_steps = 0;
        assert_eq!(s.check(), Err(SpecError::NoSteps));
        let mut s = demo();
        s.checkpoint_interval = MAX_CHECKPOINT_INTERVAL + 1;
        assert_eq!(s.check(), Err(SpecError::BadInterval));
        let mut s = demo();
        s.hyper.learning_rate = f64::NAN;
        assert_eq!(s.check(), Err(SpecError::NotFinite));
        let mut s = demo();
        s.effective_batch = MAX_EFFECTIVE_BATCH;
        assert_eq!(s.check(), Ok(()));
        s.effective_batch = MAX_EFFECTIVE_BATCH + 1;
        assert_eq!(s.check(), Err(SpecError::BatchTooLarge));
        s.effective_batch = 0;
        assert_eq!(s.check(), Err(SpecError::NoBatch));
    }

    #[test]
    fn checkpoint_steps_follow_interval_and_end() {
        let mut s = demo();
        assert!(s.is_checkpoint_step(50) && s.is_checkpoint_step(400));
        assert!(
            !s.is_checkpoint_step(0) && !s.is_checkpoint_step(158) && !s.is_checkpoint_step(450)
        );
        s.total_steps = 420;
        assert!(s.is_checkpoint_step(420));
        // Where an interval starting anywhere ends: the next checkpoint step.
        assert_eq!(s.next_checkpoint_step(0), Some(50));
        assert_eq!(s.next_checkpoint_step(50), Some(100));
        assert_eq!(s.next_checkpoint_step(158), Some(200));
        assert_eq!(s.next_checkpoint_step(400), Some(420));
        assert_eq!(s.next_checkpoint_step(420), None);
        for step in 0..420 {
            let next = s.next_checkpoint_step(step).unwrap();
            assert!(s.is_checkpoint_step(next));
            assert!((step + 1..next).all(|k| !s.is_checkpoint_step(k)));
        }
    }
}
