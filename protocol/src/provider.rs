//! The provider: vets a job once the escrow has drawn its committee, bids on offers that fit
//! its hardware, acts on its chain assignment (never on gossip), drives the trainer,
//! heartbeats, announces checkpoints, and stops as soon as its epoch is fenced.
//!
//! ```text
//!  Idle ──JobOffer fits, CommitteeDrawn vetted──> Bidding(epoch e) ──ProviderAssigned(e, me)──> Training(e)
//!   ^          ^──ProviderAssigned(e, other) / EpochEnded: standby bid for the next epoch
//!   │   Training(e) ──ProviderAssigned(e' > e) | EpochEnded(e) | CheckpointRejected(e)──> fenced: StopTraining
//!   └── Training(e) ──JobCompleted | JobExpired──> Done
//! ```
//! Heartbeats keep going after the last step until the job completes, so the client does not
//! mistake a provider waiting for its final vote for a dead one.
//!
//! The provider also collects the verifiers' accept votes on its own checkpoints and submits
//! the accept itself when the client has not landed it within [`CLAIM_AFTER`], or at once
//! when the client ended the epoch (the escrow's decision window keeps such an accept
//! payable): being paid for verified work never depends on the client's goodwill. Claims
//! end with whatever makes them unpayable: the accept landed, the head moved past them, the
//! epoch ended otherwise than by the client, the job finished, the claim failed, or
//! [`CLAIM_KEPT_FOR`] passed.
//!
//! One file on purpose, though long: vetting, bidding, training and claims all read and
//! write the same per-job record, and each reacts to the same chain events; split, every
//! transition would be spread over several files.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::time::Duration;

use alloy_primitives::{Address, U256};

use crate::chain::{ChainEvent, ChainTx, EpochEndReason, TxId};
use crate::eip712::{EscrowDomain, JobTerms};
use crate::escrow::{MIN_VERIFIERS, is_strict_majority};
use crate::io::{Input, Notice, Output, Passed, StateMachine};
use crate::messages::{Bid, CheckpointAnnounce, Hardware, Heartbeat, JobOffer, Vote, state_root};
use crate::signing::{Scheme, Sig65, SigningKey};
use crate::spec::JobSpec;
use crate::time::Time;
use crate::topics::{heartbeat_topic, job_topic};
use crate::types::{Epoch, Hash, JobId, Step};
use crate::validation::{IgnoreReason, RejectReason, Verdict};
use crate::wire::Message;

/// Offers for jobs the chain has not confirmed yet are held (anyone can sign an offer for a job
/// that does not exist), but only this many.
const MAX_UNCONFIRMED_OFFERS: usize = 64;

/// How long a published announcement or vote waits for the escrow's decision before it is
/// published again: several blocks on a public chain, so a decision normally lands first.
pub const REGOSSIP_AFTER: Duration = Duration::from_secs(10);

/// A provider's announcement that goes out again with no decision since waits twice as long
/// before the next time, up to this many times `REGOSSIP_AFTER`: a committee that is only
/// slow (replaying from anchors can take longer than a fast provider's interval) already
/// has it, and each copy is the interval's state hashes to every member and the client.
pub const REGOSSIP_BACKOFF_MAX: u32 = 8;

/// How long a quorum of accepts on our checkpoint waits for someone else (the client, whose
/// job it is) to land it before the provider submits it: long enough that an honest client's
/// transaction is normally first, so the accept is not paid for twice in gas.
pub const CLAIM_AFTER: Duration = Duration::from_secs(3);

/// How long votes on a checkpoint of an epoch that has ended are kept for a claim: past the
/// escrow's decision window on any deployment we make (testnets use 120 s).
pub const CLAIM_KEPT_FOR: Duration = Duration::from_secs(15 * 60);

/// The provider's transaction ids start here, apart from the client's on a node running both.
const CLAIM_TX_BASE: u64 = 1 << 62;

/// A checkpoint we announced, with the committee's accept votes heard for it.
#[derive(Clone, Debug, Default)]
struct Claim {
    checkpoint_hash: Hash,
    votes: BTreeMap<Address, Sig65>,
    /// When it is submitted if not decided before; `None` until a quorum is heard.
    due: Option<Time>,
    /// Dropped after this; set when the client ends its epoch (the escrow's decision window
    /// is shorter).
    keep_until: Option<Time>,
    submitted: bool,
}

/// Why the provider will not bid on a job: each rule of [`Vetting`], and the older fit checks.
/// The node logs each refusal with its rule and counts them for `gpuchain provider status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VetRule {
    /// The job pays in a token not on the allowlist.
    Token,
    /// A committee of fewer than two, or a quorum that is not a strict majority of it.
    Quorum,
    /// The client sits on its own job's committee.
    ClientIsVerifier,
    /// This provider sits on the job's committee (the escrow refuses that assignment).
    ProviderIsVerifier,
    /// The drawn terms are not the hash of the job this provider read: its bid would bind
    /// it to terms it never vetted.
    Terms,
    /// The deadline is further from now than the provider's limit.
    Deadline,
    /// The grace after the deadline is longer than the provider's limit.
    Grace,
    /// Its free stake cannot back one more epoch.
    Stake,
    /// A quorum of the job's committee rejected this provider's work before.
    RejectedBefore,
    /// The offer's maximum price is below this provider's price.
    Price,
    /// The spec is malformed.
    Spec,
    /// The job does not fit this provider's memory: the spec asks for more than it offers,
    /// or its trainer cannot hold the model and one example ([`ProviderConfig::memory_fit`]).
    Memory,
}

