//! The client/coordinator: has the escrow draw the job's committee, publishes the offer,
//! collects bids, assigns by price, reputation and hardware fit, watches heartbeats, reassigns
//! on loss or rejection, and submits a checkpoint decision once a quorum of the committee has
//! voted.
//!
//! ```text
//!  JobCreated ──submit drawCommittee──> Drawing ──CommitteeDrawn / publish JobOffer──> Bidding
//!    Drawing ──TxFailed, timeout, CommitteeSeedMoved──> Drawing (submit drawCommittee again)
//!  Bidding ──(window over, best bid)──> Assigning ──ProviderAssigned──> Running
//!    ^  └─(no usable bid: re-offer)─┘       │ TxFailed / assign_timeout    │
//!    └──────────────────────────────────────┴──── lost / rejected / released / superseded
//!  Running ──(last step accepted | JobCompleted | JobExpired)──> Finished
//! ```
//! Reassignment first tries the standby bids providers sent for the next epoch, so a failover
//! needs no bidding round.
//!
//! A quorum of accepts is submitted at once. A quorum of rejects waits up to
//! [`REJECT_FULL_WAIT`] for the rest of the committee, because the escrow slashes only a
//! unanimous reject; it goes as soon as every member's reject is in, and with what it has
//! when the wait is over. A late accept of an epoch this client ended (the escrow's decision
//! window) may end the live epoch as `Superseded`: the job is reassigned from the new head.
//!
//! One file on purpose, though long: the client is one state machine whose phases share the
//! job table, and its transitions read best in one place, beside the diagram above.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use alloy_primitives::{Address, U256};

use crate::chain::{ChainEvent, ChainTx, EpochEndReason, TxId};
use crate::chain_record::ChainRecord;
use crate::detector::{Busy, DetectorConfig, FailureDetector, ProgressSpec, Suspicion};
use crate::eip712::EscrowDomain;
use crate::io::{Input, Notice, Output, Passed, StateMachine};
use crate::messages::{Bid, CheckpointAnnounce, Heartbeat, JobOffer, Vote};
use crate::reputation::{self, Reputation};
use crate::retry::{AfterFailure, RetryPolicy, Retrying};
use crate::signing::{Scheme, Sig65, SigningKey};
use crate::spec::JobSpec;
use crate::time::Time;
use crate::topics::{JOBS_TOPIC, heartbeat_topic, job_topic};
use crate::types::{Epoch, Hash, JobId, Step};
use crate::validation::{IgnoreReason, RejectReason, Verdict};
use crate::wire::Message;

/// Bids for epochs further ahead than this are ignored rather than stored: they cannot be
/// used before the epochs in between.
const MAX_BID_EPOCH_LEAD: Epoch = 2;
/// Anyone can make a key and bid, so the bid book per job is bounded; the chain refuses
/// unstaked providers anyway.
const MAX_BIDS_PER_JOB: usize = 256;
/// Bound on open vote tallies per job: even committee members must not grow our memory at
/// will.
const MAX_TALLIES_PER_JOB: usize = 1024;

/// How long a quorum of rejects waits for the rest of the committee's rejects: the escrow
/// slashes only when every member signed, and a reject without the slash lets a provider
/// that returned junk keep its stake. Short, because the epoch is stalled meanwhile.
pub const REJECT_FULL_WAIT: Duration = Duration::from_secs(2);

/// How long after a failed `drawCommittee` the client asks again (the seed block not mined
/// yet, a pool that shrank below the committee size).
pub const DRAW_RETRY_AFTER: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub domain: EscrowDomain,
    pub detector: DetectorConfig,
    /// How long the first bidding round (and each re-offer) collects bids.
    pub bid_window: Duration,
    /// A bid must stay valid this many seconds past the latest block time to be used, so the
    /// `assign` transaction lands before it expires.
    pub bid_expiry_margin_secs: u64,
    /// An `assign` neither confirmed nor failed after this long is given up on (a dropped
    /// transaction must not stall the job); if it lands later, its event is adopted anyway.
    pub assign_timeout: Duration,
    /// Fetching the client's own copy of each announced checkpoint.
    pub copy_retry: RetryPolicy,
    /// How long a reject quorum waits for the whole committee ([`REJECT_FULL_WAIT`]).
    pub reject_full_wait: Duration,
    /// The wait before asking for a draw again after one failed ([`DRAW_RETRY_AFTER`]).
    pub draw_retry: Duration,
}

impl ClientConfig {
    pub fn new(domain: EscrowDomain) -> Self {
        ClientConfig {
            domain,
            detector: DetectorConfig::default(),
            bid_window: Duration::from_millis(500),
            bid_expiry_margin_secs: 12,
            assign_timeout: Duration::from_secs(30),
            copy_retry: crate::retry::BLOB_FETCH,
            reject_full_wait: REJECT_FULL_WAIT,
            draw_retry: DRAW_RETRY_AFTER,
        }
    }
}

