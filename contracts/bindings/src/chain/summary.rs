//! Where one job's money went, summed from the escrow's own events: what each provider was
//! credited for accepted checkpoints, what stake was slashed (and burned), what was refunded
//! to the client when the job was settled or expired, and what the job still holds. `gpuchain job status`,
//! the demo and the dashboard all read it from here.
//!
//! Verifier fees are read from the decisions themselves: each `CheckpointAccepted` and
//! `CheckpointRejected` carries the fees it charged and the committee positions that earned
//! them (`voters`), and `CommitteeDrawn` says who sits at each position. The fees leave the
//! budget at the decision and reach the verifiers' balances at `settle` or `expire`.

use std::collections::BTreeMap;

use alloy::primitives::{Address, U256};
use gpuchain_protocol::chain::{ChainEvent, EpochEndReason, voted};
use gpuchain_protocol::types::JobId;
use serde::Serialize;

/// The Solidity `JobEscrow.Status` names, by code.
pub const STATUS_NAMES: [&str; 6] = [
    "None",
    "Open",
    "Assigned",
    "Completed",
    "Expired",
    "Drawing",
];

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
    /// The committee the escrow drew (empty while the job is drawing).
    pub committee: Vec<Address>,
    /// Each verifier's fees for the decisions it signed with the outcome.
    pub fees: BTreeMap<Address, U256>,
    /// Checkpoints the escrow decided (accepted or rejected).
    pub decisions: u64,
    /// Unspent budget credited back to the client (`JobSettled` / `JobExpired` refund).
    pub refunded: U256,
    /// What the job still holds: deposit − paid − fees − refunded.
    pub remaining: U256,
    /// `JobEscrow.Status` code as the events leave it.
    pub status: u8,
}

impl JobMoney {
    pub fn paid_total(&self) -> U256 {
        self.paid.values().copied().sum()
    }

    pub fn fees_total(&self) -> U256 {
        self.fees.values().copied().sum()
    }

    /// What `verifier` earned in fees from this job (0 when nothing).
    pub fn fees_to(&self, verifier: Address) -> U256 {
        self.fees.get(&verifier).copied().unwrap_or_default()
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

    /// paid + fees + refunded + remaining == deposit: the budget is accounted for to the unit.
    pub fn conserved(&self) -> bool {
        self.paid_total() + self.fees_total() + self.refunded + self.remaining == self.deposit
    }

    /// Splits a decision's `fees` equally among the members in `voters` (the escrow charges
    /// the same fee per signer).
    fn charge_fees(&mut self, voters: U256, fees: U256) {
        self.decisions += 1;
        let signers: Vec<Address> = self
            .committee
            .iter()
            .enumerate()
            .filter(|(i, _)| voted(voters, *i))
            .map(|(_, a)| *a)
            .collect();
        self.remaining = self.remaining.saturating_sub(fees);
        if fees.is_zero() || signers.is_empty() {
            return;
        }
        let each = fees / U256::from(signers.len());
        for s in signers {
            *self.fees.entry(s).or_default() += each;
        }
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
                    committee: Vec::new(),
                    fees: BTreeMap::new(),
                    decisions: 0,
                    refunded: U256::ZERO,
                    remaining: *budget,
                    status: 5,
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
        ChainEvent::CommitteeDrawn {
            job_id: id,
            committee,
            ..
        } if *id == job_id => {
            m.committee = committee.clone();
            m.status = 1;
        }
        ChainEvent::ProviderAssigned { job_id: id, .. } if *id == job_id => m.status = 2,
        ChainEvent::EpochEnded {
            job_id: id, reason, ..
        } if *id == job_id => {
            if matches!(
                reason,
                EpochEndReason::Released
                    | EpochEndReason::Rejected
                    | EpochEndReason::Resigned
                    | EpochEndReason::Superseded
            ) {
                m.status = 1;
            }
        }
        ChainEvent::CheckpointAccepted {
            job_id: id,
            provider,
            amount,
            voters,
            fees,
            ..
        } if *id == job_id => {
            *m.paid.entry(*provider).or_default() += *amount;
            m.remaining = m.remaining.saturating_sub(*amount);
            m.charge_fees(*voters, *fees);
        }
        ChainEvent::CheckpointRejected {
            job_id: id,
            provider,
            slashed,
            voters,
            fees,
            ..
        } if *id == job_id => {
            *m.slashed.entry(*provider).or_default() += *slashed;
            m.charge_fees(*voters, *fees);
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
            committee_size: 2,
            quorum: 2,
            verifier_fee: U256::from(5u8),
            deadline: 10,
            grace: 1,
            seed_block: 1,
        }
    }

    fn drawn(id: u64) -> ChainEvent {
        ChainEvent::CommitteeDrawn {
            job_id: U256::from(id),
            committee: vec![Address::repeat_byte(1), Address::repeat_byte(2)],
            terms: B256::ZERO,
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
            // both members signed, 5 each
            voters: U256::from(0b11u8),
            fees: U256::from(10u8),
        }
    }

    #[test]
    fn completed_job_pays_providers_and_refunds_the_rest() {
        let id = U256::from(1u8);
        let events = [
            created(1, 1_000_000),
            created(2, 9_000_000),
            drawn(1),
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
                // only the second member signed the reject, and there was slack for its fee
                voters: U256::from(0b10u8),
                fees: U256::from(5u8),
            },
            ChainEvent::EpochEnded {
                job_id: id,
                epoch: 2,
                reason: EpochEndReason::Rejected,
            },
            accepted(1, 0xd, 30_000),
            ChainEvent::JobCompleted {
                job_id: id,
                refund: U256::from(959_975u64),
            },
        ];
        // Completed but not settled: the refund is still the job's.
        let m =
            summarize(id, events.iter().enumerate().map(|(i, e)| (i as u64, e))).expect("created");
        assert_eq!(m.refunded, U256::ZERO);
        assert_eq!(m.remaining, U256::from(959_975u64));
        assert!(m.conserved());
        let settled = ChainEvent::JobSettled {
            job_id: id,
            client: Address::repeat_byte(0xc),
            refund: U256::from(959_975u64),
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
        assert_eq!(m.fees_to(Address::repeat_byte(1)), U256::from(10u8));
        assert_eq!(m.fees_to(Address::repeat_byte(2)), U256::from(15u8));
        assert_eq!(m.fees_total(), U256::from(25u8));
        assert_eq!(m.decisions, 3);
        assert_eq!(m.refunded, U256::from(959_975u64));
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
        assert_eq!(status_name(5), "Drawing");
        assert_eq!(status_name(9), "Unknown(9)");
    }
}
