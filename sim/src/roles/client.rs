//! Client (job owner and coordinator) stand-in: creates jobs, runs bid rounds, assigns, watches
//! heartbeats with a timeout detector, submits quorum decisions, expires late jobs, withdraws.

use std::collections::{BTreeMap, BTreeSet};

use crate::escrow::{self, BidSig, Call, Epoch, EscrowError, Hash, JobId, Step, VoteSig};
use crate::queue::Millis;
use crate::rng::SimRng;
use crate::world::{Msg, NodeId, SPEC_HASH_BASE, Timer, World, ms};

/// Reputation deltas, the protocol crate's values (protocol/src/reputation.rs).
const CHECKPOINT_ACCEPTED: i32 = 10;
const PROVIDER_LOST: i32 = -100;
const CHECKPOINT_REJECTED: i32 = -1000;
const BANNED_BELOW: i32 = -500;
/// A provider declared lost is skipped by this job's bid rounds for a while (it may have
/// rebooted, or been behind a partition that has healed since).
const LOST_EXCLUSION_MS: Millis = 60_000;

pub struct ClientState {
    pub id: NodeId,
    pub rng: SimRng,
    pub jobs_started: u32,
    pub current: Option<JobId>,
    /// Verifiers chosen for the job being created (read back when the chain creates it).
    pub pending_verifiers: Vec<NodeId>,
    reputation: BTreeMap<NodeId, i32>,
}

impl ClientState {
    pub fn new(id: NodeId, rng: SimRng) -> Self {
        ClientState {
            id,
            rng,
            jobs_started: 0,
            current: None,
            pending_verifiers: Vec::new(),
            reputation: BTreeMap::new(),
        }
    }

    fn adjust(&mut self, p: NodeId, delta: i32) {
        let s = self.reputation.entry(p).or_insert(0);
        *s = s.saturating_add(delta).clamp(-10_000, 500);
    }