impl VetRule {
    pub fn name(self) -> &'static str {
        match self {
            VetRule::Token => "token",
            VetRule::Quorum => "quorum",
            VetRule::ClientIsVerifier => "client-is-verifier",
            VetRule::ProviderIsVerifier => "provider-is-verifier",
            VetRule::Terms => "terms",
            VetRule::Deadline => "deadline",
            VetRule::Grace => "grace",
            VetRule::Stake => "stake",
            VetRule::RejectedBefore => "rejected-before",
            VetRule::Price => "price",
            VetRule::Spec => "spec",
            VetRule::Memory => "memory",
        }
    }
}

/// What a provider requires of a job's terms before it bids: the escrow lets a client pick
/// them, and a provider that signs a bid on any terms lends its stake to whatever they allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vetting {
    /// Tokens it will be paid in; empty accepts any (the node always fills it: by default
    /// with the deployment's stake token).
    pub tokens: Vec<Address>,
    /// Longest `deadline - now` it accepts, in seconds: how long one epoch can hold its stake.
    pub max_duration_secs: u64,
    /// Longest grace after the deadline it accepts, in seconds.
    pub max_grace_secs: u64,
    /// Its bonded stake and the escrow's stake per epoch, as read at start; the machine then
    /// follows its own assignments and slashes. `None` does not check stake.
    pub stake: Option<StakeBudget>,
}

/// The provider's side of the escrow's per-epoch reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StakeBudget {
    pub bonded: U256,
    pub min_stake: U256,
}

/// By default a job may hold a provider for 30 days plus a day of grace.
pub const DEFAULT_MAX_DURATION_SECS: u64 = 30 * 24 * 3600;
pub const DEFAULT_MAX_GRACE_SECS: u64 = 24 * 3600;

impl Default for Vetting {
    fn default() -> Self {
        Vetting {
            tokens: Vec::new(),
            max_duration_secs: DEFAULT_MAX_DURATION_SECS,
            max_grace_secs: DEFAULT_MAX_GRACE_SECS,
            stake: None,
        }
    }
}

/// The parts of `JobCreated` and `CommitteeDrawn` the provider bids on and vets.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ChainJob {
    spec_hash: Hash,
    client: Address,
    token: Address,
    budget: U256,
    max_price_per_step: U256,
    total_steps: Step,
    checkpoint_interval: Step,
    quorum: u8,
    verifier_fee: U256,
    deadline: u64,
    grace: u64,
    /// From `CommitteeDrawn`: none is bid on before.
    drawn: Option<Drawn>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Drawn {
    committee: Vec<Address>,
    /// The terms `CommitteeDrawn` announced.
    announced: Hash,
    /// The terms of the job as this provider read it: what its bids sign.
    terms: Hash,
}

impl ChainJob {
    fn committee(&self) -> &[Address] {
        self.drawn.as_ref().map_or(&[], |d| &d.committee)
    }

    fn terms_with(&self, committee: &[Address]) -> Hash {
        JobTerms {
            client: self.client,
            token: self.token,
            budget: self.budget,
            max_price_per_step: self.max_price_per_step,
            total_steps: self.total_steps,
            checkpoint_interval: self.checkpoint_interval,
            spec_hash: self.spec_hash,
            committee,
            quorum: self.quorum,
            verifier_fee: self.verifier_fee,
            deadline: self.deadline,
            grace: self.grace,
        }
        .hash()
    }
}

/// Whether a node's trainer can train a job's model in `memory_bytes` at its smallest
/// micro-batch; `Err` says why, with the figures. The protocol does not know models, so the
/// node that does supplies this (a plain function: the machine stays deterministic).
pub type MemoryFit = fn(spec: &JobSpec, memory_bytes: u64) -> Result<(), String>;

#[derive(Clone, Debug)]
pub struct ProviderConfig {
    pub domain: EscrowDomain,
    pub hardware: Hardware,
    /// The price asked per step; offers whose maximum is lower are not bid on.
    pub price_per_step: U256,
    /// Bids stay valid this many seconds past the latest block time.
    pub bid_ttl_secs: u64,
    pub heartbeat_period: Duration,
    /// The oldest announcement the escrow has not decided this long after it was published
    /// is published again (then after twice as long, up to `REGOSSIP_BACKOFF_MAX` times):
    /// gossip can lose a message, and a verifier that missed one waits for it before it
    /// checks the next.
    pub regossip_after: Duration,
    pub vetting: Vetting,
    /// Beside the spec's `min_memory_bytes`, the trainer's own judgement of whether the
    /// job fits `hardware.memory_bytes`; `None` checks only the spec's figure.
    pub memory_fit: Option<MemoryFit>,
}