/// What the client needs besides the spec to call `createJob`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobParams {
    pub token: Address,
    /// At least [`crate::escrow::cost_bound`] of the whole job.
    pub budget: U256,
    pub max_price_per_step: U256,
    /// Seats the escrow draws from its verifier pool (2 to 32).
    pub committee_size: u8,
    /// A strict majority of `committee_size`.
    pub quorum: u8,
    /// Paid per decision to each member whose signature is in it.
    pub verifier_fee: U256,
    pub deadline: u64,
    pub grace: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the escrow to draw the committee; `drawCommittee` is asked for (again)
    /// at `until`.
    Drawing {
        until: Time,
    },
    Bidding {
        until: Time,
    },
    Assigning {
        tx: TxId,
        provider: Address,
        until: Time,
    },
    Running,
    Finished,
}

/// Read-only view of one job, for the dashboard, tests and the simulator's assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobStatus {
    pub spec_hash: Hash,
    pub phase: Phase,
    pub epoch: Epoch,
    pub provider: Option<Address>,
    pub last_accepted: Step,
    pub last_accepted_hash: Hash,
    pub last_reported_step: Step,
    pub excluded: Vec<Address>,
    /// The drawn committee (empty while drawing).
    pub committee: Vec<Address>,
    /// The providers this client gave up on, oldest first (the last [`MAX_DETECTIONS`]).
    pub detections: Vec<Detection>,
}

/// One provider given up on: which epoch, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detection {
    pub epoch: Epoch,
    pub provider: Address,
    pub reason: Suspicion,
    /// Lost: since the last heartbeat. Stalled: since the step last advanced.
    pub silent_for: Duration,
}

/// Detections kept per job for its status: one per failed epoch, bounded all the same.
pub const MAX_DETECTIONS: usize = 16;

#[derive(Clone, Debug, Default)]
struct Tally {
    accepts: BTreeMap<Address, Sig65>,
    rejects: BTreeMap<Address, Sig65>,
    /// A reject quorum is in: submitted at this time if the whole committee has not
    /// rejected before.
    reject_due: Option<Time>,
}

#[derive(Clone, Debug)]
struct ClientJob {
    spec_hash: Hash,
    /// What bids must be signed over (`JobEscrow.termsOf`); zero until the draw.
    terms: Hash,
    /// Completed with budget left that no `settle` has credited yet.
    unsettled: bool,
    spec: Option<JobSpec>,
    total_steps: Step,
    interval: Step,
    max_price: U256,
    /// Empty until `CommitteeDrawn`.
    committee: Vec<Address>,
    quorum: u8,
    epoch: Epoch,
    provider: Option<Address>,
    last_accepted: Step,
    last_accepted_hash: Hash,
    phase: Phase,
    bids: BTreeMap<(Epoch, Address), Bid>,
    excluded: BTreeSet<Address>,
    detector: Option<FailureDetector>,
    detections: VecDeque<Detection>,
    last_seq: Option<u64>,
    last_reported_step: Step,
    announced: BTreeSet<(Epoch, Step, Hash)>,
    tallies: BTreeMap<(Epoch, Step, Hash), Tally>,
    submitted: BTreeSet<(Epoch, Step)>,
}

#[derive(Clone, Copy, Debug)]
enum PendingTx {
    Assign {
        job_id: JobId,
        epoch: Epoch,
        provider: Address,
    },
    Decision {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
    },
    Draw {
        job_id: JobId,
    },
    /// A failure that needs no handling beyond its notice: not recorded.
    Other,
}

impl PendingTx {
    fn job(&self) -> Option<JobId> {
        match self {
            PendingTx::Assign { job_id, .. }
            | PendingTx::Decision { job_id, .. }
            | PendingTx::Draw { job_id } => Some(*job_id),
            PendingTx::Other => None,
        }
    }
}

#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    key: SigningKey,
    specs: BTreeMap<Hash, JobSpec>,
    jobs: BTreeMap<JobId, ClientJob>,
    /// The jobs not finished: the ones timers concern. A client runs job after job, and
    /// walking every finished one on each timer made a long run slower by the day.
    live: BTreeSet<JobId>,
    reputation: Reputation,
    /// Every job's record on chain, read by bid choice.
    record: ChainRecord,
    /// Reject quorums waiting for the whole committee, by due time.
    reject_timers: BTreeSet<(Time, JobId, (Epoch, Step, Hash))>,
    block_time: u64,
    next_tx: u64,
    pending: BTreeMap<TxId, PendingTx>,
    /// Checkpoint copies being fetched, until one try succeeds or the tries run out.
    copies: BTreeMap<Hash, CopyFetch>,
    outputs: VecDeque<Output>,
    /// While replaying history on restart: state changes, no outputs.
    replaying: bool,
    /// The transport's round trip to each peer that measured one, for the detectors of the
    /// providers assigned later.
    rtts: BTreeMap<Address, Duration>,
}

#[derive(Clone, Debug)]
struct CopyFetch {
    from: Address,
    retry: Retrying,
}

impl Client {
    /// The detectors watching `provider`, one per job it runs for us.
    fn detectors_of(&mut self, provider: Address) -> impl Iterator<Item = &mut FailureDetector> {
        self.jobs
            .values_mut()
            .filter(move |job| job.provider == Some(provider))
            .filter_map(|job| job.detector.as_mut())
    }

