//! Reputation from the chain record: a pure fold of the escrow's events of every job into what
//! each provider and each verifier did, for anyone to read (the node's `provider status` and
//! `job status`) and for the client's bid choice to weigh with named scores (reth style, like
//! [`crate::reputation`], which stays the client's own local view).
//!
//! The chain is the one record nobody can forge, but not everything on it is a verdict on
//! the party it names: a client can end any epoch at will (replace or release its provider),
//! so a "lost" epoch says little about the provider and weighs little; a reject needs a
//! quorum of a committee the escrow drew, so it weighs heavily, and a unanimous one (slashed)
//! most. A verifier's record is its seats and, per decision of its committee, whether its
//! signature is in it (with the outcome) or not (voted against, or was silent): the events
//! carry that as the `voters` bit set.
//!
//! The fold counts each event once: feed it every event exactly once, in chain order.

use std::collections::BTreeMap;

use alloy_primitives::{Address, U256};
use serde::{Deserialize, Serialize};

use crate::chain::{ChainEvent, EpochEndReason, voted};
use crate::reputation::Score;
use crate::types::{Epoch, JobId};

/// Per checkpoint of theirs a quorum accepted (on time or late).
pub const CHECKPOINT_ACCEPTED: Score = 10;
/// Per epoch of theirs that finished its job.
pub const EPOCH_COMPLETED: Score = 50;
/// Per epoch a unanimous committee rejected (and the escrow slashed): the strongest evidence
/// the chain has of bad work.
pub const REJECTED_SLASHED: Score = -1000;
/// Per epoch a quorum, but not every member, rejected: a byzantine majority can do that to
/// honest work, so it counts less, though still far more than anything a client alone can do.
pub const REJECTED_UNSLASHED: Score = -300;
/// Per epoch the client ended (replaced or released). A hostile client can end epochs at
/// will, so this must never add up to a ban on its own: it only breaks ties.
pub const LOST: Score = -5;
/// Per epoch the provider resigned: it left work it took on, but no one's funds suffered.
pub const RESIGNED: Score = -20;
/// Scores are clamped so one long honest history cannot buy unlimited misbehaviour.
pub const MAX: Score = 500;
pub const MIN: Score = -10_000;
/// A provider with more rejected epochs than this on chain is not considered at all.
pub const MAX_REJECTED_EPOCHS: u64 = 2;

/// What the chain says a provider did, across all jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRecord {
    pub epochs_assigned: u64,
    /// Checkpoints of its epochs a quorum accepted, late accepts included.
    pub checkpoints_accepted: u64,
    /// Of those, accepted after the client had ended the epoch (within the decision window).
    pub late_accepts: u64,
    /// What its accepted checkpoints paid it.
    pub paid: U256,
    pub epochs_completed: u64,
    /// Epochs ended by a quorum's reject.
    pub epochs_rejected: u64,
    /// Of those, the ones every member rejected: its stake was slashed.
    pub epochs_slashed: u64,
    /// Epochs its client ended (`Replaced` or `Released`).
    pub epochs_lost: u64,
    pub epochs_resigned: u64,
    /// Epochs a late accept of an earlier epoch overtook.
    pub epochs_superseded: u64,
    /// Epochs live when their job expired.
    pub epochs_expired: u64,
}

impl ProviderRecord {
    /// The record's weight in bid choice, clamped to [`MIN`, `MAX`].
    pub fn score(&self) -> Score {
        let unslashed = self.epochs_rejected.saturating_sub(self.epochs_slashed);
        let terms: [(u64, Score); 6] = [
            (self.checkpoints_accepted, CHECKPOINT_ACCEPTED),
            (self.epochs_completed, EPOCH_COMPLETED),
            (self.epochs_slashed, REJECTED_SLASHED),
            (unslashed, REJECTED_UNSLASHED),
            (self.epochs_lost, LOST),
            (self.epochs_resigned, RESIGNED),
        ];
        let sum = terms.iter().fold(0i128, |acc, (count, weight)| {
            acc.saturating_add(i128::from(*count).saturating_mul(i128::from(*weight)))
        });
        let clamped = sum.clamp(i128::from(MIN), i128::from(MAX));
        Score::try_from(clamped).unwrap_or(MIN)
    }

    /// Too many rejected epochs to be considered at all.
    pub fn is_excluded(&self) -> bool {
        self.epochs_rejected > MAX_REJECTED_EPOCHS
    }
}

/// What the chain says a verifier did, across all jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifierRecord {
    /// Committees it was drawn onto.
    pub seats: u64,
    /// Decisions of its committees its signature is in (it earned the fee, where there was
    /// one).
    pub with_outcome: u64,
    /// Decisions of its committees without its signature: it voted against the outcome, or
    /// did not vote (the chain cannot tell which), and earned nothing.
    pub without_outcome: u64,
    /// Its share of the decisions' fees (credited when each job is settled or expires).
    pub fees: U256,
}

