//! Chain events (inputs) and transactions (outputs), mirroring JobEscrow's events and
//! functions in docs/interfaces.md. The node's chain client converts to and from the ABI.

use alloy_primitives::{Address, U256};

use crate::eip712::JobTerms;
use crate::signing::Sig65;
use crate::types::{Epoch, Hash, JobId, Step};

/// `EpochEnded.reason`. Codes follow the escrow's enum; unknown codes are kept, not dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EpochEndReason {
    /// A new `assign` fenced this epoch (a late accept of it may still land in the window).
    Replaced,
    /// The client called `releaseProvider` (a late accept may still land in the window).
    Released,
    /// A quorum rejected a checkpoint.
    Rejected,
    /// The last step was accepted.
    Completed,
    /// The job expired.
    Expired,
    /// The provider called `resign`: no slash, its unaccepted steps unpaid.
    Resigned,
    /// A late accept of an epoch the client had ended moved the job's head past this
    /// epoch's start: it ends unslashed and the job goes on from the new head.
    Superseded,
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
            6 => EpochEndReason::Superseded,
            c => EpochEndReason::Other(c),
        }
    }

    pub fn code(self) -> u8 {
        match self {
            EpochEndReason::Replaced => 0,
            EpochEndReason::Released => 1,
            EpochEndReason::Rejected => 2,
            EpochEndReason::Completed => 3,
            EpochEndReason::Expired => 4,
            EpochEndReason::Resigned => 5,
            EpochEndReason::Superseded => 6,
            EpochEndReason::Other(c) => c,
        }
    }

    /// The client ended the epoch: the escrow keeps a record of it for a late accept.
    pub fn by_client(self) -> bool {
        matches!(self, EpochEndReason::Replaced | EpochEndReason::Released)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainEvent {
    /// The job exists and its budget is escrowed; it waits in `Drawing` for its committee.
    JobCreated {
        job_id: JobId,
        client: Address,
        token: Address,
        budget: U256,
        max_price_per_step: U256,
        total_steps: Step,
        checkpoint_interval: Step,
        spec_hash: Hash,
        committee_size: u8,
        quorum: u8,
        /// Paid per decision to each committee member whose signature is in it.
        verifier_fee: U256,
        deadline: u64,
        grace: u64,
        /// The block whose hash seeds the committee draw.
        seed_block: u64,
    },
    /// The seed block's hash was gone (over 256 blocks old): the draw is seeded by this
    /// block instead, and must be asked for again.
    CommitteeSeedMoved {
        job_id: JobId,
        seed_block: u64,
    },
    /// The escrow drew the committee (in draw order: `voters` bits index it) and fixed the
    /// job's terms, what every bid signs. The job is open for bids from now on.
    CommitteeDrawn {
        job_id: JobId,
        committee: Vec<Address>,
        terms: Hash,
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
    /// `epoch` may be one that ended already: a late accept within the decision window.
    CheckpointAccepted {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Address,
        amount: U256,
        /// Bit i set: `committee[i]` signed this decision (and earned a fee).
        voters: U256,
        /// `verifier_fee` × signers, taken from the budget.
        fees: U256,
    },
    CheckpointRejected {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Address,
        /// Non-zero only when every committee member signed the reject.
        slashed: U256,
        voters: U256,
        /// Zero when the budget had no slack for them.
        fees: U256,
    },
    JobCompleted {
        job_id: JobId,
        refund: U256,
    },
    JobExpired {
        job_id: JobId,
        refund: U256,
    },
    /// `settle` credited a completed job's unspent budget to its client (and its fees to
    /// its committee).
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
            | ChainEvent::CommitteeSeedMoved { job_id, .. }
            | ChainEvent::CommitteeDrawn { job_id, .. }
            | ChainEvent::ProviderAssigned { job_id, .. }
            | ChainEvent::EpochEnded { job_id, .. }
            | ChainEvent::CheckpointAccepted { job_id, .. }
            | ChainEvent::CheckpointRejected { job_id, .. }
            | ChainEvent::JobCompleted { job_id, .. }
            | ChainEvent::JobExpired { job_id, .. }
            | ChainEvent::JobSettled { job_id, .. } => *job_id,
        }
    }

    /// The terms hash a `JobCreated` gets once `committee` is drawn for it: what a provider
    /// signs, recomputed from what it read rather than taken from `CommitteeDrawn`, so its
    /// bid is good only for the job it vetted. `None` for other events.
    pub fn terms_with(&self, committee: &[Address]) -> Option<Hash> {
        let ChainEvent::JobCreated {
            client,
            token,
            budget,
            max_price_per_step,
            total_steps,
            checkpoint_interval,
            spec_hash,
            quorum,
            verifier_fee,
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
                committee,
                quorum: *quorum,
                verifier_fee: *verifier_fee,
                deadline: *deadline,
                grace: *grace,
            }
            .hash(),
        )
    }
}

/// Whether bit `index` of a decision's `voters` is set: `committee[index]` signed it.
pub fn voted(voters: U256, index: usize) -> bool {
    index < 256 && voters.bit(index)
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
        committee_size: u8,
        quorum: u8,
        verifier_fee: U256,
        deadline: u64,
        grace: u64,
    },
    /// Draws the committee of a job in `Drawing` (anyone may call it, from the block after
    /// the seed block on).
    DrawCommittee {
        job_id: JobId,
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
    /// `sigs` are ordered by ascending signer address (the escrow takes any order).
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
    /// Credits a completed job's unspent budget to its client and the fees to its
    /// committee (anyone may call it, once).
    Settle {
        job_id: JobId,
    },
    Withdraw {
        token: Address,
    },
}

impl ChainTx {
    /// A committee's decision on a checkpoint: `acceptCheckpoint` when `accept`, else
    /// `rejectCheckpoint`, with the same fields either way.
    pub fn decision(
        accept: bool,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        sigs: Vec<Sig65>,
    ) -> ChainTx {
        if accept {
            ChainTx::AcceptCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            }
        } else {
            ChainTx::RejectCheckpoint {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                sigs,
            }
        }
    }
}

/// Correlates a submitted transaction with a later [`crate::Input::TxFailed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxId(pub u64);