    pub fn new(config: ClientConfig, key: SigningKey) -> Self {
        Client {
            config,
            key,
            specs: BTreeMap::new(),
            jobs: BTreeMap::new(),
            live: BTreeSet::new(),
            reputation: Reputation::default(),
            record: ChainRecord::default(),
            reject_timers: BTreeSet::new(),
            block_time: 0,
            next_tx: 0,
            pending: BTreeMap::new(),
            copies: BTreeMap::new(),
            outputs: VecDeque::new(),
            replaying: false,
            rtts: BTreeMap::new(),
        }
    }

    /// Rebuilds a restarted client from the escrow's event history (the chain is the only
    /// shared authority) and the specs it kept. Nothing from the replay is re-emitted; the
    /// client then re-subscribes, re-offers open jobs and re-arms failure detection from `now`
    /// (a provider that died while we were down is caught one timeout later).
    pub fn restore(
        config: ClientConfig,
        key: SigningKey,
        specs: impl IntoIterator<Item = JobSpec>,
        history: impl IntoIterator<Item = (u64, ChainEvent)>,
        now: Time,
    ) -> Self {
        let mut c = Client::new(config, key);
        for spec in specs {
            c.specs.insert(spec.spec_hash(), spec);
        }
        c.replaying = true;
        for (block_time, event) in history {
            c.on_chain(now, block_time, event);
        }
        c.replaying = false;
        let ids: Vec<JobId> = c.jobs.keys().copied().collect();
        for job_id in ids {
            let Some(job) = c.jobs.get_mut(&job_id) else {
                continue;
            };
            match job.phase {
                Phase::Finished => {
                    if job.unsettled {
                        c.submit(ChainTx::Settle { job_id }, PendingTx::Other);
                    }
                    continue;
                }
                Phase::Drawing { .. } => c.request_draw(now, job_id),
                Phase::Running => {
                    job.detector = Some(arm(
                        c.config.detector,
                        now,
                        job,
                        job.last_reported_step,
                        &c.rtts,
                    ));
                }
                Phase::Bidding { .. } | Phase::Assigning { .. } => {
                    job.phase = Phase::Bidding {
                        until: now.saturating_add(c.config.bid_window),
                    };
                    c.publish_offer(job_id);
                }
            }
            c.subscribe(job_id);
        }
        c
    }

    pub fn address(&self) -> Address {
        self.key.address()
    }

    /// This client's own observations of providers (losses it noticed, on its jobs).
    pub fn reputation(&self) -> &Reputation {
        &self.reputation
    }

    /// Every job's record on chain, as this client has read it.
    pub fn chain_record(&self) -> &ChainRecord {
        &self.record
    }

    pub fn job_status(&self, job_id: JobId) -> Option<JobStatus> {
        self.jobs.get(&job_id).map(|j| JobStatus {
            spec_hash: j.spec_hash,
            phase: j.phase,
            epoch: j.epoch,
            provider: j.provider,
            last_accepted: j.last_accepted,
            last_accepted_hash: j.last_accepted_hash,
            last_reported_step: j.last_reported_step,
            excluded: j.excluded.iter().copied().collect(),
            committee: j.committee.clone(),
            detections: j.detections.iter().copied().collect(),
        })
    }

    /// Starts a job: remembers its spec and submits `createJob`. The draw is asked for when
    /// the chain confirms with `JobCreated`, and the offer goes out when the committee is
    /// drawn (only then are there terms to bid on).
    pub fn create_job(&mut self, spec: JobSpec, params: JobParams) -> TxId {
        let spec_hash = spec.spec_hash();
        let tx = ChainTx::CreateJob {
            token: params.token,
            budget: params.budget,
            max_price_per_step: params.max_price_per_step,
            total_steps: spec.total_steps,
            checkpoint_interval: spec.checkpoint_interval,
            spec_hash,
            committee_size: params.committee_size,
            quorum: params.quorum,
            verifier_fee: params.verifier_fee,
            deadline: params.deadline,
            grace: params.grace,
        };
        self.specs.insert(spec_hash, spec);
        self.submit(tx, PendingTx::Other)
    }

    /// Submits `expire` (after deadline + grace the escrow refunds the unspent budget).
    pub fn expire(&mut self, job_id: JobId) -> TxId {
        self.submit(ChainTx::Expire { job_id }, PendingTx::Other)
    }

    /// Submits `withdraw` for refunds credited to this client.
    pub fn withdraw(&mut self, token: Address) -> TxId {
        self.submit(ChainTx::Withdraw { token }, PendingTx::Other)
    }

    /// Ends the current epoch without a replacement (`releaseProvider`).
    pub fn release_provider(&mut self, job_id: JobId) -> TxId {
        self.submit(ChainTx::ReleaseProvider { job_id }, PendingTx::Other)
    }

    /// The answer to a fetch of our copy of a checkpoint: done, tried again after the policy's
    /// wait, or given up on (the verifiers keep copies too).
    fn on_copy_fetched(&mut self, now: Time, hash: Hash, ok: bool) {
        let Some(c) = self.copies.get_mut(&hash) else {
            return;
        };
        if ok {
            self.copies.remove(&hash);
            return;
        }
        if c.retry.failed(now, &self.config.copy_retry) == AfterFailure::GiveUp {
            self.copies.remove(&hash);
        }
    }

    fn emit(&mut self, out: Output) {
        if !self.replaying {
            self.outputs.push_back(out);
        }
    }