/// One job as the fold needs it: its committee and its live epoch.
#[derive(Clone, Debug, Default)]
struct JobTrack {
    committee: Vec<Address>,
    live: Option<(Epoch, Address)>,
}

/// The fold of every job's events.
#[derive(Clone, Debug, Default)]
pub struct ChainRecord {
    providers: BTreeMap<Address, ProviderRecord>,
    verifiers: BTreeMap<Address, VerifierRecord>,
    /// Jobs not yet finished: a finished job has no more decisions or epochs.
    jobs: BTreeMap<JobId, JobTrack>,
}

impl ChainRecord {
    /// The record of a history, oldest event first.
    pub fn from_history<'a>(events: impl IntoIterator<Item = &'a ChainEvent>) -> ChainRecord {
        let mut r = ChainRecord::default();
        for e in events {
            r.apply(e);
        }
        r
    }

    pub fn provider(&self, who: &Address) -> ProviderRecord {
        self.providers.get(who).copied().unwrap_or_default()
    }

    pub fn verifier(&self, who: &Address) -> VerifierRecord {
        self.verifiers.get(who).copied().unwrap_or_default()
    }

    /// Every provider the chain has seen assigned or paid, by address.
    pub fn providers(&self) -> impl Iterator<Item = (&Address, &ProviderRecord)> {
        self.providers.iter()
    }

    /// Every verifier the chain has seen seated, by address.
    pub fn verifiers(&self) -> impl Iterator<Item = (&Address, &VerifierRecord)> {
        self.verifiers.iter()
    }

    pub fn apply(&mut self, event: &ChainEvent) {
        let job_id = event.job_id();
        match event {
            ChainEvent::JobCreated { .. } => {
                self.jobs.entry(job_id).or_default();
            }
            ChainEvent::CommitteeSeedMoved { .. } | ChainEvent::JobSettled { .. } => {}
            ChainEvent::CommitteeDrawn { committee, .. } => {
                for m in committee {
                    self.verifiers.entry(*m).or_default().seats += 1;
                }
                self.jobs.entry(job_id).or_default().committee = committee.clone();
            }
            ChainEvent::ProviderAssigned {
                epoch, provider, ..
            } => {
                self.providers.entry(*provider).or_default().epochs_assigned += 1;
                self.jobs.entry(job_id).or_default().live = Some((*epoch, *provider));
            }
            ChainEvent::EpochEnded { epoch, reason, .. } => {
                let Some(track) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                let Some((_, provider)) = track.live.filter(|(e, _)| e == epoch) else {
                    return;
                };
                track.live = None;
                let r = self.providers.entry(provider).or_default();
                match reason {
                    EpochEndReason::Completed => r.epochs_completed += 1,
                    EpochEndReason::Replaced | EpochEndReason::Released => r.epochs_lost += 1,
                    EpochEndReason::Resigned => r.epochs_resigned += 1,
                    EpochEndReason::Superseded => r.epochs_superseded += 1,
                    EpochEndReason::Expired => r.epochs_expired += 1,
                    // Counted from `CheckpointRejected`, which says whether it was slashed.
                    EpochEndReason::Rejected | EpochEndReason::Other(_) => {}
                }
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                provider,
                amount,
                voters,
                fees,
                ..
            } => {
                let live = self
                    .jobs
                    .get(&job_id)
                    .and_then(|t| t.live)
                    .is_some_and(|(e, _)| e == *epoch);
                let r = self.providers.entry(*provider).or_default();
                r.checkpoints_accepted += 1;
                r.late_accepts += u64::from(!live);
                r.paid += *amount;
                self.decided(job_id, *voters, *fees);
            }
            ChainEvent::CheckpointRejected {
                provider,
                slashed,
                voters,
                fees,
                ..
            } => {
                let r = self.providers.entry(*provider).or_default();
                r.epochs_rejected += 1;
                r.epochs_slashed += u64::from(!slashed.is_zero());
                self.decided(job_id, *voters, *fees);
            }
            ChainEvent::JobCompleted { .. } | ChainEvent::JobExpired { .. } => {
                self.jobs.remove(&job_id);
            }
        }
    }

    /// A decision of the job's committee: each member's signature in it, or not.
    fn decided(&mut self, job_id: JobId, voters: U256, fees: U256) {
        let Some(track) = self.jobs.get(&job_id) else {
            return;
        };
        let signers = voters.count_ones();
        let share = if signers == 0 {
            U256::ZERO
        } else {
            fees / U256::from(signers)
        };
        for (i, m) in track.committee.iter().enumerate() {
            let r = self.verifiers.entry(*m).or_default();
            if voted(voters, i) {
                r.with_outcome += 1;
                r.fees += share;
            } else {
                r.without_outcome += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Hash;

    fn a(n: u8) -> Address {
        Address::repeat_byte(n)
    }

    /// Job 1: committee [10, 11, 12]; provider 1 accepted at 50, then rejected by 10 and 11
    /// (12 silent, so no slash) at 100; provider 2 released by the client, then resigned.
    fn history() -> Vec<ChainEvent> {
        let j = U256::from(1);
        let assigned = |epoch, p| ChainEvent::ProviderAssigned {
            job_id: j,
            epoch,
            provider: a(p),
            price_per_step: U256::from(1),
            start_step: 0,
            start_checkpoint: Hash::ZERO,
        };
        let ended = |epoch, reason| ChainEvent::EpochEnded {
            job_id: j,
            epoch,
            reason,
        };
        vec![
            ChainEvent::CommitteeDrawn {
                job_id: j,
                committee: vec![a(10), a(11), a(12)],
                terms: Hash::ZERO,
            },
            assigned(1, 1),
            ChainEvent::CheckpointAccepted {
                job_id: j,
                epoch: 1,
                step: 50,
                checkpoint_hash: Hash::ZERO,
                provider: a(1),
                amount: U256::from(50),
                voters: U256::from(0b101),
                fees: U256::from(6),
            },
            ChainEvent::CheckpointRejected {
                job_id: j,
                epoch: 1,
                step: 100,
                checkpoint_hash: Hash::ZERO,
                provider: a(1),
                slashed: U256::ZERO,
                voters: U256::from(0b011),
                fees: U256::ZERO,
            },
            ended(1, EpochEndReason::Rejected),
            assigned(2, 2),
            ended(2, EpochEndReason::Released),
            assigned(3, 2),
            ended(3, EpochEndReason::Resigned),
        ]
    }

    #[test]
    fn the_fold_counts_each_party_by_the_events() {
        let r = ChainRecord::from_history(&history());
        assert_eq!(
            r.provider(&a(1)),
            ProviderRecord {
                epochs_assigned: 1,
                checkpoints_accepted: 1,
                paid: U256::from(50),
                epochs_rejected: 1,
                ..ProviderRecord::default()
            }
        );
        assert_eq!(
            r.provider(&a(2)),
            ProviderRecord {
                epochs_assigned: 2,
                epochs_lost: 1,
                epochs_resigned: 1,
                ..ProviderRecord::default()
            }
        );
        // Member 10 signed both outcomes; 11 the reject only; 12 the accept only.
        let v = |n| {
            let v = r.verifier(&a(n));
            (v.seats, v.with_outcome, v.without_outcome, v.fees)
        };
        assert_eq!(v(10), (1, 2, 0, U256::from(3)));
        assert_eq!(v(11), (1, 1, 1, U256::ZERO));
        assert_eq!(v(12), (1, 1, 1, U256::from(3)));
        assert_eq!(r.verifier(&a(13)), VerifierRecord::default());
        // Serializable for the node's status output.
        let json = serde_json::to_string(&r.provider(&a(1))).unwrap_or_default();
        assert!(json.contains("\"epochs_rejected\":1"), "{json}");
    }

    #[test]
    fn a_finished_job_is_forgotten_but_its_record_stays() {
        let mut r = ChainRecord::from_history(&history());
        r.apply(&ChainEvent::JobExpired {
            job_id: U256::from(1),
            refund: U256::ZERO,
        });
        assert!(r.jobs.is_empty());
        assert_eq!(r.provider(&a(2)).epochs_assigned, 2);
    }

    #[test]
    fn losses_alone_never_exclude_but_rejects_do() {
        let lost = ProviderRecord {
            epochs_lost: 1_000_000,
            ..ProviderRecord::default()
        };
        assert!(!lost.is_excluded());
        assert_eq!(lost.score(), MIN);
        let rejected = ProviderRecord {
            epochs_rejected: MAX_REJECTED_EPOCHS + 1,
            ..ProviderRecord::default()
        };
        assert!(rejected.is_excluded());
        let one_unslashed = ProviderRecord {
            epochs_rejected: 1,
            ..ProviderRecord::default()
        };
        let one_slashed = ProviderRecord {
            epochs_slashed: 1,
            ..one_unslashed
        };
        assert_eq!(one_unslashed.score(), REJECTED_UNSLASHED);
        assert_eq!(one_slashed.score(), REJECTED_SLASHED);
        // A few losses weigh less than a single reject.
        let few_lost = ProviderRecord {
            epochs_lost: 10,
            ..ProviderRecord::default()
        };
        assert!(few_lost.score() > one_unslashed.score());
    }
}