impl ProviderConfig {
    pub fn new(domain: EscrowDomain, hardware: Hardware, price_per_step: U256) -> Self {
        ProviderConfig {
            domain,
            hardware,
            price_per_step,
            bid_ttl_secs: 600,
            heartbeat_period: Duration::from_millis(100),
            regossip_after: REGOSSIP_AFTER,
            vetting: Vetting::default(),
            memory_fit: None,
        }
    }

    /// Why the job does not fit this provider's memory, if it does not.
    pub fn memory_misfit(&self, spec: &JobSpec) -> Option<String> {
        let have = self.hardware.memory_bytes;
        if have < spec.min_memory_bytes {
            return Some(format!(
                "the job asks for {} bytes of memory; this provider offers {have}",
                spec.min_memory_bytes
            ));
        }
        self.memory_fit.and_then(|fit| fit(spec, have).err())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Training {
    pub epoch: Epoch,
    pub from_step: Step,
    pub until_step: Step,
    checkpoint_interval: Step,
    pub last_step: Step,
    pub last_announced: Step,
    last_loss: f32,
    seq: u64,
    next_heartbeat: Time,
    /// The job's heartbeat topic, formatted once: a 256-bit id in decimal on every
    /// heartbeat was a tenth of the heartbeat's cost.
    heartbeat_topic: String,
    /// This epoch's announcements the escrow has not decided yet, by step.
    undecided: BTreeMap<Step, Undecided>,
    /// When the oldest of them goes out again: read on every heartbeat, kept here so that
    /// a heartbeat with nothing due does not visit the map.
    regossip_due: Option<Time>,
}

/// One of our announcements the escrow has not decided.
#[derive(Clone, Debug, PartialEq)]
struct Undecided {
    ann: CheckpointAnnounce,
    /// When it was last published.
    at: Time,
    /// How many times it went out again.
    resent: u32,
}

impl Undecided {
    /// When it goes out again if still undecided: `after`, doubled for each time it already
    /// did, at most `REGOSSIP_BACKOFF_MAX` times `after`.
    fn due(&self, after: Duration) -> Time {
        let factor = 1u32
            .checked_shl(self.resent)
            .unwrap_or(u32::MAX)
            .min(REGOSSIP_BACKOFF_MAX);
        self.at.saturating_add(after.saturating_mul(factor))
    }
}

impl Training {
    fn rearm_regossip(&mut self, after: Duration) {
        self.regossip_due = self.undecided.values().next().map(|u| u.due(after));
    }

    /// The trainer has reported a checkpoint step whose checkpoint is not ready yet: it is
    /// hashing the interval's states and adding the blobs.
    fn checkpointing(&self) -> bool {
        let s = self.last_step;
        s > self.last_announced
            && (s.is_multiple_of(self.checkpoint_interval.max(1)) || s == self.until_step)
    }
}

/// A provider hears of many more jobs than it trains, and keeps each for good (to refuse it
/// again), so the offer and the chain's terms are boxed: inline they made each record 944
/// bytes, most of a 10,000-node simulated day's memory, where the hot per-job fields (the
/// training state, the claims) fit in a quarter of that.
#[derive(Clone, Debug, Default)]
struct ProviderJob {
    offer: Option<Box<JobOffer>>,
    /// The offer's spec hash, computed once (CBOR and BLAKE3 of the spec): the offer is
    /// compared with the chain on every event of the job.
    offer_spec_hash: Hash,
    /// From `JobCreated` (and `CommitteeDrawn`).
    chain: Option<Box<ChainJob>>,
    chain_epoch: Epoch,
    bid_epochs: BTreeSet<Epoch>,
    training: Option<Training>,
    done: bool,
    /// This provider holds the job's current epoch on chain (what its stake reserves).
    holds_epoch: bool,
    /// The job's committee rejected this provider's work: it never bids on the job again.
    rejected_me: bool,
    /// The last rule that refused a bid, so each refusal is reported once, not per event.
    refused: Option<VetRule>,
    /// Our undecided checkpoints, by (epoch, step), kept past a fence for a late claim.
    claims: BTreeMap<(Epoch, Step), Claim>,
}

impl ProviderJob {
    /// Whether the offer we saw agrees with the chain (when we know both).
    fn offer_matches_chain(&self) -> bool {
        match (&self.offer, &self.chain) {
            (Some(o), Some(c)) => {
                self.offer_spec_hash == c.spec_hash
                    && o.client == c.client
                    && o.max_price_per_step == c.max_price_per_step
                    && c.drawn.as_ref().is_none_or(|d| d.committee == o.committee)
            }
            _ => true,
        }
    }

    fn steps(&self) -> Option<(Step, Step)> {
        match (&self.chain, &self.offer) {
            (Some(c), _) => Some((c.total_steps, c.checkpoint_interval)),
            (None, Some(o)) => Some((o.spec.total_steps, o.spec.checkpoint_interval)),
            (None, None) => None,
        }
    }

    fn spec_hash(&self) -> Option<Hash> {
        match (&self.chain, &self.offer) {
            (Some(c), _) => Some(c.spec_hash),
            (None, Some(_)) => Some(self.offer_spec_hash),
            (None, None) => None,
        }
    }
}

#[derive(Debug)]
pub struct Provider {
    config: ProviderConfig,
    key: SigningKey,
    jobs: BTreeMap<JobId, ProviderJob>,
    /// The jobs with an epoch in training, each with its next heartbeat: what timers concern.
    /// Offers pile up over a provider's life; walking them all on every heartbeat made it
    /// slower by the day, and the timers are read after every input, so they are kept here
    /// rather than looked up in `jobs`.
    training_jobs: BTreeMap<JobId, Time>,
    block_time: u64,
    /// Bids refused, by the rule that refused them (each job counted once per rule).
    refusals: BTreeMap<VetRule, u64>,
    /// Claims with a time set (due, or to be dropped), by that time.
    claim_timers: BTreeSet<(Time, JobId, Epoch, Step)>,
    /// Submitted claims by transaction id, so a failure drops the right one.
    claim_txs: BTreeMap<TxId, (JobId, Epoch, Step)>,
    next_tx: u64,
    /// The node's compute threads' total wait for a CPU, as the node last reported it.
    starved_ms: u64,
    outputs: VecDeque<Output>,
}

impl Provider {
    pub fn new(config: ProviderConfig, key: SigningKey) -> Self {
        Provider {
            config,
            key,
            jobs: BTreeMap::new(),
            training_jobs: BTreeMap::new(),
            block_time: 0,
            refusals: BTreeMap::new(),
            claim_timers: BTreeSet::new(),
            claim_txs: BTreeMap::new(),
            next_tx: CLAIM_TX_BASE,
            starved_ms: 0,
            outputs: VecDeque::new(),
        }
    }

    /// Accept votes for a checkpoint of ours: counted per committee member; a quorum sets
    /// the claim due (at once when the epoch is already over).
    fn on_vote(&mut self, now: Time, vote: &Vote) {
        let Some(job) = self.jobs.get_mut(&vote.job_id) else {
            return;
        };
        let Some(chain) = job.chain.as_ref() else {
            return;
        };
        if !vote.accept || !chain.committee().contains(&vote.verifier) {
            return;
        }
        let quorum = usize::from(chain.quorum);
        let live = job.holds_epoch && job.chain_epoch == vote.epoch;
        let Some(claim) = job.claims.get_mut(&(vote.epoch, vote.step)) else {
            return;
        };
        if claim.checkpoint_hash != vote.checkpoint_hash || claim.submitted {
            return;
        }
        claim.votes.insert(vote.verifier, vote.signature);
        if claim.votes.len() >= quorum && claim.due.is_none() {
            let due = if live {
                now.saturating_add(CLAIM_AFTER)
            } else {
                now
            };
            claim.due = Some(due);
            self.claim_timers
                .insert((due, vote.job_id, vote.epoch, vote.step));
        }
    }

    /// Drops the job's claims that `keep` refuses, with their timers and transactions: a
    /// dropped claim must not wake the driver for nothing, nor stay in memory.
    fn retain_claims(&mut self, job_id: JobId, mut keep: impl FnMut(Epoch, Step, &Claim) -> bool) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        let mut dropped = Vec::new();
        job.claims.retain(|(e, s), c| {
            let kept = keep(*e, *s, c);
            if !kept {
                dropped.push((*e, *s));
            }
            kept
        });
        if dropped.is_empty() {
            return;
        }
        let gone = |j: &JobId, e: &Epoch, s: &Step| *j == job_id && dropped.contains(&(*e, *s));
        self.claim_timers.retain(|(_, j, e, s)| !gone(j, e, s));
        self.claim_txs.retain(|_, (j, e, s)| !gone(j, e, s));
    }

    /// Submits the claims that are due and drops the ones kept too long.
    fn on_claim_timers(&mut self, now: Time) {
        while let Some(&(at, job_id, epoch, step)) = self.claim_timers.first() {
            if at > now {
                break;
            }
            self.claim_timers.pop_first();
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            let Some(claim) = job.claims.get_mut(&(epoch, step)) else {
                continue;
            };
            // Past the decision window the escrow refuses it: not worth the gas.
            if claim.keep_until.is_some_and(|k| k <= now) {
                self.retain_claims(job_id, |e, s, _| (e, s) != (epoch, step));
                continue;
            }
            if claim.submitted || claim.due.is_none_or(|d| d > now) {
                continue;
            }
            claim.submitted = true;
            // BTreeMap order: ascending signer address.
            let sigs = claim.votes.values().copied().collect();
            let late = !(job.holds_epoch && job.chain_epoch == epoch);
            let id = TxId(self.next_tx);
            self.next_tx += 1;
            self.claim_txs.insert(id, (job_id, epoch, step));
            self.outputs.push_back(Output::SubmitTx {
                id,
                tx: ChainTx::AcceptCheckpoint {
                    job_id,
                    epoch,
                    step,
                    checkpoint_hash: claim.checkpoint_hash,
                    sigs,
                },
            });
            self.outputs
                .push_back(Output::Notice(Notice::ClaimSubmitted {
                    job_id,
                    epoch,
                    step,
                    late,
                }));
        }
    }

    /// The epoch ended: its claims are kept for a late accept if the client ended it (the
    /// escrow's decision window), and made due at once if they have a quorum; otherwise
    /// nothing of it can be paid any more.
    fn end_claims(&mut self, now: Time, job_id: JobId, epoch: Epoch, reason: EpochEndReason) {
        if !reason.by_client() {
            self.retain_claims(job_id, |e, _, _| e != epoch);
            return;
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        let keep_until = now.saturating_add(CLAIM_KEPT_FOR);
        for ((e, step), claim) in job.claims.iter_mut().filter(|((e, _), _)| *e == epoch) {
            claim.keep_until = Some(keep_until);
            self.claim_timers.insert((keep_until, job_id, *e, *step));
            if claim.due.is_some_and(|d| d > now) {
                claim.due = Some(now);
                self.claim_timers.insert((now, job_id, *e, *step));
            }
        }
    }

    pub fn address(&self) -> Address {
        self.key.address()
    }

    /// Bids this provider refused to make, by rule: what `gpuchain provider status` shows.
    pub fn refusals(&self) -> &BTreeMap<VetRule, u64> {
        &self.refusals
    }

    /// The epoch this provider is training, if any.
    pub fn training(&self, job_id: JobId) -> Option<&Training> {
        self.jobs.get(&job_id).and_then(|j| j.training.as_ref())
    }

    fn busy(&self) -> bool {
        !self.training_jobs.is_empty()
    }

    /// Epochs this provider holds on chain now, across jobs.
    fn live_epochs(&self) -> u64 {
        self.jobs.values().filter(|j| j.holds_epoch).count() as u64
    }

    /// The first rule the job breaks, if any (the vetting of its terms, then the fit), with
    /// what a refusal notice says of it: the figures for memory, which cost a model build to
    /// work out, so they are worked out once.
    fn vet(
        &self,
        job: &ProviderJob,
        chain: &ChainJob,
        spec: &JobSpec,
    ) -> Option<(VetRule, String)> {
        let v = &self.config.vetting;
        let me = self.key.address();
        let committee = chain.committee();
        let n = committee.len();
        let rule = if job.rejected_me {
            VetRule::RejectedBefore
        } else if !v.tokens.is_empty() && !v.tokens.contains(&chain.token) {
            VetRule::Token
        } else if n < MIN_VERIFIERS || !is_strict_majority(chain.quorum, n) {
            VetRule::Quorum
        } else if committee.contains(&chain.client) {
            VetRule::ClientIsVerifier
        } else if committee.contains(&me) {
            VetRule::ProviderIsVerifier
        } else if chain.drawn.as_ref().is_none_or(|d| d.terms != d.announced) {
            VetRule::Terms
        } else if chain.deadline.saturating_sub(self.block_time) > v.max_duration_secs {
            VetRule::Deadline
        } else if chain.grace > v.max_grace_secs {
            VetRule::Grace
        } else if v.stake.is_some_and(|s| {
            s.bonded < s.min_stake * U256::from(self.live_epochs() - u64::from(job.holds_epoch) + 1)
        }) {
            VetRule::Stake
        } else if self.config.price_per_step > chain.max_price_per_step {
            VetRule::Price
        } else if spec.check().is_err() {
            VetRule::Spec
        } else if let Some(detail) = self.config.memory_misfit(spec) {
            return Some((VetRule::Memory, detail));
        } else {
            return None;
        };
        Some((rule, String::new()))
    }

    /// Bids for `epoch` if the job is one we want, we are free, and we have not bid already.
    fn maybe_bid(&mut self, job_id: JobId, epoch: Epoch) {
        let busy = self.busy();
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        let Some(offer) = job.offer.as_ref() else {
            return;
        };
        // Only chain-confirmed jobs with a drawn committee get bids: offers are free to forge,
        // and there are no terms to sign before the draw.
        let Some(chain) = job.chain.as_ref().filter(|c| c.drawn.is_some()) else {
            return;
        };
        if busy
            || job.done
            || epoch <= job.chain_epoch
            || job.bid_epochs.contains(&epoch)
            || !job.offer_matches_chain()
        {
            return;
        }
        if let Some((rule, detail)) = self.vet(job, chain, &offer.spec) {
            if job.refused != Some(rule) {
                *self.refusals.entry(rule).or_default() += 1;
                self.outputs.push_back(Output::Notice(Notice::BidRefused {
                    job_id,
                    rule,
                    detail,
                }));
            }
            if let Some(job) = self.jobs.get_mut(&job_id) {
                job.refused = Some(rule);
            }
            return;
        }
        let terms = chain.drawn.as_ref().map(|d| d.terms).unwrap_or_default();
        let bid = Bid {
            job_id,
            terms,
            epoch,
            provider: self.key.address(),
            price_per_step: self.config.price_per_step,
            expiry: self.block_time.saturating_add(self.config.bid_ttl_secs),
            hardware: self.config.hardware,
            signature: Sig65::ZERO,
        }
        .sign(&self.config.domain, &self.key);
        let mut spec_hash = None;
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.bid_epochs.insert(epoch);
            job.refused = None;
            spec_hash = Some(job.offer_spec_hash);
        }
        self.outputs.push_back(Output::Publish {
            topic: job_topic(job_id),
            message: Message::Bid(bid),
        });
        if let Some(spec_hash) = spec_hash {
            self.outputs
                .push_back(Output::PrepareJob { job_id, spec_hash });
        }
    }

    fn stop(&mut self, job_id: JobId, fenced: bool) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        let Some(t) = job.training.take() else { return };
        self.training_jobs.remove(&job_id);
        self.outputs.push_back(Output::StopTraining {
            job_id,
            epoch: t.epoch,
        });
        if fenced {
            self.outputs.push_back(Output::Notice(Notice::Fenced {
                job_id,
                epoch: t.epoch,
            }));
        }
    }

