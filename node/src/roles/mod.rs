//! The role runtime: the protocol crate's Client, Provider and Verifier machines, driven by
//! wall-clock time, accepted gossip, the chain follower and the results of the tasks they ask
//! for (transactions, blob fetches, training, verification). The machines decide; this module
//! only executes their outputs and feeds back what happened, so the node and the simulator
//! run the same decisions.

pub mod chain;
pub mod handle;
pub mod hardware;
pub mod jobs;
pub mod train;
pub mod verify;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use gpuchain_contracts::chain::{Batch, ChainClient};
use gpuchain_protocol::client::{ClientConfig, JobParams, JobStatus};
use gpuchain_protocol::detector::DetectorConfig;
use gpuchain_protocol::validation::Verdict;
use gpuchain_protocol::{
    Address, ChainEvent, Checked, Client, Hash, Input, JobId, JobSpec, Message, Notice, Output,
    Provider, ProviderConfig, SigningKey, StateMachine, Time, TxId, U256, Verifier, VerifierConfig,
};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Role;
use crate::events::NodeEvent;
use crate::handle::NodeHandle;
use jobs::JobLibrary;

/// Queue between the swarm, the chain follower, the tasks and the machines.
pub const ROLE_QUEUE: usize = 4096;

#[derive(Debug)]
pub enum RoleEvent {
    /// Checked by the gossip validator; the machines take it without checking again, and
    /// their combined verdict goes back to gossipsub with the ticket.
    Gossip {
        checked: Box<Checked>,
        ticket: crate::event_loop::GossipTicket,
    },
    ConnectionClosed {
        address: Address,
    },
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
}

/// `POST /v1/jobs`: a job file on this machine plus the escrow terms.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub spec_path: PathBuf,
    /// Token base units (USDC has 6 decimals).
    pub budget: U256,
    pub max_price_per_step: U256,
    pub verifiers: Vec<Address>,
    pub quorum: u8,
    /// Seconds from now (block time) until the deadline.
    pub deadline_secs: u64,
    pub grace_secs: u64,
    /// Accept verifier addresses no peer has announced (in a hello, with the verifier
    /// role) yet: for verifiers that come online after the job is submitted.
    #[serde(default)]
    pub allow_unknown_verifiers: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SubmitReply {
    pub job_id: JobId,
    pub spec_hash: Hash,
    pub tx_hash: String,
}

/// Provider faults for tests and the demo; never on unless asked for by flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// Announce a well-formed checkpoint of random weights.
    Junk,
    /// Announce the interval's starting state as the work of the whole interval.
    Stale,
    /// Announce a checkpoint with a NaN weight.
    Nan,
    /// Train on the batches of another seed's data order.
    WrongOrder,
}

pub struct RolesConfig {
    pub roles: BTreeSet<Role>,
    pub data_dir: PathBuf,
    pub key: SigningKey,
    pub chain: ChainClient,
    pub heartbeat_period: Duration,
    pub detector_timeout: Duration,
    pub price_per_step: U256,
    pub fault: Option<Fault>,
    pub verifier_seed: u64,
}

/// Cloneable context for the tasks the runtime spawns.
#[derive(Clone)]
pub struct Ctx {
    pub handle: NodeHandle,
    pub chain: ChainClient,
    pub library: Arc<JobLibrary>,
    pub events: mpsc::Sender<RoleEvent>,
    pub data_dir: PathBuf,
}

impl Ctx {
    /// From a task: the runtime may be gone at shutdown, which is fine.
    pub async fn input(&self, input: Input) {
        let _ = self.events.send(RoleEvent::Input(input)).await;
    }
}

pub struct RoleRuntime {
    origin: Instant,
    client: Option<Client>,
    provider: Option<Provider>,
    verifier: Option<Verifier>,
    ctx: Ctx,
    rx: mpsc::Receiver<RoleEvent>,
    shutdown: watch::Receiver<bool>,
    training: train::Trainers,
    verify: verify::Verifications,
    pending_create: HashMap<TxId, oneshot::Sender<Result<SubmitReply>>>,
    fault: Option<Fault>,
    /// Subscriptions the replayed history asked for, executed once the loop runs.
    startup: Vec<Output>,
}

