//! The engine: nodes, the event loop in virtual time, the chain (blocks over the escrow model)
//! and the network. The roles are the protocol crate's machines (`drive`); the node processes
//! around them are in `nodes`; this file only moves events around.
//!
//! Longer than our usual file because the event loop, the chain and the network share the one
//! queue and clock; splitting them would hand `&mut World` across modules for every event.

use crate::cheat::{CheatKind, Observed};
use crate::checker::{Checker, Failure};
use crate::config::SimConfig;
use crate::escrow::{self, Call, CallRecord, Epoch, Escrow, Hash, JobId, Step, job_no};
use crate::fasthash::FastMap;
use crate::metrics::Metrics;
use crate::network::Network;
use crate::nodes::{ClientState, ProviderState};
use crate::queue::{EventQueue, Millis};
use crate::rng::{Purpose, SimRng, stream};
use crate::trace::Trace;
use gpuchain_protocol::chain::ChainEvent;
use gpuchain_protocol::{Address, U256};

pub type NodeId = u32;

/// Gossip payloads as the simulator carries them.
#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    /// A protocol message, checked once (`Checked`) and shared by every delivery of one
    /// publication: receivers only read it.
    Wire(std::rc::Rc<gpuchain_protocol::validation::Checked>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Timer {
    /// The protocol machine's `poll_timeout` is due.
    Poll,
    Blob {
        hash: Hash,
        ok: bool,
    },
    TrainStart {
        job: JobId,
        epoch: Epoch,
    },
    /// The quality test's verdict is recomputed from ground truth when it fires, which
    /// keeps this enum (and every queued event) small.
    Quality {
        job: JobId,
        hash: Hash,
        baseline: Hash,
        epoch: Epoch,
        step: Step,
    },
    Spot {
        job: JobId,
        hash: Hash,
        epoch: Epoch,
        step: Step,
        pass: bool,
    },
    /// A client starts its next job.
    CreateJob,
    /// The client's chain client expires its job at deadline + grace.
    Expire {
        job: JobId,
    },
    CheckpointDue {
        job: JobId,
        epoch: Epoch,
        step: Step,
    },
}

pub enum Event {
    Deliver {
        to: NodeId,
        msg: Msg,
    },
    Timer {
        node: NodeId,
        incarnation: u32,
        timer: Timer,
    },
    /// `tag` ties a protocol machine's transaction to its `TxId` (0: none).
    TxArrive {
        from: NodeId,
        call: Box<Call>,
        tag: u64,
    },
    Block,
    Chain {
        to: NodeId,
        event: std::rc::Rc<escrow::Event>,
    },
    TxFailed {
        to: NodeId,
        call: Box<Call>,
        /// Boxed: a revert's arguments would make every queued event twice its size.
        error: Box<escrow::EscrowError>,
        tag: u64,
    },
    Fail {
        node: NodeId,
    },
    Rejoin {
        node: NodeId,
    },
    PartitionStart,
    PartitionHeal,
    Script {
        index: usize,
    },
}

/// Ground truth of one checkpoint.
#[derive(Clone, Debug)]
pub struct Truth {
    pub job: JobId,
    pub epoch: Epoch,
    pub step: Step,
    pub provider: NodeId,
    pub cheat: Option<CheatKind>,
    pub accuracy: f64,
    pub loss: f64,
    pub step_mismatch: f64,
    pub announced_at: Millis,
}

/// The engine's own per-job bookkeeping (not any role's view).
#[derive(Clone, Debug, Default)]
pub struct JobBook {
    pub client: NodeId,
    pub verifiers: Vec<NodeId>,
    /// Provider of the live epoch per the chain.
    pub provider: Option<NodeId>,
    pub epoch: Epoch,
    /// Ground-truth failure of the live epoch's provider, not yet noticed by the client.
    pub failed_at: Option<Millis>,
    /// A loss or rejection awaiting the next provider's first training step.
    pub recovering: Option<(Millis, bool)>,
    pub checkpoints: Vec<Hash>,
    pub last_accepted: Step,
}

/// Events between two progress reports.
const PROGRESS_EVERY: u64 = 1 << 16;

/// Called now and then during a run with (now, end, events so far); reads only.
pub type ProgressFn = Box<dyn FnMut(Millis, Millis, u64)>;

pub struct World {
    pub cfg: SimConfig,
    pub seed: u64,
    pub now: Millis,
    pub end: Millis,
    pub faults_stop: Millis,
    pub queue: EventQueue<Event>,
    pub net: Network,
    pub net_rng: SimRng,
    pub churn_rng: SimRng,
    pub partition_rng: SimRng,
    pub escrow: Escrow,
    pub mempool: Vec<(NodeId, Call, u64)>,
    /// Every call executed, when the config keeps the log (`--calls`).
    pub calls: Vec<CallRecord>,
    /// The protocol machines and what drives them. Always there once the world is built; an
    /// `Option` because the driver is built from the world, and taken out of it to build a
    /// restarted node's machines.
    pub driver: Option<crate::drive::Driver>,
    pub block_scheduled: bool,
    /// The latest time a chain event is due at each node: later events are not delivered
    /// before it (chain order).
    chain_fifo: Vec<Millis>,
    pub clients: Vec<ClientState>,
    pub providers: Vec<ProviderState>,
    pub books: Vec<JobBook>,
    /// Each job's client (`books[j].client`), alone: read on every heartbeat delivered, where
    /// the recent jobs' entries of this vector stay in cache and their books do not.
    pub job_clients: Vec<NodeId>,
    pub truths: FastMap<Hash, Truth>,
    /// Checkpoints some fetch could not get (their provider was down or cut off): what the
    /// honest-stake observer tells apart from a served checkpoint voted down.
    pub unserved: std::collections::HashSet<Hash>,
    next_hash: Hash,
    pub last_honest: Option<(JobId, Hash)>,
    /// Cheating announcements by (job, epoch, step): kind and time, until decided.
    pub cheat_claims: FastMap<(JobId, Epoch, Step), (CheatKind, Millis)>,
    pub metrics: Metrics,
    pub checker: Checker,
    pub trace: Trace,
    pub progress: Option<ProgressFn>,
    pub keep_timeline: bool,
    first_provider: NodeId,
    first_verifier: NodeId,
}

/// Spec hashes live above every checkpoint hash so the two can never collide.
pub const SPEC_HASH_BASE: Hash = 1 << 62;

/// The token balances a run starts from: clients can pay every job they will start,
/// providers can stake a thousand times over (cheaters re-stake after each slash), verifiers
/// hold their pool stake.
pub fn genesis(cfg: &SimConfig) -> Vec<(u32, u128)> {
    let jobs_each = if cfg.job.jobs_per_client == 0 {
        1_000_000
    } else {
        u128::from(cfg.job.jobs_per_client)
    };
    let clients = (0..cfg.clients).map(|c| (c, cfg.job.budget * jobs_each));
    let providers = (0..cfg.providers).map(|p| (cfg.clients + p, cfg.protocol.stake * 1000));
    let first_verifier = cfg.clients + cfg.providers;
    let verifiers = (0..cfg.verifiers).map(|v| (first_verifier + v, cfg.protocol.verifier_stake));
    clients.chain(providers).chain(verifiers).collect()
}

pub fn ms(seconds: f64) -> Millis {
    (seconds * 1000.0).round() as Millis
}

impl World {
    pub fn new(cfg: SimConfig, seed: u64) -> Self {
        let nodes = (cfg.clients + cfg.providers + cfg.verifiers) as usize;
        let mut setup = stream(seed, Purpose::Setup, 0);
        let net = Network::new(cfg.network.clone(), nodes, &mut setup);
        // Funded below, once the driver has given every node its address.
        let escrow = escrow::deploy(cfg.protocol.signatures, escrow::params(&cfg), [])
            .expect("config validation keeps the escrow's minimum stakes positive");
        let first_provider = cfg.clients;
        let first_verifier = cfg.clients + cfg.providers;
        let clients = (0..cfg.clients)
            .map(|i| ClientState::new(stream(seed, Purpose::Node, u64::from(i))))
            .collect();
        let providers: Vec<ProviderState> = (0..cfg.providers)
            .map(|i| {
                let id = first_provider + i;
                ProviderState::new(
                    &cfg,
                    i as usize,
                    &mut setup,
                    stream(seed, Purpose::Node, u64::from(id)),
                )
            })
            .collect();
        let faults_stop = cfg.faults_stop_s.map_or(Millis::MAX, ms);
        let keep_timeline = nodes <= 64;
        let end = ms(cfg.duration_s);
        let mut world = World {
            seed,
            now: 0,
            end,
            faults_stop,
            queue: EventQueue::default(),
            net,
            net_rng: stream(seed, Purpose::Network, 0),
            churn_rng: stream(seed, Purpose::Churn, 0),
            partition_rng: stream(seed, Purpose::Partition, 0),
            escrow,
            mempool: Vec::new(),
            calls: Vec::new(),
            driver: None,
            block_scheduled: false,
            chain_fifo: vec![0; nodes],
            clients,
            providers,
            books: Vec::new(),
            job_clients: Vec::new(),
            truths: FastMap::default(),
            unserved: std::collections::HashSet::new(),
            next_hash: 1,
            last_honest: None,
            cheat_claims: FastMap::default(),
            metrics: Metrics::default(),
            checker: Checker::new(cfg.full_checks, (2 * cfg.chain.block_ms + 5_000) / 1000 + 1),
            trace: Trace::new(64),
            progress: None,
            keep_timeline,
            first_provider,
            first_verifier,
            cfg,
        };
        world.driver = Some(crate::drive::Driver::new(&world));
        let spender = world.escrow.address();
        for (node, amount) in genesis(&world.cfg) {
            let who = world.address_of(node);
            world.escrow.mint(escrow::TOKEN, who, U256::from(amount));
            world.escrow.approve(escrow::TOKEN, who, spender, U256::MAX);
        }
        world.genesis_block();
        world
    }

    /// Block 0, before the run: every verifier stakes into the pool (`registerVerifier`), so
    /// the first jobs have a pool to draw their committees from. Its calls are in the call
    /// log and its events go through the checkers like any block's.
    fn genesis_block(&mut self) {
        let block = escrow::Block { number: 0, time: 0 };
        let hash = escrow::block_hash(self.seed, 0);
        self.escrow.record_block_hash(0, hash);
        let amount = U256::from(self.cfg.protocol.verifier_stake);
        for v in 0..self.cfg.verifiers as usize {
            let node = self.verifier_node(v);
            let sender = self.address_of(node);
            let call = Call::RegisterVerifier { amount };
            let result = self.escrow.apply(&call, sender, block);
            if self.cfg.keep_call_log {
                self.calls.push(CallRecord {
                    block: 0,
                    block_hash: hash,
                    timestamp: 0,
                    caller: sender,
                    call: call.clone(),
                    result: result.as_ref().map(|_| ()).map_err(Clone::clone),
                });
            }
            match result {
                Ok(events) => {
                    *self.metrics.tx_ok.entry(call.name()).or_default() += 1;
                    let mut checker = std::mem::take(&mut self.checker);
                    for e in &events {
                        if let Err(f) = checker.on_escrow_event(self, e) {
                            checker.fail_later(f);
                        }
                    }
                    self.checker = checker;
                }
                Err(error) => {
                    *self
                        .metrics
                        .tx_failed
                        .entry(format!("{}: {}", call.name(), error.name()))
                        .or_default() += 1;
                }
            }
        }
    }

    /// The verifiers that vote reject on everything: the last `hostile.byzantine_verifiers`
    /// of them by index (the hostile clients' sybils).
    pub fn is_byzantine(&self, node: NodeId) -> bool {
        let n = self.cfg.verifiers;
        let byzantine =
            crate::config::HostileConfig::count(self.cfg.hostile.byzantine_verifiers, n);
        self.verifier_index(node)
            .is_some_and(|v| v as u32 >= n - byzantine)
    }

    /// The clients that withhold pay (`ClientFault::WithholdPay`): the last
    /// `hostile.withhold_pay_clients` of them by index.
    pub fn is_hostile_client(&self, node: NodeId) -> bool {
        let n = self.cfg.clients;
        let hostile = crate::config::HostileConfig::count(self.cfg.hostile.withhold_pay_clients, n);
        node < n && node >= n - hostile
    }

    // ------------------------------------------------------------ node ids

    pub fn provider_index(&self, node: NodeId) -> Option<usize> {
        (node >= self.first_provider && node < self.first_verifier)
            .then(|| (node - self.first_provider) as usize)
    }

    pub fn verifier_index(&self, node: NodeId) -> Option<usize> {
        (node >= self.first_verifier).then(|| (node - self.first_verifier) as usize)
    }

    pub fn verifier_node(&self, index: usize) -> NodeId {
        self.first_verifier + index as NodeId
    }

    pub fn provider_node(&self, index: usize) -> NodeId {
        self.first_provider + index as NodeId
    }

    pub fn name(&self, node: NodeId) -> String {
        if let Some(p) = self.provider_index(node) {
            match &self.providers[p].name {
                Some(n) => format!("Provider {n}"),
                None => format!("provider {p}"),
            }
        } else if let Some(v) = self.verifier_index(node) {
            format!("verifier {v}")
        } else {
            format!("client {node}")
        }
    }

    pub fn faulty(&self) -> bool {
        self.now < self.faults_stop
    }

    pub fn note(&mut self, text: impl FnOnce(&World) -> String) {
        if self.keep_timeline {
            let t = text(self);
            self.metrics.timeline.push((self.now, t));
        }
    }

    // ------------------------------------------------------------ outputs

    pub fn at(&mut self, delay: Millis, event: Event) {
        self.queue.push(self.now.saturating_add(delay), event);
    }

    pub fn timer(&mut self, node: NodeId, delay: Millis, timer: Timer) {
        let incarnation = self
            .provider_index(node)
            .map_or(0, |p| self.providers[p].incarnation);
        self.at(
            delay,
            Event::Timer {
                node,
                incarnation,
                timer,
            },
        );
    }

    pub fn send(&mut self, from: NodeId, to: NodeId, msg: Msg) {
        let faulty = self.faulty();
        if let Some(d) = self
            .net
            .deliver(from as usize, to as usize, &mut self.net_rng, faulty)
        {
            self.at(d, Event::Deliver { to, msg });
        }
    }

    pub fn submit(&mut self, from: NodeId, call: Call) {
        // Clients and verifiers reach an RPC endpoint even inside a partition (it is the
        // peer-to-peer mesh that splits); the chain's own delay is the block time.
        let d = self.net.latency_ms(&mut self.net_rng);
        self.at(
            d,
            Event::TxArrive {
                from,
                call: Box::new(call),
                tag: 0,
            },
        );
    }

    pub fn new_hash(&mut self) -> Hash {
        let h = self.next_hash;
        self.next_hash += 1;
        h
    }

    // ------------------------------------------------------------ the loop

    pub fn start(&mut self) {
        for c in 0..self.cfg.clients {
            self.clients_start(c);
        }
        for p in 0..self.providers.len() {
            self.provider_start(p);
        }
        if self.cfg.network.partition_every_s > 0.0 {
            let d = ms(self.partition_rng.exp(self.cfg.network.partition_every_s));
            self.at(d, Event::PartitionStart);
        }
        for (index, s) in self.cfg.script.iter().enumerate() {
            self.queue.push(ms(s.at_s), Event::Script { index });
        }
    }

    /// Runs until the end time or the first checker failure.
    pub fn run(&mut self) -> Result<(), Failure> {
        self.start();
        while let Some((t, ev)) = self.queue.pop_until(self.end) {
            self.now = t;
            self.metrics.events += 1;
            if self.metrics.events.is_multiple_of(PROGRESS_EVERY)
                && let Some(p) = self.progress.as_mut()
            {
                p(self.now, self.end, self.metrics.events);
            }
            let chain_changed = matches!(ev, Event::Block);
            self.dispatch(ev);
            if !self.checker.due(self.chain_time_s(), chain_changed) {
                continue;
            }
            let mut checker = std::mem::take(&mut self.checker);
            let checked = checker.after_event(self, chain_changed);
            self.checker = checker;
            checked?;
        }
        self.now = self.now.max(self.end);
        self.finish();
        let mut checker = std::mem::take(&mut self.checker);
        let checked = checker.at_end(self);
        self.checker = checker;
        checked
    }

    fn dispatch(&mut self, ev: Event) {
        match ev {
            Event::Deliver { to, msg } => {
                self.trace.push(self.now, "deliver", to, &msg);
                let Msg::Wire(m) = &msg;
                self.drive_message(to, m);
            }
            Event::Timer {
                node,
                incarnation,
                timer,
            } => {
                if let Some(p) = self.provider_index(node)
                    && self.providers[p].incarnation != incarnation
                {
                    return;
                }
                self.trace.push(self.now, "timer", node, &timer);
                self.drive_timer(node, timer);
            }
            Event::TxArrive { from, call, tag } => {
                self.mempool.push((from, *call, tag));
                if !self.block_scheduled {
                    self.block_scheduled = true;
                    let block = self.cfg.chain.block_ms;
                    let next = (self.now / block + 1) * block;
                    self.queue.push(next, Event::Block);
                }
            }
            Event::Block => self.mine(),
            Event::Chain { to, event } => self.drive_chain(to, &event),
            Event::TxFailed { to, error, tag, .. } => self.drive_tx_failed(to, tag, &error),
            Event::Fail { node } => {
                self.trace.push(self.now, "fail", node, &());
                self.provider_fail(node);
            }
            Event::Rejoin { node } => {
                self.trace.push(self.now, "rejoin", node, &());
                self.provider_rejoin(node);
            }
            Event::PartitionStart => {
                if self.faulty() {
                    self.net.start_partition(&mut self.partition_rng);
                    self.trace.push(self.now, "partition", 0, &());
                    let d = ms(self.cfg.network.partition_duration_s);
                    self.at(d, Event::PartitionHeal);
                }
            }
            Event::PartitionHeal => {
                self.net.heal();
                self.trace.push(self.now, "heal", 0, &());
                let d = ms(self.partition_rng.exp(self.cfg.network.partition_every_s));
                self.at(d, Event::PartitionStart);
            }
            Event::Script { index } => self.script(index),
        }
    }

    // ------------------------------------------------------------ chain

    fn mine(&mut self) {
        self.block_scheduled = false;
        let txs = std::mem::take(&mut self.mempool);
        let ts = self.now / 1000;
        // Blocks are numbered by their slot (one every `block_ms`, empty ones included), and
        // each gets its hash from the run's seed: what a later `drawCommittee` reads.
        let number = self.now / self.cfg.chain.block_ms;
        let hash = escrow::block_hash(self.seed, number);
        self.escrow.record_block_hash(number, hash);
        let block = escrow::Block { number, time: ts };
        for (from, call, tag) in txs {
            let name = call.name();
            self.trace.push(self.now, name, from, &());
            let sender = self.address_of(from);
            let result = self.escrow.apply(&call, sender, block);
            if matches!(
                call,
                Call::Tx(gpuchain_protocol::chain::ChainTx::Withdraw { .. })
            ) {
                self.drive_withdraw_mined(from);
            }
            if self.cfg.keep_call_log {
                self.calls.push(CallRecord {
                    block: number,
                    block_hash: hash,
                    timestamp: ts,
                    caller: sender,
                    call: call.clone(),
                    result: result.as_ref().map(|_| ()).map_err(Clone::clone),
                });
            }
            match result {
                Ok(events) => {
                    *self.metrics.tx_ok.entry(name).or_default() += 1;
                    if tag != 0 {
                        self.drive_tx_done(tag);
                    }
                    for e in events {
                        // The checker sees the event before any bookkeeping forgets ground truth.
                        let mut checker = std::mem::take(&mut self.checker);
                        if let Err(f) = checker.on_escrow_event(self, &e) {
                            checker.fail_later(f);
                        }
                        self.checker = checker;
                        // Recipients are who the job involved before the event (an ended
                        // epoch's provider must hear of it), except a new job's and a drawn
                        // committee's (its members hear of their seats).
                        if matches!(
                            e,
                            escrow::Event::Job(
                                ChainEvent::JobCreated { .. } | ChainEvent::CommitteeDrawn { .. }
                            )
                        ) {
                            self.book_event(from, &e);
                            self.broadcast(&e);
                        } else {
                            self.broadcast(&e);
                            self.book_event(from, &e);
                        }
                    }
                }
                Err(error) => {
                    // Counted by the revert's name: its arguments (addresses, steps) would
                    // give every revert a line of its own.
                    *self
                        .metrics
                        .tx_failed
                        .entry(format!("{name}: {}", error.name()))
                        .or_default() += 1;
                    let d = self.net.latency_ms(&mut self.net_rng);
                    self.at(
                        d,
                        Event::TxFailed {
                            to: from,
                            call: Box::new(call),
                            error: Box::new(error),
                            tag,
                        },
                    );
                }
            }
        }
    }

    /// Who hears of a chain event: the job's client, verifiers and provider(s) concerned.
    /// (Real nodes filter the contract's logs by job; the sim delivers only what they keep.)
    fn broadcast(&mut self, e: &escrow::Event) {
        let Some(job) = e.job().map(|c| job_no(c.job_id())) else {
            return;
        };
        // The nodes following the job, as their chain clients filter the escrow's logs.
        let mut to = e
            .job()
            .map_or_else(Vec::new, |c| self.drive_recipients(job, c));
        to.sort_unstable();
        to.dedup();
        // One copy of the event, shared by its deliveries (dozens, with the providers
        // following the job).
        let event = std::rc::Rc::new(e.clone());
        for n in to {
            let d = self.net.latency_ms(&mut self.net_rng);
            // A chain client reads the escrow's logs in chain order: an event never reaches
            // a node before one emitted earlier (a late accept and the `Superseded` end of
            // the epoch assigned in the same block must not swap).
            let at = self.now.saturating_add(d).max(self.chain_fifo[n as usize]);
            self.chain_fifo[n as usize] = at;
            self.queue.push(
                at,
                Event::Chain {
                    to: n,
                    event: event.clone(),
                },
            );
        }
    }

    pub fn book(&self, job: JobId) -> Option<&JobBook> {
        usize::try_from(job)
            .ok()
            .and_then(|j| j.checked_sub(1))
            .and_then(|j| self.books.get(j))
    }

    /// The client of `job` (`book(job).client`).
    pub fn job_client(&self, job: JobId) -> Option<NodeId> {
        usize::try_from(job)
            .ok()
            .and_then(|j| j.checked_sub(1))
            .and_then(|j| self.job_clients.get(j))
            .copied()
    }

    pub fn book_mut(&mut self, job: JobId) -> Option<&mut JobBook> {
        usize::try_from(job)
            .ok()
            .and_then(|j| j.checked_sub(1))
            .and_then(|j| self.books.get_mut(j))
    }

    /// What a verifier's quality test and replay see in the checkpoint `hash`, announced as
    /// (`job`, `epoch`, `step`).
    pub fn observe(&self, hash: Hash, job: JobId, epoch: Epoch, step: Step) -> Observed {
        match self.truths.get(&hash) {
            Some(t) => Observed {
                metadata_matches: t.job == job && t.step == step && t.epoch == epoch,
                accuracy: t.accuracy,
                loss: t.loss,
                step_mismatch: t.step_mismatch,
            },
            // Not a checkpoint of anything we know: the base model or garbage.
            None => Observed {
                metadata_matches: false,
                accuracy: 0.0,
                loss: f64::NAN,
                step_mismatch: 1.0,
            },
        }
    }

    /// Training (re)starts on `node`: closes the job's open recovery window, if any (after a
    /// lost provider or a refused checkpoint), and notes it in the timeline.
    pub fn training_started(&mut self, job: JobId, node: NodeId, from: Step, now: u64) {
        if let Some(b) = self.book_mut(job)
            && let Some((t, after_reject)) = b.recovering.take()
        {
            let d = now.saturating_sub(t);
            if after_reject {
                self.metrics.recovery_after_reject_ms.push(d);
            } else {
                self.metrics.recovery_after_failure_ms.push(d);
            }
        }
        self.note(|w| {
            format!(
                "Job {job}: training starts on {} at step {from}",
                w.name(node)
            )
        });
    }

    /// Engine bookkeeping and metrics for an executed escrow event.
    fn book_event(&mut self, from: NodeId, e: &escrow::Event) {
        let now = self.now;
        if let escrow::Event::FeesCredited {
            verifier, amount, ..
        } = e
        {
            let amount: u128 = amount.saturating_to();
            self.metrics.fees_credited += amount;
            if self.keep_timeline
                && let Some(v) = self.node_of(verifier)
            {
                let name = self.name(v);
                *self.metrics.fees_by_verifier.entry(name).or_default() += amount;
            }
            return;
        }
        let Some(e) = e.job() else {
            return;
        };
        let job_id = job_no(e.job_id());
        match e {
            ChainEvent::JobCreated { .. } => {
                debug_assert_eq!(job_id as usize, self.books.len() + 1);
                self.books.push(JobBook {
                    client: from,
                    ..JobBook::default()
                });
                self.job_clients.push(from);
                self.metrics.jobs_created += 1;
                self.note(|w| format!("Job {job_id} created by {}", w.name(from)));
            }
            ChainEvent::CommitteeSeedMoved { seed_block, .. } => {
                let b = *seed_block;
                self.note(|_| format!("Job {job_id}: committee seed moved to block {b}"));
            }
            ChainEvent::CommitteeDrawn { committee, .. } => {
                let members: Vec<NodeId> =
                    committee.iter().filter_map(|a| self.node_of(a)).collect();
                let byzantine = members.iter().filter(|n| self.is_byzantine(**n)).count();
                *self
                    .metrics
                    .committees_by_byzantine
                    .entry(byzantine)
                    .or_default() += 1;
                if let Some(b) = self.book_mut(job_id) {
                    b.verifiers = members.clone();
                }
                self.note(|w| {
                    let names: Vec<String> = members.iter().map(|n| w.name(*n)).collect();
                    format!("Job {job_id}: committee drawn: {}", names.join(", "))
                });
            }
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                start_step,
                ..
            } => {
                let p = self.node_of(provider);
                if let Some(b) = self.book_mut(job_id) {
                    b.provider = p;
                    b.epoch = *epoch;
                    b.failed_at = None;
                }
                let (e, s) = (*epoch, *start_step);
                self.note(|w| {
                    format!(
                        "Job {job_id} epoch {e}: {} assigned from step {s}",
                        w.account_name(p)
                    )
                });
            }
            ChainEvent::EpochEnded { epoch, reason, .. } => {
                if let Some(b) = self.book_mut(job_id)
                    && b.epoch == *epoch
                {
                    b.provider = None;
                    b.failed_at = None;
                }
                let (e, r) = (*epoch, *reason);
                self.note(|_| format!("Job {job_id} epoch {e} ended ({r:?})"));
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                provider,
                amount,
                fees,
                ..
            } => {
                let amount: u128 = amount.saturating_to();
                self.metrics.fees += fees.saturating_to::<u128>();
                let last = self.book(job_id).map_or(0, |b| b.last_accepted);
                self.metrics.steps_accepted += step.saturating_sub(last);
                self.metrics.paid += amount;
                if let Some(b) = self.book_mut(job_id) {
                    b.last_accepted = *step;
                }
                let acc = self.metrics.steps_accepted;
                self.metrics.accepted_curve.push((now, acc));
                if let Some((k, _)) = self.cheat_claims.remove(&(job_id, *epoch, *step)) {
                    self.metrics.cheats.entry(k).or_default().missed += 1;
                }
                let p = self.node_of(provider);
                if let Some(pi) = p.and_then(|p| self.provider_index(p))
                    && let Some(n) = self.providers[pi].name.clone()
                {
                    *self.metrics.paid_by_name.entry(n).or_default() += amount;
                }
                let s = *step;
                self.note(|w| {
                    format!(
                        "Job {job_id}: checkpoint at step {s} accepted, {} credited {}",
                        w.account_name(p),
                        usdc(amount)
                    )
                });
            }
            ChainEvent::CheckpointRejected {
                epoch,
                step,
                provider,
                slashed,
                fees,
                ..
            } => {
                let slashed: u128 = slashed.saturating_to();
                self.metrics.slashed += slashed;
                self.metrics.fees += fees.saturating_to::<u128>();
                if let Some((k, at)) = self.cheat_claims.remove(&(job_id, *epoch, *step)) {
                    self.metrics.cheats.entry(k).or_default().caught += 1;
                    self.metrics.cheat_detection_ms.push(now.saturating_sub(at));
                }
                if let Some(b) = self.book_mut(job_id) {
                    b.recovering = Some((now, true));
                }
                let (p, s) = (self.node_of(provider), *step);
                self.note(|w| {
                    format!(
                        "Job {job_id}: {}'s checkpoint at step {s} refused, {}",
                        w.account_name(p),
                        if slashed > 0 {
                            format!("stake slashed ({}, burned)", usdc(slashed))
                        } else {
                            "not slashed (not every member rejected)".to_owned()
                        }
                    )
                });
            }
            ChainEvent::JobCompleted { refund, .. } => {
                let r: u128 = refund.saturating_to();
                self.metrics.jobs_completed += 1;
                self.metrics.refunded += r;
                self.job_finished(job_id);
                self.note(|_| format!("Job {job_id} complete, {} back to the client", usdc(r)));
            }
            // Counted as refunded at completion already; settling only moves it to a credit.
            ChainEvent::JobSettled { .. } => {}
            ChainEvent::JobExpired { refund, .. } => {
                let r: u128 = refund.saturating_to();
                self.metrics.jobs_expired += 1;
                self.metrics.refunded += r;
                self.job_finished(job_id);
                self.note(|_| format!("Job {job_id} expired, {} back to the client", usdc(r)));
            }
        }
    }

    /// The node behind an address on chain: every account the sim funds or signs with is one.
    pub fn node_of(&self, a: &Address) -> Option<NodeId> {
        self.driver.as_ref().and_then(|d| d.node(a))
    }

    /// Node `n`'s address: its key's, the account it sends transactions from.
    pub fn address_of(&self, n: NodeId) -> Address {
        self.driver.as_ref().map_or(Address::ZERO, |d| d.address(n))
    }

    fn account_name(&self, node: Option<NodeId>) -> String {
        node.map_or_else(|| "an unknown account".to_owned(), |n| self.name(n))
    }

    fn job_finished(&mut self, job: JobId) {
        // Ground truth of a finished job is no longer needed by anyone but a late cheater.
        if let Some(b) = self.book_mut(job) {
            let hashes = std::mem::take(&mut b.checkpoints);
            for h in hashes {
                self.truths.remove(&h);
                self.unserved.remove(&h);
            }
        }
    }

    /// Steps of epochs still running count as trained (and, unaccepted, lost) at the end.
    fn finish(&mut self) {
        for p in 0..self.providers.len() {
            let node = self.provider_node(p);
            self.drive_kill(node);
        }
    }

    pub fn register_truth(&mut self, job: JobId, truth: Truth) -> Hash {
        let h = self.new_hash();
        if truth.cheat.is_none() {
            self.last_honest = Some((job, h));
        }
        self.truths.insert(h, truth);
        if let Some(b) = self.book_mut(job) {
            b.checkpoints.push(h);
        }
        h
    }

    pub fn chain_time_s(&self) -> u64 {
        self.now / 1000
    }
}

/// Token units as USDC with three decimals, the product page's style.
pub fn usdc(units: u128) -> String {
    let whole = units / 1_000_000;
    let frac = (units % 1_000_000) / 1_000;
    format!("{whole}.{frac:03} USDC")
}