    fn banned(&self, p: NodeId) -> bool {
        self.reputation.get(&p).is_some_and(|s| *s < BANNED_BELOW)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Bidding,
    Assigning,
    Running,
    Waiting,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct BidInfo {
    provider: NodeId,
    epoch: Epoch,
    price: u128,
    expiry: u64,
}

pub struct ClientJob {
    pub client: NodeId,
    pub phase: Phase,
    pub epoch: Epoch,
    pub provider: Option<NodeId>,
    bids: Vec<BidInfo>,
    excluded: BTreeMap<NodeId, Millis>,
    last_heard: Millis,
    last_step: Step,
    tallies: BTreeMap<(Epoch, Step, Hash, bool), Vec<NodeId>>,
    decided: BTreeSet<(Epoch, Step)>,
    verifiers: Vec<NodeId>,
    quorum: u8,
    total_steps: Step,
    deadline_s: u64,
    /// The epoch whose final-checkpoint verdict clock is running.
    final_clock: Option<Epoch>,
    /// Arrival time of a heartbeat sent but not yet landed (eager path only).
    in_flight: Option<Millis>,
}

impl World {
    pub fn clients_start(&mut self, c: NodeId) {
        // Continuous runs spread job starts over the first seconds; presets start at 0.
        let jitter = if self.cfg.job.jobs_per_client == 0 {
            self.clients[c as usize].rng.below(5_000)
        } else {
            0
        };
        self.timer(c, jitter, Timer::CreateJob);
    }

    pub fn client_timer(&mut self, c: NodeId, timer: Timer) {
        match timer {
            Timer::CreateJob => self.create_job(c),
            Timer::BidWindowClosed { job } => self.close_bids(job),
            Timer::Reoffer { job }
                if self
                    .client_jobs
                    .get(&job)
                    .is_some_and(|j| j.phase == Phase::Waiting) =>
            {
                self.offer(job);
            }
            Timer::Detector { job, epoch } => self.check_detector(job, epoch),
            Timer::Expire { job }
                if self
                    .client_jobs
                    .get(&job)
                    .is_some_and(|j| j.phase != Phase::Done) =>
            {
                self.submit(c, Call::Expire { job_id: job });
            }
            Timer::DecisionTimeout { job, epoch, step } => {
                let stuck = self.client_jobs.get(&job).is_some_and(|j| {
                    j.phase == Phase::Running
                        && j.epoch == epoch
                        && !j.decided.contains(&(epoch, step))
                });
                if stuck {
                    self.replace_provider(job, false);
                }
            }
            _ => {}
        }
    }

    fn create_job(&mut self, c: NodeId) {
        let cfg = &self.cfg.job;
        let continuous = cfg.jobs_per_client == 0;
        let cs = &self.clients[c as usize];
        if cs.current.is_some()
            || (continuous && self.now > ms(cfg.last_start_s))
            || (!continuous && cs.jobs_started >= cfg.jobs_per_client)
        {
            return;
        }
        let n = self.cfg.verifiers as u64;
        let want = cfg.verifiers_per_job as usize;
        let mut chosen: Vec<NodeId> = Vec::with_capacity(want);
        while chosen.len() < want {
            let v = self.clients[c as usize].rng.below(n) as usize;
            let node = self.verifier_node(v);
            if !chosen.contains(&node) {
                chosen.push(node);
            }
        }
        chosen.sort_unstable();
        let cs = &mut self.clients[c as usize];
        cs.jobs_started += 1;
        cs.pending_verifiers = chosen.clone();
        let spec_hash = SPEC_HASH_BASE | (u64::from(c) << 24) | u64::from(cs.jobs_started);
        let now_s = self.chain_time_s();
        let call = Call::CreateJob {
            budget: cfg.budget,
            max_price_per_step: cfg.max_price_per_step,
            total_steps: cfg.total_steps,
            checkpoint_interval: cfg.checkpoint_interval,
            spec_hash,
            verifiers: chosen,
            quorum: cfg.quorum,
            deadline: now_s + cfg.deadline_s,
            grace: cfg.grace_s,
        };
        // The job exists from the block that includes this; the client keeps a slot open.
        self.clients[c as usize].current = Some(0);
        self.submit(c, call);
    }

    fn offer(&mut self, job: JobId) {
        let now_s = self.chain_time_s();
        let Some(j) = self.client_jobs.get_mut(&job) else {
            return;
        };
        if j.phase == Phase::Done {
            return;
        }
        if now_s + 2 >= j.deadline_s {
            // Too late to assign anyone: the expiry timer will end the job.
            j.phase = Phase::Waiting;
            return;
        }
        j.phase = Phase::Bidding;
        j.bids.clear();
        let (client, next_epoch) = (j.client, j.epoch + 1);
        let fanout = self.cfg.protocol.offer_fanout as usize;
        let mut targets: Vec<NodeId> = Vec::with_capacity(fanout.min(self.idle.len()));
        if self.idle.len() <= fanout {
            targets.extend(self.idle.iter().copied());
        } else {
            while targets.len() < fanout {
                let i = self.clients[client as usize]
                    .rng
                    .below(self.idle.len() as u64) as usize;
                let p = self.idle[i];
                if !targets.contains(&p) {
                    targets.push(p);
                }
            }
        }
        let max_price = self.cfg.job.max_price_per_step;
        for p in targets {
            self.send(
                client,
                p,
                Msg::Offer {
                    job,
                    client,
                    next_epoch,
                    max_price,
                },
            );
        }
        self.timer(
            client,
            self.cfg.protocol.bid_window_ms,
            Timer::BidWindowClosed { job },
        );
    }

    fn close_bids(&mut self, job: JobId) {
        let now = self.now;
        let now_s = self.chain_time_s();
        let Some(j) = self.client_jobs.get_mut(&job) else {
            return;
        };
        if j.phase != Phase::Bidding {
            return;
        }
        let client = j.client;
        let cs = &self.clients[client as usize];
        let best = j
            .bids
            .iter()
            .filter(|b| {
                b.epoch == j.epoch + 1
                    && b.expiry > now_s + 2
                    && !cs.banned(b.provider)
                    && j.excluded
                        .get(&b.provider)
                        .is_none_or(|until| *until <= now)
            })
            .min_by_key(|b| (b.price, b.provider))
            .copied();
        match best {
            Some(b) => {
                j.phase = Phase::Assigning;
                let bid = BidSig {
                    signer: b.provider,
                    job_id: job,
                    epoch: b.epoch,
                    provider: b.provider,
                    price_per_step: b.price,
                    expiry: b.expiry,
                };
                self.submit(
                    client,
                    Call::Assign {
                        job_id: job,
                        provider: b.provider,
                        price_per_step: b.price,
                        bid_expiry: b.expiry,
                        bid,
                    },
                );
            }
            None => {
                j.phase = Phase::Waiting;
                let d = self.cfg.protocol.bid_window_ms * 4;
                self.timer(client, d, Timer::Reoffer { job });
            }
        }
    }

    fn check_detector(&mut self, job: JobId, epoch: Epoch) {
        let timeout = self.cfg.protocol.heartbeat_timeout_ms;
        let now = self.now;
        let Some(j) = self.client_jobs.get_mut(&job) else {
            return;
        };
        if j.phase != Phase::Running || j.epoch != epoch {
            return;
        }
        if let Some(a) = j.in_flight
            && a <= now
        {
            j.last_heard = j.last_heard.max(a);
            j.in_flight = None;
        }
        let due = j.last_heard + timeout;
        if now < due {
            let client = j.client;
            self.timer(client, due - now, Timer::Detector { job, epoch });
            return;
        }
        let (p, step) = (j.provider, j.last_step);
        // Ground truth decides whether this was a detection or a false alarm.
        let failed_at = self.book_mut(job).and_then(|b| b.failed_at.take());
        match failed_at {
            Some(t) => {
                self.metrics.detection_ms.push(now - t);
                if let Some(b) = self.book_mut(job) {
                    b.recovering = Some((t, false));
                }
            }
            None => {
                self.metrics.false_detections += 1;
                if let Some(b) = self.book_mut(job) {
                    b.recovering = Some((now, false));
                }
            }
        }
        if let Some(p) = p {
            self.note(|w| format!("Job {job}: {} noticed lost at step {step}", w.name(p)));
            let c = self.client_jobs.get(&job).map(|j| j.client);
            if let Some(c) = c {
                self.clients[c as usize].adjust(p, PROVIDER_LOST);
            }
        }
        self.replace_provider(job, true);
    }

    /// Excludes the current provider for a while and runs a new bid round; the assignment
    /// that follows fences its epoch on chain.
    fn replace_provider(&mut self, job: JobId, _lost: bool) {
        let now = self.now;
        let Some(j) = self.client_jobs.get_mut(&job) else {
            return;
        };
        if let Some(p) = j.provider.take() {
            j.excluded.insert(p, now + LOST_EXCLUSION_MS);
        }
        self.offer(job);
    }

    /// A heartbeat that arrives at `arrival` (now, or later on the eager path: see
    /// `World::send_heartbeat`).
    pub fn heard(
        &mut self,
        c: NodeId,
        job: JobId,
        epoch: Epoch,
        provider: NodeId,
        step: Step,
        arrival: Millis,
    ) {
        let now = self.now;
        let Some(j) = self.client_jobs.get_mut(&job) else {
            return;
        };
        if j.client != c || j.epoch != epoch || j.provider != Some(provider) {
            return;
        }
        // A heartbeat still in flight counts only from its arrival; with latency below one
        // period, the previous one has always landed by the time the next is sent.
        if let Some(a) = j.in_flight.take() {
            j.last_heard = j.last_heard.max(a);
        }
        if arrival > now {
            j.in_flight = Some(arrival);
        } else {
            j.last_heard = j.last_heard.max(arrival);
        }
        j.last_step = step;
        // The announcement of the final checkpoint may be lost; its heartbeat says training
        // is done, which is enough to start the verdict clock.
        if step == j.total_steps && j.final_clock != Some(epoch) && j.phase == Phase::Running {
            j.final_clock = Some(epoch);
            let d = self.cfg.protocol.decision_timeout_ms + (arrival - now);
            self.timer(c, d, Timer::DecisionTimeout { job, epoch, step });
        }
    }

    pub fn client_message(&mut self, c: NodeId, msg: Msg) {
        match msg {
            Msg::Bid {
                job,
                epoch,
                provider,
                price,
                expiry,
            } => {
                if let Some(j) = self.client_jobs.get_mut(&job)
                    && j.client == c
                    && j.phase == Phase::Bidding
                    && price <= self.cfg.job.max_price_per_step
                {
                    j.bids.push(BidInfo {
                        provider,
                        epoch,
                        price,
                        expiry,
                    });
                }
            }
            Msg::Heartbeat {
                job,
                epoch,
                provider,
                step,
            } => self.heard(c, job, epoch, provider, step, self.now),
            Msg::Announce {
                job, epoch, step, ..
            } => {
                let Some(j) = self.client_jobs.get(&job) else {
                    return;
                };
                if j.epoch == epoch
                    && step == j.total_steps
                    && j.phase == Phase::Running
                    && j.final_clock != Some(epoch)
                {
                    let d = self.cfg.protocol.decision_timeout_ms;
                    if let Some(j) = self.client_jobs.get_mut(&job) {
                        j.final_clock = Some(epoch);
                    }
                    self.timer(c, d, Timer::DecisionTimeout { job, epoch, step });
                }
            }
            Msg::Vote {
                job,
                epoch,
                step,
                hash,
                accept,
                verifier,
            } => self.count_vote(c, job, epoch, step, hash, accept, verifier),
            Msg::Offer { .. } | Msg::Wire(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn count_vote(
        &mut self,
        c: NodeId,
        job: JobId,
        epoch: Epoch,
        step: Step,
        hash: Hash,
        accept: bool,
        verifier: NodeId,
    ) {
        let Some(j) = self.client_jobs.get_mut(&job) else {
            return;
        };
        if j.epoch != epoch
            || j.phase == Phase::Done
            || j.decided.contains(&(epoch, step))
            || !j.verifiers.contains(&verifier)
        {
            return;
        }
        let voters = j.tallies.entry((epoch, step, hash, accept)).or_default();
        if voters.contains(&verifier) {
            return;
        }
        voters.push(verifier);
        if voters.len() >= usize::from(j.quorum) {
            let sigs: Vec<VoteSig> = voters
                .iter()
                .map(|&signer| VoteSig {
                    signer,
                    job_id: job,
                    epoch,
                    step,
                    checkpoint_hash: hash,
                    accept,
                })
                .collect();
            j.decided.insert((epoch, step));
            j.tallies.retain(|k, _| k.0 == epoch && k.1 != step);
            let call = if accept {
                Call::AcceptCheckpoint {
                    job_id: job,
                    epoch,
                    step,
                    checkpoint_hash: hash,
                    sigs,
                }
            } else {
                Call::RejectCheckpoint {
                    job_id: job,
                    epoch,
                    step,
                    checkpoint_hash: hash,
                    sigs,
                }
            };
            self.submit(c, call);
            return;
        }
        // Every verifier has spoken and neither side can reach quorum: move the job on.
        let spoken: usize = j
            .tallies
            .iter()
            .filter(|(k, _)| k.0 == epoch && k.1 == step)
            .map(|(_, v)| v.len())
            .sum();
        if spoken >= j.verifiers.len() {
            j.decided.insert((epoch, step));
            self.replace_provider(job, false);
        }
    }

    pub fn client_chain(&mut self, c: NodeId, e: &escrow::Event) {
        let now = self.now;
        match e {
            escrow::Event::JobCreated { job_id, client, .. } if *client == c => {
                let Some(ej) = self.escrow.job(*job_id) else {
                    return;
                };
                let cj = ClientJob {
                    client: c,
                    phase: Phase::Waiting,
                    epoch: 0,
                    provider: None,
                    bids: Vec::new(),
                    excluded: BTreeMap::new(),
                    last_heard: now,
                    last_step: 0,
                    tallies: BTreeMap::new(),
                    decided: BTreeSet::new(),
                    verifiers: ej.verifiers.clone(),
                    quorum: ej.quorum,
                    total_steps: ej.total_steps,
                    deadline_s: ej.deadline,
                    final_clock: None,
                    in_flight: None,
                };
                let expire_at = ej
                    .deadline
                    .saturating_add(ej.grace)
                    .saturating_mul(1000)
                    .saturating_add(1);
                self.client_jobs.insert(*job_id, cj);
                self.clients[c as usize].current = Some(*job_id);
                self.timer(
                    c,
                    expire_at.saturating_sub(now),
                    Timer::Expire { job: *job_id },
                );
                self.offer(*job_id);
            }
            escrow::Event::ProviderAssigned {
                job_id,
                epoch,
                provider,
                ..
            } => {
                let timeout = self.cfg.protocol.heartbeat_timeout_ms;
                let Some(j) = self.client_jobs.get_mut(job_id) else {
                    return;
                };
                if j.client != c || *epoch <= j.epoch {
                    return;
                }
                j.epoch = *epoch;
                j.provider = Some(*provider);
                j.phase = Phase::Running;
                j.last_heard = now;
                j.in_flight = None;
                j.tallies.clear();
                self.timer(
                    c,
                    timeout,
                    Timer::Detector {
                        job: *job_id,
                        epoch: *epoch,
                    },
                );
            }
            escrow::Event::CheckpointAccepted {
                job_id, provider, ..
            } if self.client_jobs.get(job_id).is_some_and(|j| j.client == c) => {
                self.clients[c as usize].adjust(*provider, CHECKPOINT_ACCEPTED);
            }
            escrow::Event::CheckpointRejected {
                job_id,
                epoch,
                provider,
                ..
            } => {
                if self.client_jobs.get(job_id).is_none_or(|j| j.client != c) {
                    return;
                }
                self.clients[c as usize].adjust(*provider, CHECKPOINT_REJECTED);
                if self
                    .client_jobs
                    .get(job_id)
                    .is_some_and(|j| j.epoch == *epoch)
                {
                    self.replace_provider(*job_id, false);
                }
            }
            escrow::Event::JobCompleted { job_id, .. }
            | escrow::Event::JobExpired { job_id, .. } => {
                let Some(j) = self.client_jobs.get_mut(job_id) else {
                    return;
                };
                if j.client != c || j.phase == Phase::Done {
                    return;
                }
                j.phase = Phase::Done;
                // Nothing more to track for it; free the memory in long runs.
                self.client_jobs.remove(job_id);
                self.submit(c, Call::Withdraw);
                self.clients[c as usize].current = None;
                self.timer(c, 1_000, Timer::CreateJob);
            }
            _ => {}
        }
    }

    pub fn client_tx_failed(&mut self, c: NodeId, call: Call, error: EscrowError) {
        match call {
            Call::Assign {
                job_id, provider, ..
            } => {
                let now = self.now;
                if let Some(j) = self.client_jobs.get_mut(&job_id)
                    && j.phase == Phase::Assigning
                {
                    j.excluded.insert(provider, now + LOST_EXCLUSION_MS);
                    self.offer(job_id);
                }
            }
            Call::CreateJob { .. } => {
                self.clients[c as usize].current = None;
                self.timer(c, 10_000, Timer::CreateJob);
            }
            Call::Expire { job_id } if error == EscrowError::TooEarly => {
                self.timer(c, 1_000, Timer::Expire { job: job_id });
            }
            _ => {}
        }
    }
}