    fn heartbeat(&mut self, job_id: JobId, now: Time) {
        let period = self.config.heartbeat_period;
        let regossip_after = self.config.regossip_after;
        let Some(t) = self.jobs.get_mut(&job_id).and_then(|j| j.training.as_mut()) else {
            return;
        };
        // Checked on the heartbeat's timer, which runs while an epoch is live anyway. Only the
        // oldest: the escrow decides a job's checkpoints in step order, so it is the one the
        // committee and the client wait on, and a later one a receiver missed (or ignored
        // with its queue full) becomes the oldest in its turn. Sending every undecided one
        // each time made a provider ahead of a slow committee publish its whole backlog,
        // 16 KB each, every 10 s.
        if t.regossip_due.is_some_and(|due| now >= due)
            && let Some(u) = t.undecided.values_mut().next()
        {
            u.at = now;
            u.resent = u.resent.saturating_add(1);
            self.outputs.push_back(Output::Publish {
                topic: job_topic(job_id),
                message: Message::CheckpointAnnounce(u.ann.clone()),
            });
            t.rearm_regossip(regossip_after);
        }
        t.seq += 1;
        t.next_heartbeat = now.saturating_add(period);
        self.training_jobs.insert(job_id, t.next_heartbeat);
        let hb = Heartbeat {
            job_id,
            epoch: t.epoch,
            provider: Address::ZERO,
            seq: t.seq,
            step: t.last_step,
            loss: t.last_loss,
            checkpointing: t.checkpointing(),
            starved_ms: self.starved_ms,
            signature: Sig65::ZERO,
        }
        .sign(&self.key);
        // On the job's heartbeat topic, which only its client subscribes to; publishing
        // needs no subscription of our own.
        self.outputs.push_back(Output::Publish {
            topic: t.heartbeat_topic.clone(),
            message: Message::Heartbeat(hb),
        });
    }

