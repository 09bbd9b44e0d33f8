//! Where one job's money went, summed from the escrow's own events: what each provider was
//! credited for accepted checkpoints, what stake was slashed (and burned), what was refunded
//! to the client when the job was settled or expired, and what the job still holds. `gpuchain job status`,
//! the demo and the dashboard all read it from here.
//!
//! `JobEscrow` charges no verifier fees (see its contract docs), so there is no fee figure;
//! when it does, the fee events belong here.

use std::collections::BTreeMap;

use alloy::primitives::{Address, U256};
use gpuchain_protocol::chain::{ChainEvent, EpochEndReason};
use gpuchain_protocol::types::JobId;
use serde::Serialize;

/// The Solidity `JobEscrow.Status` names, by code.
pub const STATUS_NAMES: [&str; 5] = ["None", "Open", "Assigned", "Completed", "Expired"];

/// `JobEscrow.Status` code → its Solidity name (`3` → `Completed`).
pub fn status_name(code: u8) -> String {
    STATUS_NAMES
        .get(usize::from(code))
        .map_or_else(|| format!("Unknown({code})"), |s| (*s).to_string())
}

/// One job's figures, in the token's base units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobMoney {
    pub job_id: JobId,
    pub client: Address,
    pub token: Address,
    /// The block of its `JobCreated`.
    pub created_block: u64,
    /// The budget escrowed at creation.
    pub deposit: U256,
    /// Each provider's credit for its accepted checkpoints (`CheckpointAccepted.amount`).
    pub paid: BTreeMap<Address, U256>,
    /// Stake slashed per provider for rejected checkpoints (`CheckpointRejected.slashed`):
    /// burned by the escrow, paid to nobody.
    pub slashed: BTreeMap<Address, U256>,
    /// Unspent budget credited back to the client (`JobSettled` / `JobExpired` refund).
    pub refunded: U256,
    /// What the job still holds: deposit − paid − refunded.
    pub remaining: U256,
    /// `JobEscrow.Status` code as the events leave it.
    pub status: u8,
}

impl JobMoney {
    pub fn paid_total(&self) -> U256 {
        self.paid.values().copied().sum()
    }

    pub fn slashed_total(&self) -> U256 {
        self.slashed.values().copied().sum()
    }

    /// What `provider` was paid by this job (0 when nothing).
    pub fn paid_to(&self, provider: Address) -> U256 {
        self.paid.get(&provider).copied().unwrap_or_default()
    }

    pub fn status_name(&self) -> String {
        status_name(self.status)
    }

    /// paid + refunded + remaining == deposit: the budget is accounted for to the unit.
    pub fn conserved(&self) -> bool {
        self.paid_total() + self.refunded + self.remaining == self.deposit
    }
}

/// Sums the events of job `job_id` (others are skipped) given with the block each is in,
/// in chain order. `None` when its `JobCreated` is not among them.
pub fn summarize<'a>(
    job_id: JobId,
    events: impl IntoIterator<Item = (u64, &'a ChainEvent)>,
) -> Option<JobMoney> {
    let mut money: Option<JobMoney> = None;
    for (block, ev) in events {
        match ev {
            ChainEvent::JobCreated {
                job_id: id,
                client,
                token,
                budget,
                ..
            } if *id == job_id => {
                money = Some(JobMoney {
                    job_id,
                    client: *client,
                    token: *token,
                    created_block: block,
                    deposit: *budget,
                    paid: BTreeMap::new(),
                    slashed: BTreeMap::new(),
                    refunded: U256::ZERO,
                    remaining: *budget,
                    status: 1,
                });
            }
            _ => {
                let Some(m) = money.as_mut() else { continue };
                apply(m, ev);
            }
        }
    }
    money
}