    /// A job of ours: its topic (bids, announcements, votes) and its heartbeats, which only
    /// the client hears.
    fn subscribe(&mut self, job_id: JobId) {
        self.emit(Output::Subscribe {
            topic: job_topic(job_id),
        });
        self.emit(Output::Subscribe {
            topic: heartbeat_topic(job_id),
        });
    }

    fn submit(&mut self, tx: ChainTx, pending: PendingTx) -> TxId {
        let id = TxId(self.next_tx);
        self.next_tx += 1;
        // The chain reports failures only: a transaction that landed stays here until its
        // job finishes, and one whose failure needs no handling is not kept at all, or a
        // client running job after job would hold every transaction it ever sent.
        if !self.replaying && !matches!(pending, PendingTx::Other) {
            self.pending.insert(id, pending);
        }
        self.emit(Output::SubmitTx { id, tx });
        id
    }

    fn publish_offer(&mut self, job_id: JobId) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        let Some(spec) = job.spec.clone() else {
            self.emit(Output::Notice(Notice::UnknownJob { job_id }));
            return;
        };
        let offer = JobOffer {
            job_id,
            client: self.key.address(),
            next_epoch: job.epoch.saturating_add(1),
            spec,
            max_price_per_step: job.max_price,
            committee: job.committee.clone(),
            quorum: job.quorum,
            signature: Sig65::ZERO,
        }
        .sign(&self.key);
        self.emit(Output::Publish {
            topic: JOBS_TOPIC.to_owned(),
            message: Message::JobOffer(offer),
        });
    }

    /// The best usable bid for the next epoch: providers without a rejected epoch on chain
    /// first, then the cheapest, then the best reputation (the chain record's score plus
    /// this client's own), then the lowest address (a deterministic tie-break, so the
    /// simulator replays). Providers banned locally or with too many rejected epochs on
    /// chain are not considered.
    fn best_bid(&self, job: &ClientJob) -> Option<Bid> {
        let next = job.epoch.saturating_add(1);
        let min_expiry = self
            .block_time
            .saturating_add(self.config.bid_expiry_margin_secs);
        job.bids
            .range((next, Address::ZERO)..=(next, Address::repeat_byte(0xff)))
            .map(|(_, b)| b)
            .filter(|b| b.expiry > min_expiry)
            .filter(|b| b.price_per_step <= job.max_price)
            .filter(|b| !job.excluded.contains(&b.provider))
            .filter(|b| !self.reputation.is_banned(&b.provider))
            .filter(|b| !self.record.provider(&b.provider).is_excluded())
            .filter(|b| {
                job.spec
                    .as_ref()
                    .is_none_or(|s| b.hardware.memory_bytes >= s.min_memory_bytes)
            })
            .min_by_key(|b| {
                let record = self.record.provider(&b.provider);
                let score = self.reputation.score(&b.provider) + record.score();
                (
                    record.epochs_rejected > 0,
                    b.price_per_step,
                    -score,
                    b.provider,
                )
            })
            .cloned()
    }

    /// Picks a provider now if a usable bid is at hand, else opens a bidding round.
    fn assign_or_bid(&mut self, now: Time, job_id: JobId) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        let epoch = job.epoch.saturating_add(1);
        match self.best_bid(job) {
            Some(bid) => {
                let tx = ChainTx::Assign {
                    job_id,
                    provider: bid.provider,
                    price_per_step: bid.price_per_step,
                    bid_expiry: bid.expiry,
                    bid_signature: bid.signature,
                };
                let id = self.submit(
                    tx,
                    PendingTx::Assign {
                        job_id,
                        epoch,
                        provider: bid.provider,
                    },
                );
                if let Some(job) = self.jobs.get_mut(&job_id) {
                    job.phase = Phase::Assigning {
                        tx: id,
                        provider: bid.provider,
                        until: now + self.config.assign_timeout,
                    };
                }
                self.emit(Output::Notice(Notice::ProviderSelected {
                    job_id,
                    epoch,
                    provider: bid.provider,
                    price_per_step: bid.price_per_step,
                }));
            }
            None => {
                if let Some(job) = self.jobs.get_mut(&job_id) {
                    job.phase = Phase::Bidding {
                        until: now.saturating_add(self.config.bid_window),
                    };
                }
                self.emit(Output::Notice(Notice::NoUsableBids { job_id, epoch }));
                self.publish_offer(job_id);
            }
        }
    }

    /// Asks the escrow to draw the job's committee; asked again at the phase's `until` if
    /// neither the committee nor a failure shows up (a dropped transaction).
    fn request_draw(&mut self, now: Time, job_id: JobId) {
        let until = now.saturating_add(self.config.assign_timeout);
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.phase = Phase::Drawing { until };
        }
        self.submit(
            ChainTx::DrawCommittee { job_id },
            PendingTx::Draw { job_id },
        );
    }

    /// The running epoch is over without our doing (loss, rejection, release): find another.
    fn epoch_over(&mut self, now: Time, job_id: JobId) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        if job.phase != Phase::Running {
            return;
        }
        job.detector = None;
        job.provider = None;
        self.assign_or_bid(now, job_id);
    }

    fn on_chain(&mut self, now: Time, block_time: u64, event: ChainEvent) {
        self.block_time = self.block_time.max(block_time);
        self.record.apply(&event);
        let job_id = event.job_id();
        if let ChainEvent::JobCreated {
            client,
            max_price_per_step,
            total_steps,
            checkpoint_interval,
            spec_hash,
            quorum,
            ..
        } = event
        {
            if client != self.key.address() || self.jobs.contains_key(&job_id) {
                return;
            }
            self.live.insert(job_id);
            self.jobs.insert(
                job_id,
                ClientJob {
                    spec_hash,
                    terms: Hash::ZERO,
                    unsettled: false,
                    spec: self.specs.get(&spec_hash).cloned(),
                    total_steps,
                    interval: checkpoint_interval,
                    max_price: max_price_per_step,
                    committee: Vec::new(),
                    quorum,
                    epoch: 0,
                    provider: None,
                    last_accepted: 0,
                    // The escrow's convention: before any acceptance the "checkpoint" is the spec.
                    last_accepted_hash: spec_hash,
                    phase: Phase::Drawing { until: now },
                    bids: BTreeMap::new(),
                    excluded: BTreeSet::new(),
                    detector: None,
                    detections: VecDeque::new(),
                    last_seq: None,
                    last_reported_step: 0,
                    announced: BTreeSet::new(),
                    tallies: BTreeMap::new(),
                    submitted: BTreeSet::new(),
                },
            );
            self.subscribe(job_id);
            self.request_draw(now, job_id);
            return;
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        match event {
            ChainEvent::JobCreated { .. } => {}
            ChainEvent::CommitteeSeedMoved { .. } => {
                // Nothing was drawn: the new seed block is mined by now, so ask again.
                if matches!(job.phase, Phase::Drawing { .. }) {
                    self.request_draw(now, job_id);
                }
            }
            ChainEvent::CommitteeDrawn {
                committee, terms, ..
            } => {
                if !matches!(job.phase, Phase::Drawing { .. }) {
                    return;
                }
                job.committee = committee;
                job.terms = terms;
                job.phase = Phase::Bidding {
                    until: now.saturating_add(self.config.bid_window),
                };
                self.publish_offer(job_id);
            }
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                start_step,
                start_checkpoint,
                ..
            } => {
                // A repeated event must not reset the heartbeat sequence (replayed heartbeats
                // would count again).
                if epoch <= job.epoch {
                    return;
                }
                job.epoch = epoch;
                job.provider = Some(provider);
                job.last_accepted = start_step;
                job.last_accepted_hash = start_checkpoint;
                job.last_reported_step = start_step;
                job.phase = Phase::Running;
                job.detector = Some(arm(self.config.detector, now, job, start_step, &self.rtts));
                job.last_seq = None;
                job.bids.retain(|(e, _), _| *e > epoch);
                job.tallies.retain(|(e, _, _), _| *e >= epoch);
                // Votes that arrived before we saw this assignment may already form a quorum.
                let keys: Vec<_> = job.tallies.keys().copied().collect();
                for key in keys {
                    self.check_quorum(now, job_id, key);
                }
            }
            ChainEvent::EpochEnded { epoch, reason, .. } => {
                if epoch != job.epoch {
                    return;
                }
                match reason {
                    // Replaced: our own assign did it, the new epoch's event takes over.
                    // Completed/Expired: the job events below finish it.
                    EpochEndReason::Replaced
                    | EpochEndReason::Completed
                    | EpochEndReason::Expired => {}
                    EpochEndReason::Rejected => {
                        // Normally CheckpointRejected came first and excluded it already; do
                        // not rely on event order to keep a rejected provider out.
                        if let Some(p) = job.provider {
                            job.excluded.insert(p);
                        }
                        self.epoch_over(now, job_id)
                    }
                    // Superseded: a late accept of an epoch we ended moved the head past this
                    // one's start; no fault of its provider, so it is not excluded.
                    EpochEndReason::Released
                    | EpochEndReason::Resigned
                    | EpochEndReason::Superseded
                    | EpochEndReason::Other(_) => self.epoch_over(now, job_id),
                }
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                checkpoint_hash,
                provider,
                ..
            } => {
                self.reputation
                    .adjust(provider, reputation::CHECKPOINT_ACCEPTED);
                if step > job.last_accepted {
                    job.last_accepted = step;
                    job.last_accepted_hash = checkpoint_hash;
                }
                job.tallies.retain(|(_, s, _), _| *s > step);
                job.submitted.remove(&(epoch, step));
                if step >= job.total_steps {
                    job.phase = Phase::Finished;
                    job.detector = None;
                    self.live.remove(&job_id);
                }
            }
            ChainEvent::CheckpointRejected {
                epoch,
                step,
                provider,
                slashed,
                ..
            } => {
                let penalty = if slashed.is_zero() {
                    reputation::CHECKPOINT_REJECTED_UNSLASHED
                } else {
                    reputation::CHECKPOINT_REJECTED
                };
                self.reputation.adjust(provider, penalty);
                job.excluded.insert(provider);
                job.submitted.remove(&(epoch, step));
                job.tallies.retain(|(e, _, _), _| *e > epoch);
                if epoch == job.epoch {
                    self.epoch_over(now, job_id);
                }
            }
            ChainEvent::JobSettled { .. } => job.unsettled = false,
            ChainEvent::JobCompleted { .. } | ChainEvent::JobExpired { .. } => {
                // What a completed job did not spend, and the committee's fees, wait for a
                // `settle`: ours to send, even with nothing left to refund (the fees are owed).
                let settle = matches!(event, ChainEvent::JobCompleted { .. });
                job.unsettled = settle;
                job.phase = Phase::Finished;
                job.detector = None;
                self.live.remove(&job_id);
                job.bids.clear();
                // A late failure of one of its transactions would change nothing now.
                self.pending.retain(|_, p| p.job() != Some(job_id));
                self.emit(Output::Unsubscribe {
                    topic: job_topic(job_id),
                });
                self.emit(Output::Unsubscribe {
                    topic: heartbeat_topic(job_id),
                });
                self.emit(Output::Notice(Notice::JobFinished { job_id }));
                if settle {
                    self.submit(ChainTx::Settle { job_id }, PendingTx::Other);
                }
            }
        }
    }

    /// Submits the decision a tally holds: an accept quorum at once; a reject quorum once
    /// the whole committee rejected or the full wait is over, whichever is first.
    fn check_quorum(&mut self, now: Time, job_id: JobId, key: (Epoch, Step, Hash)) {
        let full_wait = self.config.reject_full_wait;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        let (epoch, step, checkpoint_hash) = key;
        if epoch != job.epoch
            || job.phase != Phase::Running
            || job.submitted.contains(&(epoch, step))
        {
            return;
        }
        let committee_size = job.committee.len();
        let Some(tally) = job.tallies.get_mut(&key) else {
            return;
        };
        let quorum = usize::from(job.quorum);
        // BTreeMap iteration is by ascending signer address: the order the escrow expects.
        let decision = if tally.accepts.len() >= quorum {
            Some((true, tally.accepts.values().copied().collect::<Vec<_>>()))
        } else if tally.rejects.len() >= quorum {
            let all_in = tally.rejects.len() >= committee_size;
            let due = *tally
                .reject_due
                .get_or_insert_with(|| now.saturating_add(full_wait));
            if all_in || due <= now {
                Some((false, tally.rejects.values().copied().collect::<Vec<_>>()))
            } else {
                self.reject_timers.insert((due, job_id, key));
                None
            }
        } else {
            None
        };
        let Some((accept, sigs)) = decision else {
            return;
        };
        job.submitted.insert((epoch, step));
        let tx = ChainTx::decision(accept, job_id, epoch, step, checkpoint_hash, sigs);
        self.emit(Output::Notice(Notice::QuorumReached {
            job_id,
            epoch,
            step,
            accept,
        }));
        self.submit(
            tx,
            PendingTx::Decision {
                job_id,
                epoch,
                step,
            },
        );
    }

    fn on_bid(&mut self, bid: &Bid) -> Verdict {
        let Some(job) = self.jobs.get_mut(&bid.job_id) else {
            return Verdict::Accept;
        };
        if job.phase == Phase::Finished || bid.epoch <= job.epoch {
            return Verdict::Ignore(IgnoreReason::StaleEpoch);
        }
        // No terms to bid on before the draw: a bid now was not made from the chain.
        if matches!(job.phase, Phase::Drawing { .. }) {
            return Verdict::Ignore(IgnoreReason::UnknownJob);
        }
        if bid.epoch > job.epoch.saturating_add(MAX_BID_EPOCH_LEAD) {
            return Verdict::Ignore(IgnoreReason::FutureEpoch);
        }
        if bid.terms != job.terms {
            return Verdict::Reject(RejectReason::TermsMismatch);
        }
        if bid.price_per_step > job.max_price {
            return Verdict::Reject(RejectReason::PriceAboveMax);
        }
        if bid.expiry <= self.block_time {
            return Verdict::Ignore(IgnoreReason::Expired);
        }
        if job.excluded.contains(&bid.provider) {
            return Verdict::Ignore(IgnoreReason::ProviderExcluded);
        }
        let key = (bid.epoch, bid.provider);
        if job.bids.get(&key) == Some(bid) {
            return Verdict::Ignore(IgnoreReason::Duplicate);
        }
        if job.bids.len() >= MAX_BIDS_PER_JOB && !job.bids.contains_key(&key) {
            return Verdict::Ignore(IgnoreReason::Overloaded);
        }
        // A provider's newer bid for the same epoch replaces its older one.
        job.bids.insert(key, bid.clone());
        Verdict::Accept
    }

    fn on_heartbeat(&mut self, now: Time, hb: &Heartbeat) -> Verdict {
        let Some(job) = self.jobs.get_mut(&hb.job_id) else {
            return Verdict::Accept;
        };
        if hb.epoch < job.epoch {
            return Verdict::Ignore(IgnoreReason::StaleEpoch);
        }
        if hb.epoch > job.epoch {
            return Verdict::Ignore(IgnoreReason::FutureEpoch);
        }
        if job.provider != Some(hb.provider) {
            return match job.provider {
                // The epoch has ended on chain: a late heartbeat of its provider.
                None => Verdict::Ignore(IgnoreReason::StaleEpoch),
                Some(_) => Verdict::Reject(RejectReason::NotAssignedProvider),
            };
        }
        match job.last_seq {
            Some(s) if hb.seq == s => return Verdict::Ignore(IgnoreReason::Duplicate),
            Some(s) if hb.seq < s => return Verdict::Ignore(IgnoreReason::Replayed),
            _ => {}
        }
        job.last_seq = Some(hb.seq);
        job.last_reported_step = job.last_reported_step.max(hb.step);
        if let Some(d) = job.detector.as_mut() {
            d.heard(now);
            d.progressed(
                now,
                hb.step,
                Busy {
                    checkpointing: hb.checkpointing,
                    starved_ms: hb.starved_ms,
                },
            );
        }
        Verdict::Accept
    }

    fn on_announce(&mut self, ann: &CheckpointAnnounce) -> Verdict {
        let Some(job) = self.jobs.get_mut(&ann.job_id) else {
            return Verdict::Accept;
        };
        if ann.epoch < job.epoch {
            return Verdict::Ignore(IgnoreReason::StaleEpoch);
        }
        if ann.epoch > job.epoch {
            return Verdict::Ignore(IgnoreReason::FutureEpoch);
        }
        if job.provider != Some(ann.provider) {
            return match job.provider {
                None => Verdict::Ignore(IgnoreReason::StaleEpoch),
                Some(_) => Verdict::Reject(RejectReason::NotAssignedProvider),
            };
        }
        let on_grid = ann.step.is_multiple_of(job.interval) || ann.step == job.total_steps;
        if ann.step > job.total_steps || !on_grid {
            return Verdict::Reject(RejectReason::InvalidCheckpointStep);
        }
        if ann.step <= job.last_accepted {
            return Verdict::Ignore(IgnoreReason::AlreadyDecided);
        }
        if !job
            .announced
            .insert((ann.epoch, ann.step, ann.checkpoint_hash))
        {
            return Verdict::Ignore(IgnoreReason::Duplicate);
        }
        // Keep a copy: the checkpoint must outlive its provider (step 5 of the lifecycle).
        self.copies.entry(ann.checkpoint_hash).or_insert(CopyFetch {
            from: ann.provider,
            retry: Retrying::default(),
        });
        let out = Output::FetchBlob {
            hash: ann.checkpoint_hash,
            from: Some(ann.provider),
        };
        self.emit(out);
        Verdict::Accept
    }

    fn on_vote(&mut self, now: Time, vote: &Vote) -> Verdict {
        let job_id = vote.job_id;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Verdict::Accept;
        };
        // Only the drawn committee's votes count (none before the draw).
        if !job.committee.contains(&vote.verifier) {
            return Verdict::Reject(RejectReason::NotListedVerifier);
        }
        if vote.epoch < job.epoch {
            return Verdict::Ignore(IgnoreReason::StaleEpoch);
        }
        if vote.epoch > job.epoch.saturating_add(1) {
            return Verdict::Ignore(IgnoreReason::FutureEpoch);
        }
        let on_grid = vote.step.is_multiple_of(job.interval) || vote.step == job.total_steps;
        if vote.step > job.total_steps || !on_grid {
            return Verdict::Reject(RejectReason::InvalidCheckpointStep);
        }
        if vote.step <= job.last_accepted || job.submitted.contains(&(vote.epoch, vote.step)) {
            return Verdict::Ignore(IgnoreReason::AlreadyDecided);
        }
        let key = (vote.epoch, vote.step, vote.checkpoint_hash);
        if job.tallies.len() >= MAX_TALLIES_PER_JOB && !job.tallies.contains_key(&key) {
            return Verdict::Ignore(IgnoreReason::Overloaded);
        }
        let tally = job.tallies.entry(key).or_default();
        let (same, other) = if vote.accept {
            (&mut tally.accepts, &tally.rejects)
        } else {
            (&mut tally.rejects, &tally.accepts)
        };
        if other.contains_key(&vote.verifier) {
            return Verdict::Reject(RejectReason::Equivocation);
        }
        if same.insert(vote.verifier, vote.signature).is_some() {
            // Verifiers publish their vote again until the checkpoint is decided. When the
            // decision this tally completed failed to land (`TxFailed`: the chain RPC was
            // away, say), the tally already holds every vote, so no new vote would ever
            // complete it again: its repeat is what sends the decision again.
            self.check_quorum(now, job_id, key);
            return Verdict::Ignore(IgnoreReason::Duplicate);
        }
        self.check_quorum(now, job_id, key);
        Verdict::Accept
    }

    fn on_tx_failed(&mut self, now: Time, id: TxId, reason: String) {
        self.emit(Output::Notice(Notice::TxFailed { id, reason }));
        match self.pending.remove(&id) {
            Some(PendingTx::Assign {
                job_id,
                epoch,
                provider,
            }) => {
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                job.bids.remove(&(epoch, provider));
                if matches!(job.phase, Phase::Assigning { tx, .. } if tx == id) {
                    self.assign_or_bid(now, job_id);
                }
            }
            Some(PendingTx::Decision {
                job_id,
                epoch,
                step,
            }) => {
                // The next vote for this checkpoint, new or repeated, submits it again.
                if let Some(job) = self.jobs.get_mut(&job_id) {
                    job.submitted.remove(&(epoch, step));
                }
            }
            Some(PendingTx::Draw { job_id }) => {
                // Too early (the seed block not mined yet) or a pool that shrank: try again
                // shortly. Drawn by someone else meanwhile: `CommitteeDrawn` moved us on.
                let retry = now.saturating_add(self.config.draw_retry);
                if let Some(job) = self.jobs.get_mut(&job_id)
                    && matches!(job.phase, Phase::Drawing { .. })
                {
                    job.phase = Phase::Drawing { until: retry };
                }
            }
            Some(PendingTx::Other) | None => {}
        }
    }
}

