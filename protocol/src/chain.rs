//! Chain events (inputs) and transactions (outputs), mirroring JobEscrow's events and
//! functions in docs/interfaces.md. The node's chain client converts to and from the ABI.

use alloy_primitives::{Address, U256};

use crate::eip712::JobTerms;
use crate::signing::Sig65;
use crate::types::{Epoch, Hash, JobId, Step};

/// `EpochEnded.reason`. Codes follow the escrow's enum; unknown codes are kept, not dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EpochEndReason {
    /// A new `assign` fenced this epoch.
    Replaced,
    /// The client called `releaseProvider`.
    Released,
    /// A quorum rejected a checkpoint.
    Rejected,
    /// The last step was accepted.
    Completed,
    /// The job expired.
    Expired,
    /// The provider called `resign`: no slash, its unaccepted steps unpaid.
    Resigned,
    Other(u8),
}

impl EpochEndReason {
    pub fn from_code(code: u8) -> Self {
        match code {
            0 => EpochEndReason::Replaced,
            1 => EpochEndReason::Released,
            2 => EpochEndReason::Rejected,
            3 => EpochEndReason::Completed,
            4 => EpochEndReason::Expired,
            5 => EpochEndReason::Resigned,
            c => EpochEndReason::Other(c),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainEvent {
    JobCreated {
        job_id: JobId,
        client: Address,
        token: Address,
        budget: U256,
        max_price_per_step: U256,
        total_steps: Step,
        checkpoint_interval: Step,
        spec_hash: Hash,
        verifiers: Vec<Address>,
        quorum: u8,
        deadline: u64,
        grace: u64,
    },
    ProviderAssigned {
        job_id: JobId,
        epoch: Epoch,
        provider: Address,
        price_per_step: U256,
        start_step: Step,
        /// Hash of the last accepted checkpoint, or the job's spec hash before any.
        start_checkpoint: Hash,
    },
    EpochEnded {
        job_id: JobId,
        epoch: Epoch,
        reason: EpochEndReason,
    },
    CheckpointAccepted {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Address,
        amount: U256,
    },
    CheckpointRejected {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Address,
        slashed: U256,
    },
    JobCompleted {
        job_id: JobId,
        refund: U256,
    },
    JobExpired {
        job_id: JobId,
        refund: U256,
    },
    /// `settle` credited a completed job's unspent budget to its client.
    JobSettled {
        job_id: JobId,
        client: Address,
        refund: U256,
    },
}

impl ChainEvent {
    pub fn job_id(&self) -> JobId {
        match self {
            ChainEvent::JobCreated { job_id, .. }
            | ChainEvent::ProviderAssigned { job_id, .. }
            | ChainEvent::EpochEnded { job_id, .. }
            | ChainEvent::CheckpointAccepted { job_id, .. }
            | ChainEvent::CheckpointRejected { job_id, .. }
            | ChainEvent::JobCompleted { job_id, .. }
            | ChainEvent::JobExpired { job_id, .. }
            | ChainEvent::JobSettled { job_id, .. } => *job_id,
        }
    }

    /// A `JobCreated`'s terms hash (what bids are signed over); `None` for other events.
    pub fn terms_hash(&self) -> Option<Hash> {
        if !matches!(self, ChainEvent::JobCreated { .. }) {
            return None;
        }
        let remembered = TERMS.with(|c| {
            c.borrow()
                .get(&self.job_id())
                .filter(|(event, _)| event == self)
                .map(|(_, hash)| *hash)
        });
        if remembered.is_some() {
            return remembered;
        }
        let hash = self.terms_hash_uncached();
        if let Some(h) = hash {
            TERMS.with(|c| {
                let mut c = c.borrow_mut();
                // Forgetting everything at once is crude but bounded and cheap: a job's
                // look-ups come together, while its offer is out.
                if c.len() >= TERMS_CACHE {
                    c.clear();
                }
                c.insert(self.job_id(), (self.clone(), h));
            });
        }
        hash
    }

    fn terms_hash_uncached(&self) -> Option<Hash> {
        let ChainEvent::JobCreated {
            client,
            token,
            budget,
            max_price_per_step,
            total_steps,
            checkpoint_interval,
            spec_hash,
            verifiers,
            quorum,
            deadline,
            grace,
            ..
        } = self
        else {
            return None;
        };
        Some(
            JobTerms {
                client: *client,
                token: *token,
                budget: *budget,
                max_price_per_step: *max_price_per_step,
                total_steps: *total_steps,
                checkpoint_interval: *checkpoint_interval,
                spec_hash: *spec_hash,
                verifiers,
                quorum: *quorum,
                deadline: *deadline,
                grace: *grace,
            }
            .hash(),
        )
    }
}

/// Terms hashes remembered per thread, by the `JobCreated` they were computed from. Every
/// provider an offer reaches reads the job's `JobCreated` and hashes its terms (two
/// keccaks): dozens of times the same event in the simulator, where each provider of a
/// node-sized swarm runs in one process. A pure function of the event (compared in full),
/// so answering from memory changes no result.
const TERMS_CACHE: usize = 4096;

type RememberedTerms = std::collections::HashMap<JobId, (ChainEvent, Hash)>;

std::thread_local! {
    static TERMS: std::cell::RefCell<RememberedTerms> = std::cell::RefCell::new(RememberedTerms::new());
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainTx {
    CreateJob {
        token: Address,
        budget: U256,
        max_price_per_step: U256,
        total_steps: Step,
        checkpoint_interval: Step,
        spec_hash: Hash,
        verifiers: Vec<Address>,
        quorum: u8,
        deadline: u64,
        grace: u64,
    },
    Assign {
        job_id: JobId,
        provider: Address,
        price_per_step: U256,
        bid_expiry: u64,
        bid_signature: Sig65,
    },
    ReleaseProvider {
        job_id: JobId,
    },
    /// `sigs` are ordered by ascending signer address, so the escrow can refuse repeats cheaply.
    AcceptCheckpoint {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: Vec<Sig65>,
    },
    RejectCheckpoint {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: Vec<Sig65>,
    },
    Expire {
        job_id: JobId,
    },
    /// The provider leaves its live epoch (no slash; its unaccepted steps are unpaid).
    Resign {
        job_id: JobId,
    },
    /// Credits a completed job's unspent budget to its client (anyone may call it).
    Settle {
        job_id: JobId,
    },
    Withdraw {
        token: Address,
    },
}

/// Correlates a submitted transaction with a later [`crate::Input::TxFailed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxId(pub u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn created(job: u64, grace: u64) -> ChainEvent {
        ChainEvent::JobCreated {
            job_id: JobId::from(job),
            client: Address::repeat_byte(1),
            token: Address::repeat_byte(2),
            budget: U256::from(5_000_000),
            max_price_per_step: U256::from(3_000),
            total_steps: 400,
            checkpoint_interval: 50,
            spec_hash: Hash::repeat_byte(3),
            verifiers: vec![Address::repeat_byte(4), Address::repeat_byte(5)],
            quorum: 2,
            deadline: 10_000,
            grace,
        }
    }

    /// A remembered terms hash is handed back only for the very event it was computed from:
    /// another `JobCreated` under the same job id (another escrow, a reorg) gets its own.
    #[test]
    fn remembered_terms_answer_only_their_own_event() {
        let (a, b) = (created(7, 60), created(7, 61));
        for e in [&a, &b, &a, &b] {
            assert_eq!(e.terms_hash(), e.terms_hash_uncached());
        }
        assert_ne!(a.terms_hash(), b.terms_hash());
        // Past the bound the memory starts over and still answers correctly.
        for job in 0..(TERMS_CACHE as u64 + 10) {
            let e = created(job, 60);
            assert_eq!(e.terms_hash(), e.terms_hash_uncached());
        }
        assert_eq!(a.terms_hash(), a.terms_hash_uncached());
        let other = ChainEvent::JobSettled {
            job_id: JobId::from(7),
            client: Address::repeat_byte(1),
            refund: U256::ZERO,
        };
        assert_eq!(other.terms_hash(), None);
    }
}