fn apply(m: &mut JobMoney, ev: &ChainEvent) {
    let job_id = m.job_id;
    match ev {
        ChainEvent::ProviderAssigned { job_id: id, .. } if *id == job_id => m.status = 2,
        ChainEvent::EpochEnded {
            job_id: id, reason, ..
        } if *id == job_id => {
            if matches!(
                reason,
                EpochEndReason::Released | EpochEndReason::Rejected | EpochEndReason::Resigned
            ) {
                m.status = 1;
            }
        }
        ChainEvent::CheckpointAccepted {
            job_id: id,
            provider,
            amount,
            ..
        } if *id == job_id => {
            *m.paid.entry(*provider).or_default() += *amount;
            m.remaining = m.remaining.saturating_sub(*amount);
        }
        ChainEvent::CheckpointRejected {
            job_id: id,
            provider,
            slashed,
            ..
        } if *id == job_id => {
            *m.slashed.entry(*provider).or_default() += *slashed;
        }
        // Completion leaves what is left in the job until `settle` credits it.
        ChainEvent::JobCompleted { job_id: id, .. } if *id == job_id => m.status = 3,
        ChainEvent::JobSettled {
            job_id: id, refund, ..
        } if *id == job_id => {
            m.refunded += *refund;
            m.remaining = m.remaining.saturating_sub(*refund);
        }
        ChainEvent::JobExpired { job_id: id, refund } if *id == job_id => {
            m.refunded += *refund;
            m.remaining = m.remaining.saturating_sub(*refund);
            m.status = 4;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use alloy::primitives::B256;

    use super::*;

    fn created(id: u64, budget: u64) -> ChainEvent {
        ChainEvent::JobCreated {
            job_id: U256::from(id),
            client: Address::repeat_byte(0xc),
            token: Address::repeat_byte(0x7),
            budget: U256::from(budget),
            max_price_per_step: U256::from(5_000u64),
            total_steps: 40,
            checkpoint_interval: 10,
            spec_hash: B256::ZERO,
            verifiers: vec![Address::repeat_byte(1), Address::repeat_byte(2)],
            quorum: 2,
            deadline: 10,
            grace: 1,
        }
    }

    fn accepted(id: u64, provider: u8, amount: u64) -> ChainEvent {
        ChainEvent::CheckpointAccepted {
            job_id: U256::from(id),
            epoch: 1,
            step: 10,
            checkpoint_hash: B256::ZERO,
            provider: Address::repeat_byte(provider),
            amount: U256::from(amount),
        }
    }

    #[test]
    fn completed_job_pays_providers_and_refunds_the_rest() {
        let id = U256::from(1u8);
        let events = [
            created(1, 1_000_000),
            created(2, 9_000_000),
            ChainEvent::ProviderAssigned {
                job_id: id,
                epoch: 1,
                provider: Address::repeat_byte(0xa),
                price_per_step: U256::from(1_000u64),
                start_step: 0,
                start_checkpoint: B256::ZERO,
            },
            accepted(1, 0xa, 10_000),
            accepted(2, 0xa, 77),
            ChainEvent::CheckpointRejected {
                job_id: id,
                epoch: 2,
                step: 20,
                checkpoint_hash: B256::ZERO,
                provider: Address::repeat_byte(0xb),
                slashed: U256::from(100_000_000u64),
            },
            ChainEvent::EpochEnded {
                job_id: id,
                epoch: 2,
                reason: EpochEndReason::Rejected,
            },
            accepted(1, 0xd, 30_000),
            ChainEvent::JobCompleted {
                job_id: id,
                refund: U256::from(960_000u64),
            },
        ];
        // Completed but not settled: the refund is still the job's.
        let m =
            summarize(id, events.iter().enumerate().map(|(i, e)| (i as u64, e))).expect("created");
        assert_eq!(m.refunded, U256::ZERO);
        assert_eq!(m.remaining, U256::from(960_000u64));
        assert!(m.conserved());
        let settled = ChainEvent::JobSettled {
            job_id: id,
            client: Address::repeat_byte(0xc),
            refund: U256::from(960_000u64),
        };
        let m = summarize(
            id,
            events
                .iter()
                .chain([&settled])
                .enumerate()
                .map(|(i, e)| (i as u64, e)),
        )
        .expect("created");
        assert_eq!(m.deposit, U256::from(1_000_000u64));
        assert_eq!(m.paid_to(Address::repeat_byte(0xa)), U256::from(10_000u64));
        assert_eq!(m.paid_to(Address::repeat_byte(0xd)), U256::from(30_000u64));
        assert_eq!(m.paid_total(), U256::from(40_000u64));
        assert_eq!(m.slashed_total(), U256::from(100_000_000u64));
        assert_eq!(m.refunded, U256::from(960_000u64));
        assert_eq!(m.remaining, U256::ZERO);
        assert_eq!(m.status_name(), "Completed");
        assert!(m.conserved());
    }

    #[test]
    fn expired_job_refunds_what_was_not_paid() {
        let id = U256::from(3u8);
        let events = [
            created(3, 500_000),
            ChainEvent::JobExpired {
                job_id: id,
                refund: U256::from(500_000u64),
            },
        ];
        let m = summarize(id, events.iter().map(|e| (7, e))).expect("created");
        assert_eq!(m.created_block, 7);
        assert_eq!(m.paid_total(), U256::ZERO);
        assert_eq!(m.refunded, U256::from(500_000u64));
        assert_eq!(m.status_name(), "Expired");
        assert!(m.conserved());
        assert!(summarize(U256::from(4u8), events.iter().map(|e| (7, e))).is_none());
    }

    #[test]
    fn status_names_follow_the_solidity_enum() {
        assert_eq!(status_name(0), "None");
        assert_eq!(status_name(1), "Open");
        assert_eq!(status_name(2), "Assigned");
        assert_eq!(status_name(4), "Expired");
        assert_eq!(status_name(9), "Unknown(9)");
    }
}