impl StateMachine for Client {
    fn checks_under(&self) -> (EscrowDomain, Scheme) {
        (self.config.domain, self.key.scheme())
    }

    fn on_checked(&mut self, now: Time, msg: &Message, _: Passed) -> Verdict {
        match msg {
            Message::Bid(b) => self.on_bid(b),
            Message::Heartbeat(h) => self.on_heartbeat(now, h),
            Message::CheckpointAnnounce(a) => self.on_announce(a),
            Message::Vote(v) => self.on_vote(now, v),
            Message::NodeHello(_) | Message::JobOffer(_) => Verdict::Accept,
        }
    }

    fn handle_input(&mut self, now: Time, input: Input) {
        match input {
            Input::Chain { block_time, event } => self.on_chain(now, block_time, event),
            Input::TxFailed { id, reason } => self.on_tx_failed(now, id, reason),
            Input::ConnectionClosed { address } => {
                for d in self.detectors_of(address) {
                    d.connection_closed(now);
                }
            }
            Input::PathRtt { address, rtt } => {
                for d in self.detectors_of(address) {
                    d.path_rtt(rtt);
                }
                self.rtts.insert(address, rtt);
            }
            Input::StepDone { .. }
            | Input::CheckpointReady { .. }
            | Input::TrainingFailed { .. }
            | Input::QualityResult { .. }
            | Input::SpotCheckResult { .. }
            | Input::StakeChanged { .. }
            | Input::ComputeStarved { .. } => {}
            Input::BlobFetched { hash, ok } => self.on_copy_fetched(now, hash, ok),
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        let due: Vec<(Hash, Address)> = self
            .copies
            .iter_mut()
            .filter_map(|(h, c)| c.retry.take_due(now).then_some((*h, c.from)))
            .collect();
        for (hash, from) in due {
            self.emit(Output::FetchBlob {
                hash,
                from: Some(from),
            });
        }
        while let Some(&(due, job_id, key)) = self.reject_timers.first() {
            if due > now {
                break;
            }
            self.reject_timers.pop_first();
            self.check_quorum(now, job_id, key);
        }
        let ids: Vec<JobId> = self.live.iter().copied().collect();
        for job_id in ids {
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            match job.phase {
                Phase::Drawing { until } if until <= now => self.request_draw(now, job_id),
                Phase::Bidding { until } if until <= now => self.assign_or_bid(now, job_id),
                Phase::Assigning {
                    provider, until, ..
                } if until <= now => {
                    let epoch = job.epoch.saturating_add(1);
                    job.bids.remove(&(epoch, provider));
                    self.assign_or_bid(now, job_id);
                }
                Phase::Running => {
                    let Some(d) = job.detector.as_ref() else {
                        continue;
                    };
                    let Some(reason) = d.suspicion(now) else {
                        continue;
                    };
                    let silent_for = match reason {
                        Suspicion::Lost => now.since(d.last_heard()),
                        Suspicion::Stalled => now.since(d.last_progress()),
                    };
                    let Some(provider) = job.provider else {
                        continue;
                    };
                    let epoch = job.epoch;
                    // A stalled provider is failed over exactly as a lost one: it holds the
                    // job and makes no progress either way.
                    job.excluded.insert(provider);
                    if job.detections.len() == MAX_DETECTIONS {
                        job.detections.pop_front();
                    }
                    job.detections.push_back(Detection {
                        epoch,
                        provider,
                        reason,
                        silent_for,
                    });
                    self.reputation.adjust(provider, reputation::PROVIDER_LOST);
                    self.emit(Output::Notice(Notice::ProviderLost {
                        job_id,
                        epoch,
                        provider,
                        silent_for,
                        reason,
                    }));
                    self.epoch_over(now, job_id);
                }
                _ => {}
            }
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.live
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter_map(|j| match j.phase {
                Phase::Drawing { until }
                | Phase::Bidding { until }
                | Phase::Assigning { until, .. } => Some(until),
                Phase::Running => j.detector.as_ref().map(FailureDetector::deadline),
                _ => None,
            })
            .chain(self.copies.values().filter_map(|c| c.retry.due()))
            .chain(self.reject_timers.first().map(|(due, ..)| *due))
            .min()
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }
}

/// A detector for the job's running epoch, whose step is at `from_step`: it expects
/// heartbeats and, until the last step, progress.
fn arm(
    config: DetectorConfig,
    now: Time,
    job: &ClientJob,
    from_step: Step,
    rtts: &BTreeMap<Address, Duration>,
) -> FailureDetector {
    let mut d = FailureDetector::new(config, now).watching_progress(ProgressSpec {
        start_step: from_step,
        checkpoint_interval: job.interval,
        end_step: job.total_steps,
    });
    if let Some(rtt) = job.provider.and_then(|p| rtts.get(&p)) {
        d.path_rtt(*rtt);
    }
    d
}