    fn on_offer(&mut self, offer: &JobOffer) -> Verdict {
        // Counted only for an offer of a job we do not know yet: the count walks every job
        // this provider has ever heard of.
        let unconfirmed = || self.jobs.values().filter(|j| j.chain.is_none()).count();
        if !self.jobs.contains_key(&offer.job_id) && unconfirmed() >= MAX_UNCONFIRMED_OFFERS {
            return Verdict::Ignore(IgnoreReason::Overloaded);
        }
        let job = self.jobs.entry(offer.job_id).or_default();
        if offer.next_epoch <= job.chain_epoch {
            return Verdict::Ignore(IgnoreReason::StaleEpoch);
        }
        let spec_hash = offer.spec.spec_hash();
        if let Some(c) = &job.chain
            && (spec_hash != c.spec_hash
                || offer.client != c.client
                || c.drawn
                    .as_ref()
                    .is_some_and(|d| d.committee != offer.committee))
        {
            return Verdict::Reject(RejectReason::OfferMismatch);
        }
        job.offer = Some(Box::new(offer.clone()));
        job.offer_spec_hash = spec_hash;
        self.maybe_bid(offer.job_id, offer.next_epoch);
        Verdict::Accept
    }

    fn on_chain(&mut self, now: Time, block_time: u64, event: ChainEvent) {
        self.block_time = self.block_time.max(block_time);
        let me = self.key.address();
        let job_id = event.job_id();
        match event {
            ChainEvent::JobCreated {
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
            } => {
                let job = self.jobs.entry(job_id).or_default();
                if job.chain.is_some() {
                    return;
                }
                job.chain = Some(Box::new(ChainJob {
                    spec_hash,
                    client,
                    token,
                    budget,
                    max_price_per_step,
                    total_steps,
                    checkpoint_interval,
                    quorum,
                    verifier_fee,
                    deadline,
                    grace,
                    drawn: None,
                }));
                if !job.offer_matches_chain() {
                    job.offer = None;
                }
            }
            ChainEvent::CommitteeSeedMoved { .. } => {}
            ChainEvent::CommitteeDrawn {
                committee, terms, ..
            } => {
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                let Some(chain) = job.chain.as_mut().filter(|c| c.drawn.is_none()) else {
                    return;
                };
                chain.drawn = Some(Drawn {
                    terms: chain.terms_with(&committee),
                    announced: terms,
                    committee,
                });
                // An offer that arrived before the draw is bid on now.
                if !job.offer_matches_chain() {
                    job.offer = None;
                }
                if let Some(next) = job.offer.as_ref().map(|o| o.next_epoch) {
                    self.maybe_bid(job_id, next);
                }
            }
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                start_step,
                start_checkpoint,
                ..
            } => {
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    if provider == me {
                        self.outputs
                            .push_back(Output::Notice(Notice::UnknownJob { job_id }));
                    }
                    return;
                };
                if epoch <= job.chain_epoch {
                    return;
                }
                job.chain_epoch = epoch;
                job.holds_epoch = provider == me;
                if job.training.as_ref().is_some_and(|t| t.epoch < epoch) {
                    self.stop(job_id, true);
                }
                if provider != me {
                    self.maybe_bid(job_id, epoch.saturating_add(1));
                    return;
                }
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                let (Some((total, interval)), Some(spec_hash)) = (job.steps(), job.spec_hash())
                else {
                    self.outputs
                        .push_back(Output::Notice(Notice::UnknownJob { job_id }));
                    return;
                };
                self.training_jobs.insert(job_id, now);
                job.training = Some(Training {
                    epoch,
                    from_step: start_step,
                    until_step: total,
                    checkpoint_interval: interval,
                    last_step: start_step,
                    last_announced: start_step,
                    last_loss: f32::NAN,
                    seq: 0,
                    next_heartbeat: now,
                    heartbeat_topic: heartbeat_topic(job_id),
                    undecided: BTreeMap::new(),
                    regossip_due: None,
                });
                self.outputs.push_back(Output::Subscribe {
                    topic: job_topic(job_id),
                });
                self.outputs.push_back(Output::StartTraining {
                    job_id,
                    epoch,
                    spec_hash,
                    from_step: start_step,
                    from_checkpoint: start_checkpoint,
                    until_step: total,
                    checkpoint_interval: interval,
                });
                // Heartbeat at once: the client's detector starts counting at assignment.
                self.heartbeat(job_id, now);
            }
            ChainEvent::EpochEnded { epoch, reason, .. } => {
                self.end_claims(now, job_id, epoch, reason);
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                if epoch == job.chain_epoch {
                    job.holds_epoch = false;
                }
                if job.training.as_ref().is_some_and(|t| t.epoch == epoch) {
                    // A completed (or expired) job ends the epoch without fencing anyone.
                    let fenced =
                        !matches!(reason, EpochEndReason::Completed | EpochEndReason::Expired);
                    self.stop(job_id, fenced);
                }
                self.maybe_bid(job_id, epoch.saturating_add(1));
            }
            ChainEvent::CheckpointRejected {
                epoch,
                provider,
                slashed,
                ..
            } => {
                let Some(job) = self.jobs.get_mut(&job_id) else {
                    return;
                };
                if provider != me {
                    return;
                }
                // Whatever the reason, a job whose committee rejected our work once can do it
                // again: bidding there only lends them our stake.
                job.rejected_me = true;
                let training = job.training.as_ref().is_some_and(|t| t.epoch == epoch);
                self.retain_claims(job_id, |e, _, _| e != epoch);
                if let Some(st) = self.config.vetting.stake.as_mut() {
                    st.bonded = st.bonded.saturating_sub(slashed);
                }
                if training {
                    self.stop(job_id, true);
                }
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                provider,
                ..
            } => {
                // Whoever's it was, nothing at or before the new head can be paid again, and
                // an epoch the client ended can be paid only from the head it ended at.
                self.retain_claims(job_id, |_, s, c| s > step && c.keep_until.is_none());
                if provider == me
                    && let Some(t) = self
                        .jobs
                        .get_mut(&job_id)
                        .and_then(|j| j.training.as_mut())
                        .filter(|t| t.epoch == epoch)
                {
                    t.undecided.retain(|s, _| *s > step);
                    // The committee turns to the next one only now: its wait starts here,
                    // or a committee slower than our interval would be sent each one again
                    // the moment it came up.
                    if let Some(u) = t.undecided.values_mut().next() {
                        u.at = u.at.max(now);
                    }
                    t.rearm_regossip(self.config.regossip_after);
                }
            }
            ChainEvent::JobSettled { .. } => {}
            ChainEvent::JobCompleted { .. } | ChainEvent::JobExpired { .. } => {
                self.stop(job_id, false);
                self.retain_claims(job_id, |_, _, _| false);
                if let Some(job) = self.jobs.get_mut(&job_id) {
                    job.done = true;
                    // Kept only to refuse the job from now on: its offer (with the spec) is
                    // not needed again.
                    job.offer = None;
                    self.outputs.push_back(Output::Unsubscribe {
                        topic: job_topic(job_id),
                    });
                }
            }
        }
    }

    fn on_checkpoint_ready(
        &mut self,
        now: Time,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        state_hashes: Vec<Hash>,
    ) {
        let Some(t) = self.jobs.get_mut(&job_id).and_then(|j| j.training.as_mut()) else {
            return;
        };
        if t.epoch != epoch || step <= t.last_announced {
            return;
        }
        // One hash per step of `last_announced..=step`, or announcing it would only get us
        // rejected: the trainer must be fixed. The root is computed from these very hashes
        // below, so the count is all of `commitment_is_consistent` that can fail here (it
        // would hash the interval a second time).
        let expected = step
            .checked_sub(t.last_announced)
            .and_then(|d| d.checked_add(1));
        if u64::try_from(state_hashes.len()).ok() != expected {
            self.outputs
                .push_back(Output::Notice(Notice::TrainerInconsistent {
                    job_id,
                    epoch,
                    step,
                }));
            return;
        }
        let ann = CheckpointAnnounce {
            job_id,
            epoch,
            provider: Address::ZERO,
            parent_step: t.last_announced,
            step,
            checkpoint_hash,
            state_root: state_root(&state_hashes),
            state_hashes: state_hashes.into(),
            anchor_steps: crate::anchors::anchor_steps(t.last_announced, step),
            signature: Sig65::ZERO,
        }
        .sign(&self.key);
        t.last_announced = step;
        t.last_step = t.last_step.max(step);
        t.undecided.insert(
            step,
            Undecided {
                ann: ann.clone(),
                at: now,
                resent: 0,
            },
        );
        t.rearm_regossip(self.config.regossip_after);
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.claims.insert(
                (epoch, step),
                Claim {
                    checkpoint_hash,
                    ..Claim::default()
                },
            );
        }
        self.outputs.push_back(Output::Publish {
            topic: job_topic(job_id),
            message: Message::CheckpointAnnounce(ann),
        });
    }
}

