//! What the role runtime and the tasks it spawns share: the runtime's queue and its events,
//! the context every task carries, and the API's submission types. A module of its own so
//! that the runners (chain, training, verification) and the runtime that spawns them depend
//! on it instead of on each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use gpuchain_contracts::chain::{Batch, ChainClient};
use gpuchain_protocol::client::{JobParams, JobStatus};
use gpuchain_protocol::{Hash, Input, JobId, JobSpec, SigningKey, U256};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::jobs::JobLibrary;
use crate::cli::{Fault, Role};
use crate::handle::NodeHandle;

/// Queue between the swarm, the chain follower, the tasks and the machines.
pub const ROLE_QUEUE: usize = 4096;

#[derive(Debug)]
pub enum RoleEvent {
    Input(Input),
    /// A batch of escrow events; `done` is answered once the machines have seen them, so
    /// the follower commits its cursor only then.
    Chain {
        batch: Batch,
        done: oneshot::Sender<()>,
    },
    SubmitJob {
        request: SubmitRequest,
        reply: oneshot::Sender<Result<SubmitReply>>,
    },
    /// The submission's data is stored; the client machine takes it from here.
    CreateJob {
        spec: Box<JobSpec>,
        params: JobParams,
        reply: oneshot::Sender<Result<SubmitReply>>,
    },
    JobStatus {
        job_id: JobId,
        reply: oneshot::Sender<Option<JobStatus>>,
    },
    /// The provider machine's refused bids by rule; `None` on a node without the role.
    BidRefusals {
        reply: oneshot::Sender<Option<BTreeMap<String, u64>>>,
    },
}

/// `POST /v1/jobs`: a job file on this machine plus the escrow terms.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub spec_path: PathBuf,
    /// Token base units (USDC has 6 decimals).
    pub budget: U256,
    pub max_price_per_step: U256,
    /// How many verifiers the escrow draws for the job's committee.
    pub committee_size: u8,
    /// Votes needed to accept or reject a checkpoint: a strict majority of the committee.
    pub quorum: u8,
    /// What each committee member signing a decision earns, in token base units.
    pub verifier_fee: U256,
    /// Seconds from now (block time) until the deadline.
    pub deadline_secs: u64,
    pub grace_secs: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SubmitReply {
    pub job_id: JobId,
    pub spec_hash: Hash,
    pub tx_hash: String,
}

pub struct RolesConfig {
    pub roles: BTreeSet<Role>,
    pub data_dir: PathBuf,
    pub key: SigningKey,
    pub chain: ChainClient,
    pub heartbeat_period: Duration,
    pub detector_timeout: Duration,
    /// The least adaptive liveness timeout (at most `detector_timeout`).
    pub detector_floor: Duration,
    pub price_per_step: U256,
    /// What this node declares in its bids (`--memory-mb` or the machine's memory); its
    /// trainer plans within the same memory.
    pub hardware: gpuchain_protocol::messages::Hardware,
    /// What the provider requires of a job before it bids.
    pub vetting: gpuchain_protocol::provider::Vetting,
    pub fault: Option<Fault>,
    /// Armed through the control API on a testnet provider started with
    /// `--test-cheat-control`; absent otherwise.
    pub cheat: Option<Arc<CheatSwitch>>,
    pub verifier_seed: u64,
}

/// TESTING ONLY: a fault that a local testnet's break-it controls (and the detection bench)
/// arm on a running provider: a cheat for its next checkpoint, after which it is honest
/// again, or a hang of its training from the next step on.
#[derive(Debug, Default)]
pub struct CheatSwitch(std::sync::Mutex<Option<Fault>>);

impl CheatSwitch {
    /// Arms `fault`: junk, stale or nan for the next checkpoint, or hang for the next step.
    pub fn arm(&self, fault: Fault) -> anyhow::Result<()> {
        if !matches!(fault, Fault::Junk | Fault::Stale | Fault::Nan | Fault::Hang) {
            anyhow::bail!(
                "only junk, stale and nan (one checkpoint) or hang (from the next step) can be armed, not {fault:?}"
            );
        }
        *self.slot() = Some(fault);
        Ok(())
    }

    /// The armed checkpoint cheat, disarming it.
    pub fn take_checkpoint_cheat(&self) -> Option<Fault> {
        self.slot().take_if(|f| *f != Fault::Hang)
    }

    /// Whether a hang is armed, disarming it.
    pub fn take_hang(&self) -> bool {
        self.slot().take_if(|f| *f == Fault::Hang).is_some()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Fault>> {
        // Nothing can be left half-written under this lock.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Cloneable context for the tasks the runtime spawns.
#[derive(Clone)]
pub struct Ctx {
    pub handle: NodeHandle,
    pub chain: ChainClient,
    pub library: Arc<JobLibrary>,
    pub events: mpsc::Sender<RoleEvent>,
    pub data_dir: PathBuf,
    pub cheat: Option<Arc<CheatSwitch>>,
    /// The memory this provider offers for training, in bytes: the trainer's budget.
    pub memory_bytes: u64,
}

impl Ctx {
    /// From a task: the runtime may be gone at shutdown, which is fine.
    pub async fn input(&self, input: Input) {
        let _ = self.events.send(RoleEvent::Input(input)).await;
    }
}