impl RoleRuntime {
    pub fn now(&self) -> Time {
        Time::from_millis(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// Builds the machines for the configured roles. `history` is what the chain follower
    /// had already handled before a restart: the client is restored from it (the chain is
    /// the authority), the provider and verifier replay it without acting on it.
    pub fn new(
        config: RolesConfig,
        handle: NodeHandle,
        history: Vec<(u64, ChainEvent)>,
        shutdown: watch::Receiver<bool>,
    ) -> (Self, mpsc::Sender<RoleEvent>) {
        let (tx, rx) = mpsc::channel(ROLE_QUEUE);
        let domain = config.chain.domain();
        let library = Arc::new(JobLibrary::default());
        let origin = Instant::now();
        let now = Time::ZERO;
        for (_, ev) in &history {
            if let ChainEvent::JobCreated {
                job_id, spec_hash, ..
            } = ev
            {
                library.bind_job(*job_id, *spec_hash);
            }
        }
        let client = config.roles.contains(&Role::Client).then(|| {
            let mut cc = ClientConfig::new(domain);
            cc.detector = DetectorConfig {
                period: config.heartbeat_period,
                timeout: config.detector_timeout,
                ..DetectorConfig::default()
            };
            let specs = chain::load_specs(&config.data_dir);
            for s in &specs {
                library.remember_spec(s);
            }
            Client::restore(cc, config.key.clone(), specs, history.clone(), now)
        });
        let mut provider = config.roles.contains(&Role::Provider).then(|| {
            let mut pc = ProviderConfig::new(domain, hardware::local(), config.price_per_step);
            pc.heartbeat_period = config.heartbeat_period;
            Provider::new(pc, config.key.clone())
        });
        let mut verifier = config.roles.contains(&Role::Verifier).then(|| {
            Verifier::new(
                VerifierConfig::new(domain, config.verifier_seed),
                config.key.clone(),
            )
        });
        let mut replay_outputs = Vec::new();
        if let Some(p) = provider.as_mut() {
            replay_outputs.extend(replay(p, now, &history));
        }
        if let Some(v) = verifier.as_mut() {
            replay_outputs.extend(replay(v, now, &history));
        }
        let ctx = Ctx {
            handle,
            chain: config.chain,
            library,
            events: tx.clone(),
            data_dir: config.data_dir,
        };
        let mut rt = Self {
            origin,
            client,
            provider,
            verifier,
            ctx,
            rx,
            shutdown,
            training: train::Trainers::default(),
            verify: verify::Verifications::default(),
            pending_create: HashMap::new(),
            fault: config.fault,
            startup: Vec::new(),
        };
        // An epoch this provider held before the restart is lost with its trainer: go
        // silent and let the client's detector move on, rather than resume half-known work.
        let stale_jobs: Vec<JobId> = history
            .iter()
            .map(|(_, e)| e.job_id())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if let Some(p) = rt.provider.as_mut() {
            for job_id in stale_jobs {
                if let Some(t) = p.training(job_id) {
                    let epoch = t.epoch;
                    p.handle_input(
                        now,
                        Input::TrainingFailed {
                            job_id,
                            epoch,
                            reason: "node restarted".into(),
                        },
                    );
                }
            }
            while p.poll_output().is_some() {}
        }
        rt.startup = replay_outputs;
        (rt, tx)
    }
}

/// Feeds history to a machine and keeps only its subscriptions: everything else it asks
/// for happened (or was abandoned) before the restart.
fn replay(m: &mut dyn StateMachine, now: Time, history: &[(u64, ChainEvent)]) -> Vec<Output> {
    let mut keep = Vec::new();
    for (block_time, event) in history {
        m.handle_input(
            now,
            Input::Chain {
                block_time: *block_time,
                event: event.clone(),
            },
        );
        while let Some(out) = m.poll_output() {
            match out {
                Output::Subscribe { .. } | Output::Unsubscribe { .. } => keep.push(out),
                _ => {}
            }
        }
    }
    keep
}

impl RoleRuntime {
    fn each(&mut self, mut f: impl FnMut(&mut dyn StateMachine)) {
        if let Some(c) = self.client.as_mut() {
            f(c);
        }
        if let Some(p) = self.provider.as_mut() {
            f(p);
        }
        if let Some(v) = self.verifier.as_mut() {
            f(v);
        }
    }

    fn next_timeout(&self) -> Option<Time> {
        let c = self.client.as_ref().and_then(StateMachine::poll_timeout);
        let p = self.provider.as_ref().and_then(StateMachine::poll_timeout);
        let v = self.verifier.as_ref().and_then(StateMachine::poll_timeout);
        [c, p, v].into_iter().flatten().min()
    }

    fn drain(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        self.each(|m| {
            while let Some(o) = m.poll_output() {
                out.push(o);
            }
        });
        out
    }

    pub async fn run(mut self) -> Result<()> {
        for out in std::mem::take(&mut self.startup) {
            self.execute(out).await;
        }
        loop {
            let deadline = self.next_timeout().map(|t| {
                let wait = t.since(self.now());
                tokio::time::Instant::now() + wait
            });
            tokio::select! {
                ev = self.rx.recv() => match ev {
                    Some(ev) => self.on_event(ev),
                    None => break,
                },
                () = sleep_until(deadline) => {
                    let now = self.now();
                    self.each(|m| m.handle_timeout(now));
                }
                changed = self.shutdown.changed() => {
                    if changed.is_err() || *self.shutdown.borrow() {
                        break;
                    }
                }
            }
            for out in self.drain() {
                self.execute(out).await;
            }
        }
        self.training.stop_all();
        Ok(())
    }

    fn on_event(&mut self, ev: RoleEvent) {
        let now = self.now();
        match ev {
            RoleEvent::Gossip { checked, ticket } => {
                match checked.message() {
                    Message::JobOffer(o) => self.ctx.library.remember_spec(&o.spec),
                    Message::CheckpointAnnounce(a) => self.verify.remember_announce(a),
                    _ => {}
                }
                let mut verdict = Verdict::Accept;
                let mut client_verdict = None;
                if let Some(c) = self.client.as_mut() {
                    let v = c.handle_checked(now, &checked);
                    client_verdict = Some(v);
                    verdict = verdict.combine(v);
                }
                if let Some(p) = self.provider.as_mut() {
                    verdict = verdict.combine(p.handle_checked(now, &checked));
                }
                if let Some(v) = self.verifier.as_mut() {
                    verdict = verdict.combine(v.handle_checked(now, &checked));
                }
                self.ctx.handle.report_verdict(ticket, verdict);
                // The client's view of liveness, for the run record: heartbeats of its own
                // jobs that it took.
                if let (Message::Heartbeat(h), Some(verdict)) = (checked.message(), client_verdict)
                    && verdict.is_accept()
                    && self
                        .client
                        .as_ref()
                        .is_some_and(|c| c.job_status(h.job_id).is_some())
                {
                    crate::events::emit(
                        NodeEvent::Heartbeat {
                            job_id: h.job_id.to_string(),
                            epoch: h.epoch,
                            provider: h.provider.to_string(),
                            seq: h.seq,
                            step: h.step,
                            loss: h.loss,
                        },
                        "heartbeat",
                    );
                }
            }
            RoleEvent::ConnectionClosed { address } => {
                self.each(|m| m.handle_input(now, Input::ConnectionClosed { address }));
            }
            RoleEvent::Input(input) => {
                if let Input::StepDone {
                    job_id,
                    epoch,
                    step,
                    loss,
                } = &input
                {
                    crate::events::emit(
                        NodeEvent::Step {
                            job_id: job_id.to_string(),
                            epoch: *epoch,
                            step: *step,
                            loss: *loss,
                        },
                        "step",
                    );
                }
                self.each(|m| m.handle_input(now, input.clone()));
            }
            RoleEvent::Chain { batch, done } => {
                for fe in &batch.events {
                    log_chain_event(&fe.event, fe.block_number);
                    if let ChainEvent::JobCreated {
                        job_id, spec_hash, ..
                    } = &fe.event
                    {
                        self.ctx.library.bind_job(*job_id, *spec_hash);
                    }
                    let input = fe.to_input();
                    self.each(|m| m.handle_input(now, input.clone()));
                }
                let _ = done.send(());
            }
            RoleEvent::SubmitJob { request, reply } => self.submit_job(request, reply),
            RoleEvent::CreateJob {
                spec,
                params,
                reply,
            } => self.create_job(*spec, params, reply),
            RoleEvent::JobStatus { job_id, reply } => {
                let _ = reply.send(self.client.as_ref().and_then(|c| c.job_status(job_id)));
            }
        }
    }

    fn submit_job(&mut self, request: SubmitRequest, reply: oneshot::Sender<Result<SubmitReply>>) {
        let ctx = self.ctx.clone();
        if self.client.is_none() {
            let _ = reply.send(Err(anyhow!(
                "this node does not run the client role; start it with --role client"
            )));
            return;
        }
        // Reading and packing the data and storing the blobs is slow: do it in a task,
        // then come back to the client machine with the spec.
        tokio::spawn(async move {
            match chain::prepare_job(&ctx, &request).await {
                Ok((spec, params)) => {
                    let _ = ctx
                        .events
                        .send(RoleEvent::CreateJob {
                            spec: Box::new(spec),
                            params,
                            reply,
                        })
                        .await;
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        });
    }

    fn create_job(
        &mut self,
        spec: JobSpec,
        params: JobParams,
        reply: oneshot::Sender<Result<SubmitReply>>,
    ) {
        let Some(client) = self.client.as_mut() else {
            let _ = reply.send(Err(anyhow!("this node does not run the client role")));
            return;
        };
        chain::save_spec(&self.ctx.data_dir, &spec);
        self.ctx.library.remember_spec(&spec);
        let id = client.create_job(spec, params);
        self.pending_create.insert(id, reply);
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl RoleRuntime {
    async fn execute(&mut self, out: Output) {
        match out {
            Output::Publish { topic, message } => {
                log_published(&message);
                if let Err(e) = self
                    .ctx
                    .handle
                    .publish(topic.clone(), message.encode())
                    .await
                {
                    tracing::debug!(%topic, error = %e, "publish failed");
                }
            }
            Output::Subscribe { topic } => {
                if let Err(e) = self.ctx.handle.subscribe(topic.clone()).await {
                    tracing::warn!(%topic, error = %e, "cannot subscribe");
                }
            }
            Output::Unsubscribe { topic } => {
                let _ = self.ctx.handle.unsubscribe(topic).await;
            }
            Output::SubmitTx { id, tx } => {
                let reply = self.pending_create.remove(&id);
                tokio::spawn(chain::submit(self.ctx.clone(), id, tx, reply));
            }
            Output::FetchBlob { hash, from } => {
                tokio::spawn(verify::fetch_for_machine(self.ctx.clone(), hash, from));
            }
            Output::StartTraining {
                job_id,
                epoch,
                spec_hash,
                from_step,
                from_checkpoint,
                until_step,
                checkpoint_interval,
            } => {
                let start = train::Start {
                    job_id,
                    epoch,
                    spec_hash,
                    from_step,
                    from_checkpoint,
                    until_step,
                    checkpoint_interval,
                    fault: self.fault,
                };
                self.training.start(self.ctx.clone(), start);
            }
            Output::StopTraining { job_id, epoch } => {
                self.training.stop(&self.ctx, job_id, epoch);
            }
            Output::RunQualityTest {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                baseline,
                baseline_step: _,
            } => {
                let committed = self.verify.committed_state(checkpoint_hash);
                tokio::spawn(verify::quality(
                    self.ctx.clone(),
                    verify::QualityJob {
                        job_id,
                        epoch,
                        step,
                        checkpoint_hash,
                        baseline,
                        committed,
                    },
                ));
            }
            Output::RunSpotCheck {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                provider,
                steps,
            } => {
                tokio::spawn(verify::spot(
                    self.ctx.clone(),
                    verify::SpotJob {
                        job_id,
                        epoch,
                        step,
                        checkpoint_hash,
                        provider,
                        steps,
                    },
                ));
            }
            Output::Notice(n) => log_notice(&n),
        }
    }
}

fn log_published(m: &Message) {
    match m {
        Message::JobOffer(o) => crate::events::emit(
            NodeEvent::OfferPublished {
                job_id: o.job_id.to_string(),
                next_epoch: o.next_epoch,
            },
            "job offered",
        ),
        Message::Bid(b) => crate::events::emit(
            NodeEvent::BidPublished {
                job_id: b.job_id.to_string(),
                epoch: b.epoch,
                price_per_step: b.price_per_step.to_string(),
            },
            "bid",
        ),
        Message::CheckpointAnnounce(a) => crate::events::emit(
            NodeEvent::CheckpointAnnounced {
                job_id: a.job_id.to_string(),
                epoch: a.epoch,
                step: a.step,
                parent_step: a.parent_step,
                checkpoint: a.checkpoint_hash.to_string(),
            },
            "checkpoint announced",
        ),
        Message::Vote(v) => crate::events::emit(
            NodeEvent::VotePublished {
                job_id: v.job_id.to_string(),
                epoch: v.epoch,
                step: v.step,
                accept: v.accept,
                checkpoint: v.checkpoint_hash.to_string(),
            },
            "vote",
        ),
        Message::Heartbeat(_) | Message::NodeHello(_) => {}
    }
}

fn log_notice(n: &Notice) {
    match n {
        Notice::ProviderSelected {
            job_id,
            epoch,
            provider,
            price_per_step,
        } => crate::events::emit(
            NodeEvent::ProviderSelected {
                job_id: job_id.to_string(),
                epoch: *epoch,
                provider: provider.to_string(),
                price_per_step: price_per_step.to_string(),
            },
            "provider selected",
        ),
        Notice::ProviderLost {
            job_id,
            epoch,
            provider,
            silent_for,
        } => crate::events::emit(
            NodeEvent::ProviderLost {
                job_id: job_id.to_string(),
                epoch: *epoch,
                provider: provider.to_string(),
                silent_for_ms: silent_for.as_millis() as u64,
            },
            "provider lost",
        ),
        Notice::NoUsableBids { job_id, epoch } => crate::events::emit(
            NodeEvent::NoUsableBids {
                job_id: job_id.to_string(),
                epoch: *epoch,
            },
            "no usable bid yet; offering again",
        ),
        Notice::QuorumReached {
            job_id,
            epoch,
            step,
            accept,
        } => crate::events::emit(
            NodeEvent::Quorum {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                accept: *accept,
            },
            "verifier quorum",
        ),
        Notice::Voted {
            job_id,
            epoch,
            step,
            accept,
        } => crate::events::emit(
            NodeEvent::Voted {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                accept: *accept,
            },
            "voted",
        ),
        Notice::Fenced { job_id, epoch } => crate::events::emit(
            NodeEvent::Fenced {
                job_id: job_id.to_string(),
                epoch: *epoch,
            },
            "our epoch was fenced; training stopped",
        ),
        Notice::JobFinished { job_id } => crate::events::emit(
            NodeEvent::JobFinished {
                job_id: job_id.to_string(),
            },
            "job finished",
        ),
        Notice::TxFailed { id, reason } => crate::events::emit(
            NodeEvent::TxFailed {
                tx: id.0,
                reason: reason.to_string(),
            },
            "transaction failed",
        ),
        Notice::TrainerInconsistent {
            job_id,
            epoch,
            step,
        } => crate::events::emit(
            NodeEvent::TrainerInconsistent {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
            },
            "trainer reported an inconsistent interval",
        ),
        Notice::UnknownJob { job_id } => crate::events::emit(
            NodeEvent::UnknownJob {
                job_id: job_id.to_string(),
            },
            "assigned to a job whose spec this node never saw",
        ),
    }
}

fn log_chain_event(e: &ChainEvent, block: u64) {
    match e {
        ChainEvent::JobCreated {
            job_id,
            client,
            budget,
            ..
        } => crate::events::emit(
            NodeEvent::ChainJobCreated {
                block,
                job_id: job_id.to_string(),
                client: client.to_string(),
                budget: budget.to_string(),
            },
            "job created on chain",
        ),
        ChainEvent::ProviderAssigned {
            job_id,
            epoch,
            provider,
            price_per_step,
            start_step,
            ..
        } => crate::events::emit(
            NodeEvent::ChainAssigned {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                provider: provider.to_string(),
                price_per_step: price_per_step.to_string(),
                start_step: *start_step,
            },
            "provider assigned",
        ),
        ChainEvent::EpochEnded {
            job_id,
            epoch,
            reason,
        } => crate::events::emit(
            NodeEvent::ChainEpochEnded {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                reason: format!("{:?}", reason),
            },
            "epoch ended",
        ),
        ChainEvent::CheckpointAccepted {
            job_id,
            epoch,
            step,
            provider,
            amount,
            ..
        } => crate::events::emit(
            NodeEvent::ChainAccepted {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                provider: provider.to_string(),
                amount: amount.to_string(),
            },
            "checkpoint accepted",
        ),
        ChainEvent::CheckpointRejected {
            job_id,
            epoch,
            step,
            provider,
            slashed,
            ..
        } => crate::events::emit(
            NodeEvent::ChainRejected {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                provider: provider.to_string(),
                slashed: slashed.to_string(),
            },
            "checkpoint rejected",
        ),
        ChainEvent::JobCompleted { job_id, refund } => crate::events::emit(
            NodeEvent::ChainCompleted {
                block,
                job_id: job_id.to_string(),
                refund: refund.to_string(),
            },
            "job completed",
        ),
        ChainEvent::JobExpired { job_id, refund } => crate::events::emit(
            NodeEvent::ChainExpired {
                block,
                job_id: job_id.to_string(),
                refund: refund.to_string(),
            },
            "job expired",
        ),
    }
}