impl StateMachine for Provider {
    fn checks_under(&self) -> (EscrowDomain, Scheme) {
        (self.config.domain, self.key.scheme())
    }

    fn on_checked(&mut self, now: Time, msg: &Message, _: Passed) -> Verdict {
        match msg {
            Message::JobOffer(o) => self.on_offer(o),
            // Counted for our own claims only; whether a vote is worth relaying is the
            // client's and the verifiers' business.
            Message::Vote(v) => {
                self.on_vote(now, v);
                Verdict::Accept
            }
            _ => Verdict::Accept,
        }
    }

    fn handle_input(&mut self, now: Time, input: Input) {
        match input {
            Input::Chain { block_time, event } => self.on_chain(now, block_time, event),
            Input::StepDone {
                job_id,
                epoch,
                step,
                loss,
            } => {
                if let Some(t) = self.jobs.get_mut(&job_id).and_then(|j| j.training.as_mut()) {
                    // A result from an epoch we were fenced out of must not leak into the new one.
                    if t.epoch == epoch && step > t.last_step {
                        t.last_step = step;
                        t.last_loss = loss;
                    }
                }
            }
            Input::CheckpointReady {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                state_hashes,
            } => self.on_checkpoint_ready(now, job_id, epoch, step, checkpoint_hash, state_hashes),
            Input::TrainingFailed { job_id, epoch, .. } => {
                // Going silent is the honest signal: the client's detector reassigns.
                if self.training(job_id).is_some_and(|t| t.epoch == epoch) {
                    self.stop(job_id, false);
                }
            }
            Input::StakeChanged { bonded, min_stake } => {
                let budget = Some(StakeBudget { bonded, min_stake });
                if self.config.vetting.stake != budget {
                    self.config.vetting.stake = budget;
                    // Offers refused for want of stake may be bid on now.
                    let pending: Vec<(JobId, Epoch)> = self
                        .jobs
                        .iter()
                        .filter(|(_, j)| j.refused == Some(VetRule::Stake))
                        .filter_map(|(id, j)| j.offer.as_ref().map(|o| (*id, o.next_epoch)))
                        .collect();
                    for (job_id, epoch) in pending {
                        self.maybe_bid(job_id, epoch);
                    }
                }
            }
            Input::TxFailed { id, .. } => {
                // Someone else landed it, or the window is over: either way it is not ours to
                // send again.
                if let Some((job_id, epoch, step)) = self.claim_txs.remove(&id) {
                    self.retain_claims(job_id, |e, s, _| (e, s) != (epoch, step));
                }
            }
            Input::ConnectionClosed { .. }
            | Input::PathRtt { .. }
            | Input::BlobFetched { .. }
            | Input::QualityResult { .. }
            | Input::SpotCheckResult { .. } => {}
            Input::ComputeStarved { total_ms } => {
                self.starved_ms = self.starved_ms.max(total_ms);
            }
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        // Each due job once, in job order, walking on from the last one: no list of the due
        // jobs is built on this hot path (a heartbeat moves its job's time past `now`).
        let due_after = |jobs: &BTreeMap<JobId, Time>, from: Bound<JobId>| {
            jobs.range((from, Bound::Unbounded))
                .find(|(_, at)| **at <= now)
                .map(|(id, _)| *id)
        };
        let mut next = due_after(&self.training_jobs, Bound::Unbounded);
        while let Some(job_id) = next {
            self.heartbeat(job_id, now);
            next = due_after(&self.training_jobs, Bound::Excluded(job_id));
        }
        self.on_claim_timers(now);
    }

    fn poll_timeout(&self) -> Option<Time> {
        let claim = self.claim_timers.first().map(|(at, ..)| *at);
        let heartbeat = self.training_jobs.values().min().copied();
        match (claim, heartbeat) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }
}
