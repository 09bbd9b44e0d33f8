//! The role runtime: the protocol crate's Client, Provider and Verifier machines, driven by
//! wall-clock time, accepted gossip, the chain follower and the results of the tasks they ask
//! for (transactions, blob fetches, training, verification). The machines decide; this module
//! only executes their outputs and feeds back what happened, so the node and the simulator
//! run the same decisions.

pub mod chain;
pub mod ctx;
pub mod handle;
pub mod jobs;
pub mod late_timer;
pub mod record;
pub mod send_gaps;
pub mod text_job;
pub mod train;
pub mod verify;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use gpuchain_protocol::client::{ClientConfig, JobParams};
use gpuchain_protocol::detector::DetectorConfig;
use gpuchain_protocol::{
    ChainEvent, Input, JobSpec, Message, Output, ProviderConfig, Time, TxId, VerifierConfig,
};
use tokio::sync::{mpsc, oneshot, watch};

pub use crate::cli::{Fault, Role};
use crate::events::NodeEvent;
use crate::handle::NodeHandle;
use crate::inbound::Inbound;
pub use ctx::{Ctx, ROLE_QUEUE, RoleEvent, RolesConfig, SubmitReply, SubmitRequest};
use gpuchain_protocol::faults::ClientFault;
use gpuchain_protocol::roles::{RoleConfigs, Roles};
use handle::RolesHandle;
use jobs::JobLibrary;
use late_timer::{Fire, LateTimer};
use send_gaps::SendGaps;

pub struct RoleRuntime {
    origin: Instant,
    /// The protocol's composite of this node's machines, the same one the simulator hosts.
    machines: Roles,
    ctx: Ctx,
    rx: mpsc::Receiver<RoleEvent>,
    inbound: mpsc::Receiver<Inbound>,
    shutdown: watch::Receiver<bool>,
    training: train::Trainers,
    /// The compute threads' wait for a CPU, sampled on the machines' timer while training.
    starvation: crate::compute::Starvation,
    starved_reported: u64,
    pending_create: HashMap<TxId, oneshot::Sender<Result<SubmitReply>>>,
    fault: Option<Fault>,
    /// Holds the client's verdicts when the timer fired late (one heartbeat period).
    late_timer: LateTimer,
    /// Specs kept in the data dir (see [`RoleRuntime::keep_on_disk`]).
    saved_specs: std::collections::HashSet<gpuchain_protocol::Hash>,
    /// The provider's heartbeats sent late, and what held them (see [`send_gaps`]).
    send_gaps: SendGaps,
    /// How long after its deadline the timer woke, for the outputs of that wake (zero for
    /// any other's).
    timer_late: std::time::Duration,
}

