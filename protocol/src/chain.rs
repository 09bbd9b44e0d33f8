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
