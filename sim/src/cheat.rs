//! Cheating behaviours and what a verifier's checks make of each. A checkpoint in the sim is
//! its ground truth (who made it, for which job/epoch/step, honestly or how it cheated); the
//! verifier model turns that into the outcome of the quality test and the spot check.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheatKind {
    /// Random weights, fabricated state commitments.
    Junk,
    /// The parent checkpoint announced again as new work.
    StaleParent,
    /// Skips a fraction of steps (trains faster, commits states it never computed).
    Lazy,
    /// Trains on the data in the wrong order (cheaper data loading, different model).
    WrongDataOrder,
    /// Diverged: non-finite weights.
    Nan,
    /// Another job's checkpoint presented as this one's.
    OtherJob,
}

impl CheatKind {
    pub const ALL: [CheatKind; 6] = [
        CheatKind::Junk,
        CheatKind::StaleParent,
        CheatKind::Lazy,
        CheatKind::WrongDataOrder,
        CheatKind::Nan,
        CheatKind::OtherJob,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CheatKind::Junk => "junk",
            CheatKind::StaleParent => "stale-parent",
            CheatKind::Lazy => "lazy",
            CheatKind::WrongDataOrder => "wrong-data-order",
            CheatKind::Nan => "nan",
            CheatKind::OtherJob => "other-job",
        }
    }

    /// Kinds whose checkpoint is worthless whatever sampling luck says: paying for one is a
    /// protocol failure (a checker), not a missed detection (a statistic).
    pub fn is_junk(self) -> bool {
        matches!(
            self,
            CheatKind::Junk | CheatKind::StaleParent | CheatKind::Nan | CheatKind::OtherJob
        )
    }
}

impl CheatKind {
    /// Whether every honest verifier refuses a checkpoint of this kind under `job`'s checks:
    /// the junk kinds always, wrong data order whenever steps are replayed (every one of its
    /// steps fails a replay). A lazy checkpoint is not: it slips the replays with probability
    /// `(1 − lazy_skip)^replayed`, `replayed` being every step from each sample's anchor
    /// through the sample (`protocol::anchors`), a missed cheat, not a broken protocol.
    pub fn always_refused(self, job: &crate::config::JobConfig) -> bool {
        self.is_junk() || (self == CheatKind::WrongDataOrder && job.spot_check_steps > 0)
    }
}

/// What the verifier observes about a fetched checkpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observed {
    /// The blob's metadata names this job and step (stale and other-job ones do not).
    pub metadata_matches: bool,
    pub accuracy: f64,
    pub loss: f64,
    /// Probability that one re-executed step does not reproduce its committed state.
    pub step_mismatch: f64,
}

/// How a verifier judges a checkpoint: the quality test, then `spot_steps` re-executions
/// each failing with the observed mismatch probability (drawn by the verifier's own stream).
pub fn quality_ok(
    o: &Observed,
    step: u64,
    prev_accuracy: f64,
    q: &crate::config::JobConfig,
) -> bool {
    // The thresholds are judged by the protocol's one rule, as the node's verifier does.
    let thresholds = gpuchain_protocol::spec::QualityThresholds {
        min_accuracy: q.min_accuracy,
        after_step: q.min_accuracy_after_step,
        max_accuracy_drop: q.max_accuracy_drop,
        max_loss: q.max_loss,
        spot_check_steps: 0,
        spot_check_tolerance: 0.0,
    };
    o.metadata_matches
        && thresholds
            .failures(step, o.accuracy, o.loss, Some(prev_accuracy))
            .is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde() {
        for k in CheatKind::ALL {
            let s = serde_json::to_string(&k).expect("serialize");
            assert_eq!(s, format!("\"{}\"", k.name()));
        }
    }

    #[test]
    fn quality_test_refuses_nan_and_drops() {
        let q = crate::config::JobConfig::default();
        let good = Observed {
            metadata_matches: true,
            accuracy: 0.8,
            loss: 0.5,
            step_mismatch: 0.0,
        };
        assert!(quality_ok(&good, 200, 0.78, &q));
        assert!(!quality_ok(
            &Observed {
                loss: f64::NAN,
                ..good
            },
            200,
            0.78,
            &q
        ));
        assert!(!quality_ok(
            &Observed {
                accuracy: 0.25,
                ..good
            },
            200,
            0.89,
            &q
        ));
        assert!(!quality_ok(
            &Observed {
                metadata_matches: false,
                ..good
            },
            200,
            0.0,
            &q
        ));
        // Before `min_accuracy_after_step` only the drop and finiteness count.
        assert!(quality_ok(
            &Observed {
                accuracy: 0.3,
                ..good
            },
            50,
            0.28,
            &q
        ));
    }
}