impl RoleRuntime {
    pub fn now(&self) -> Time {
        Time::from_millis(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// Builds the machines for the configured roles with [`Roles::restore`] from `history`,
    /// what the chain follower had already handled before a restart (the chain is the
    /// authority). Returns the handle the API and the chain follower use; the swarm's
    /// gossip and lost connections come in on `inbound`.
    pub fn new(
        config: RolesConfig,
        handle: NodeHandle,
        history: Vec<(u64, ChainEvent)>,
        inbound: mpsc::Receiver<Inbound>,
        shutdown: watch::Receiver<bool>,
    ) -> (Self, RolesHandle) {
        let (tx, rx) = mpsc::channel(ROLE_QUEUE);
        let domain = config.chain.domain();
        let library = Arc::new(JobLibrary::default());
        for (_, ev) in &history {
            if let ChainEvent::JobCreated { spec_hash, .. } = ev {
                library.keep_spec(*spec_hash);
            }
        }
        let has = |r| config.roles.contains(&r);
        let configs = RoleConfigs {
            client: has(Role::Client).then(|| {
                let mut cc = ClientConfig::new(domain);
                cc.detector = DetectorConfig {
                    period: config.heartbeat_period,
                    timeout: config.detector_timeout,
                    // See DEFAULT_DETECTOR_FLOOR.
                    floor: config.detector_floor.min(config.detector_timeout),
                    ..DetectorConfig::default()
                };
                cc
            }),
            provider: has(Role::Provider).then(|| {
                let mut pc = ProviderConfig::new(domain, config.hardware, config.price_per_step);
                pc.heartbeat_period = config.heartbeat_period;
                pc.vetting = config.vetting.clone();
                pc.memory_fit = Some(jobs::memory_fit);
                pc
            }),
            verifier: has(Role::Verifier)
                .then(|| VerifierConfig::new(domain, config.verifier_seed)),
        };
        // Every role's saved specs: a restarted provider or verifier may be assigned to, or
        // sit on the committee of, a job whose offer it will not hear again.
        let specs = chain::load_specs(&config.data_dir);
        for s in &specs {
            library.remember_spec(s);
            library.keep_spec(s.spec_hash());
        }
        let saved_specs = specs.iter().map(JobSpec::spec_hash).collect();
        let mut machines = Roles::restore(configs, &config.key, specs, &history, Time::ZERO);
        if config.fault == Some(Fault::WithholdPay) {
            machines.set_client_fault(Some(ClientFault::WithholdPay));
        }
        let ctx = Ctx {
            handle,
            chain: config.chain,
            library,
            events: tx.clone(),
            data_dir: config.data_dir,
            cheat: config.cheat,
            memory_bytes: config.hardware.memory_bytes,
        };
        let rt = Self {
            origin: Instant::now(),
            machines,
            ctx,
            rx,
            inbound,
            shutdown,
            training: train::Trainers::default(),
            starvation: crate::compute::Starvation::default(),
            starved_reported: 0,
            pending_create: HashMap::new(),
            fault: config.fault,
            late_timer: LateTimer::new(config.heartbeat_period),
            saved_specs,
            send_gaps: SendGaps::new(config.heartbeat_period),
            timer_late: std::time::Duration::ZERO,
        };
        (rt, RolesHandle::new(tx))
    }

    fn drain(&mut self) -> Vec<Output> {
        std::iter::from_fn(|| self.machines.poll_output()).collect()
    }

    pub async fn run(mut self) -> Result<()> {
        loop {
            // What the machines asked for, the restored ones' subscriptions first.
            for out in self.drain() {
                self.execute(out).await;
            }
            // Only what a timer wake put out carries its lateness.
            self.timer_late = std::time::Duration::ZERO;
            let now = self.now();
            let deadline = [
                self.late_timer
                    .client_deadline(self.machines.client_timeout()),
                self.machines.timeout_except_client(),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|t| tokio::time::Instant::now() + t.since(now));
            tokio::select! {
                ev = self.rx.recv() => match ev {
                    Some(ev) => self.on_event(ev),
                    None => break,
                },
                ev = self.inbound.recv() => match ev {
                    Some(ev) => self.on_inbound(ev),
                    // The swarm is gone: the node is stopping.
                    None => break,
                },
                () = sleep_until(deadline) => {
                    self.timer_late = deadline
                        .map(|d| tokio::time::Instant::now().saturating_duration_since(d))
                        .unwrap_or_default();
                    // Before the client judges silence, the swarm hands over what it already
                    // had (a swarm busy with something else holds heartbeats that have
                    // arrived), and how long that took says whether it was behind.
                    let lag = if self.client_due() {
                        let asked = Instant::now();
                        let _ = self.ctx.handle.sync().await;
                        asked.elapsed()
                    } else {
                        std::time::Duration::ZERO
                    };
                    // `select!` picks among ready branches at random: a heartbeat already
                    // waiting when the timer fires would lose the draw half the time and its
                    // provider be failed over for a beat that had arrived. What came in by
                    // the deadline is heard first.
                    while let Ok(ev) = self.inbound.try_recv() {
                        self.on_inbound(ev);
                    }
                    self.on_timer(lag);
                }
                changed = self.shutdown.changed() => {
                    if changed.is_err() || *self.shutdown.borrow() {
                        break;
                    }
                }
            }
        }
        self.training.stop_all();
        Ok(())
    }

    /// Keeps a spec in the data dir once the chain has a job for it and its offer was heard
    /// (in either order), so that a restarted node can still train or check that job: the
    /// chain names only the spec's hash, and its offer is not gossiped again. Only specs of
    /// on-chain jobs, so gossip alone cannot fill the disk.
    fn keep_on_disk(&mut self, spec_hash: gpuchain_protocol::Hash) {
        if self.saved_specs.contains(&spec_hash) {
            return;
        }
        if let Some(spec) = self.ctx.library.spec_on_chain(spec_hash) {
            chain::save_spec(&self.ctx.data_dir, &spec);
            self.saved_specs.insert(spec_hash);
        }
    }

    /// Whether a deadline of the client's has passed: only then may a verdict on silence be
    /// near, and the swarm is asked to hand over what it has first.
    fn client_due(&self) -> bool {
        self.machines
            .client_timeout()
            .is_some_and(|t| t <= self.now())
    }

    /// The machines' timeouts; a late one of the client's waits for a catch-up first (see
    /// [`late_timer`]). `lag`: how long the swarm took to hand over what it had ready.
    fn on_timer(&mut self, lag: std::time::Duration) {
        let now = self.now();
        // Fresh before each heartbeat the timer may send: a host that starves its trainer
        // says so, and the client gives it that much more time for its step.
        if self.training.any() {
            let total_ms = self.starvation.sample();
            if total_ms != self.starved_reported {
                self.starved_reported = total_ms;
                self.machines
                    .handle_input(now, Input::ComputeStarved { total_ms });
            }
        }
        match self
            .late_timer
            .on_fire(now, self.machines.client_timeout(), lag)
        {
            Fire::All => self.machines.handle_timeout(now),
            Fire::AllButClient => self.machines.handle_timeout_except_client(now),
        }
    }

    fn on_inbound(&mut self, ev: Inbound) {
        let now = self.now();
        match ev {
            Inbound::Gossip { checked, ticket } => {
                if let Message::JobOffer(o) = checked.message() {
                    self.ctx.library.remember_spec(&o.spec);
                    self.keep_on_disk(o.spec.spec_hash());
                }
                let verdict = self.machines.handle_checked(now, &checked);
                self.ctx.handle.report_verdict(ticket, verdict);
                // The client's view of liveness, for the run record: heartbeats of its own
                // jobs that it took (an accepted heartbeat is one every machine took).
                if let Message::Heartbeat(h) = checked.message()
                    && verdict.is_accept()
                    && self
                        .machines
                        .client()
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
                            starved_ms: h.starved_ms,
                            checkpointing: h.checkpointing,
                        },
                        "heartbeat",
                    );
                }
            }
            Inbound::ConnectionClosed { address } => {
                self.machines
                    .handle_input(now, Input::ConnectionClosed { address });
            }
            Inbound::PathRtt { address, rtt } => {
                self.machines
                    .handle_input(now, Input::PathRtt { address, rtt });
            }
        }
    }

    fn on_event(&mut self, ev: RoleEvent) {
        let now = self.now();
        match ev {
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
                self.machines.handle_input(now, input);
            }
            RoleEvent::Chain { batch, done } => {
                for fe in &batch.events {
                    record::chain_event(&fe.event, fe.block_number);
                    match &fe.event {
                        ChainEvent::JobCreated { spec_hash, .. } => {
                            self.ctx.library.keep_spec(*spec_hash);
                            self.keep_on_disk(*spec_hash);
                        }
                        ChainEvent::CheckpointAccepted {
                            job_id,
                            epoch,
                            step,
                            ..
                        }
                        | ChainEvent::CheckpointRejected {
                            job_id,
                            epoch,
                            step,
                            ..
                        } => self.training.decided(*job_id, *epoch, *step),
                        _ => {}
                    }
                    self.machines.handle_input(now, fe.to_input());
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
                let _ = reply.send(self.machines.client().and_then(|c| c.job_status(job_id)));
            }
            RoleEvent::BidRefusals { reply } => {
                let _ = reply.send(self.machines.provider().map(|p| {
                    p.refusals()
                        .iter()
                        .map(|(rule, n)| (rule.name().to_string(), *n))
                        .collect()
                }));
            }
        }
    }

    fn submit_job(&mut self, request: SubmitRequest, reply: oneshot::Sender<Result<SubmitReply>>) {
        let ctx = self.ctx.clone();
        if self.machines.client().is_none() {
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
        let Some(client) = self.machines.client_mut() else {
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
                record::published(&message);
                let asked = Instant::now();
                let sent = self
                    .ctx
                    .handle
                    .publish(topic.clone(), message.encode())
                    .await;
                match sent {
                    Ok(_) => {
                        if let Message::Heartbeat(h) = &message {
                            let at = Instant::now();
                            let late = self.send_gaps.on_sent(
                                h.job_id,
                                at,
                                self.timer_late,
                                at.duration_since(asked),
                            );
                            if let Some(ev) = late {
                                crate::events::emit(ev, "heartbeat sent late");
                            }
                        }
                    }
                    Err(e) => tracing::debug!(%topic, error = %e, "publish failed"),
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
                // A new epoch's heartbeats are a new stream, not late ones.
                self.send_gaps.forget(job_id);
                self.training.start(self.ctx.clone(), start);
            }
            Output::StopTraining { job_id, epoch } => {
                self.send_gaps.forget(job_id);
                self.training.stop(&self.ctx, job_id, epoch);
            }
            Output::PrepareJob { spec_hash, .. } => {
                let ctx = self.ctx.clone();
                tokio::spawn(async move {
                    ctx.library
                        .prefetch(spec_hash, &ctx.handle, &ctx.data_dir)
                        .await;
                });
            }
            Output::RunQualityTest {
                job_id,
                spec_hash,
                epoch,
                step,
                checkpoint_hash,
                committed_state,
                baseline,
                baseline_step: _,
            } => {
                tokio::spawn(verify::quality(
                    self.ctx.clone(),
                    verify::QualityJob {
                        job_id,
                        spec_hash,
                        epoch,
                        step,
                        checkpoint_hash,
                        baseline,
                        committed_state,
                        byzantine: self.fault == Some(Fault::RejectAll),
                    },
                ));
            }
            Output::RunSpotCheck {
                job_id,
                spec_hash,
                epoch,
                step,
                checkpoint_hash,
                provider,
                parent_step,
                parent_checkpoint,
                steps,
            } => {
                tokio::spawn(verify::spot(
                    self.ctx.clone(),
                    verify::SpotJob {
                        job_id,
                        spec_hash,
                        epoch,
                        step,
                        checkpoint_hash,
                        provider,
                        parent_step,
                        parent_checkpoint,
                        steps,
                    },
                ));
            }
            Output::Notice(n) => record::notice(&n),
        }
    }
}
