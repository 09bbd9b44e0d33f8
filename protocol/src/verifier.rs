//! The verifier: for each job whose committee the escrow drew it onto (`CommitteeDrawn`),
//! checks every announced checkpoint in step order
//! (fetch, quality test against the previous accepted or verified checkpoint, re-execution spot
//! check of seeded random steps) and gossips an EIP-712 vote.
//!
//! ```text
//!  Announce ──queued──> Fetching ──BlobFetched ok──> Testing(quality ∥ spot check)
//!     ^                    │ failed × fetch_retry.attempts      │ both pass   │ either fails
//!     │                    └──────────> vote reject <───────────┼─────────────┘
//!     └──── next queued announce <──── vote accept (head moves) ┘
//!  ProviderAssigned / EpochEnded / CheckpointRejected: drop the queue, head = chain's accepted
//! ```
//!
//! A failed fetch is tried again after the policy's backoff, on this machine's timer: the
//! driver fetches once per `FetchBlob`, so the number of tries is decided here alone.
//!
//! Only the drawn committee's votes count; the verifier learns its seats from
//! `CommitteeDrawn`, never from an offer. Its votes are published again until the escrow acts
//! on them; an accept of an epoch the client ended keeps going for the escrow's decision
//! window (the provider's late claim needs a quorum of it) unless the job's head moves.
//!
//! Its fees reach its balance only when a completed job is settled. The client settles at
//! once; if the job is still unsettled [`SETTLE_FALLBACK_AFTER`] after its completion, each
//! member settles it itself, so a client that never settles cannot hold the committee's
//! fees back.
//!
//! Over 600 lines because the check pipeline, the vote's life and the chain's resets share
//! one per-job record and read best together.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use alloy_primitives::Address;

use crate::anchors::anchor_before;
use crate::chain::{ChainEvent, ChainTx, TxId};
use crate::eip712::EscrowDomain;
use crate::io::{Input, Notice, Output, Passed, SpotStep, StateMachine};
use crate::messages::{CheckpointAnnounce, JobOffer, Vote};
use crate::retry::{AfterFailure, RetryPolicy, Retrying};
use crate::signing::{Scheme, Sig65, SigningKey};
use crate::time::Time;
use crate::topics::job_topic;
use crate::types::{Epoch, Hash, JobId, Step};
use crate::validation::{IgnoreReason, RejectReason, Verdict};
use crate::wire::Message;

/// Announcements held while an earlier checkpoint is being verified; more is a flood.
const MAX_QUEUED: usize = 64;

/// How long after a job it sits on completes a member waits for someone else (the client)
/// to settle it before settling it itself: long enough that the client's transaction is
/// normally first, so settle is not paid for twice in gas.
pub const SETTLE_FALLBACK_AFTER: Duration = Duration::from_secs(30);

/// The verifier's transaction ids start here, apart from the client's and the provider's on
/// a node running several roles.
const SETTLE_TX_BASE: u64 = 3 << 61;

#[derive(Clone, Debug)]
pub struct VerifierConfig {
    pub domain: EscrowDomain,
    /// Seeds the choice of spot-checked steps: unpredictable to providers, replayable in the sim.
    pub seed: u64,
    /// Tries to fetch a checkpoint before voting it down: a provider that cannot serve its
    /// checkpoint cannot be paid for it.
    pub fetch_retry: RetryPolicy,
    /// Spot-checked steps per checkpoint when the spec (from the offer) is unknown.
    pub default_spot_checks: u32,
    /// A vote the escrow has not acted on this long after it was published is published
    /// again: a quorum short of one lost vote would otherwise wait for it until the
    /// deadline.
    pub regossip_after: Duration,
}

impl VerifierConfig {
    pub fn new(domain: EscrowDomain, seed: u64) -> Self {
        VerifierConfig {
            domain,
            seed,
            fetch_retry: crate::retry::BLOB_FETCH,
            default_spot_checks: 2,
            regossip_after: crate::provider::REGOSSIP_AFTER,
        }
    }
}

#[derive(Clone, Debug)]
struct Check {
    ann: CheckpointAnnounce,
    /// The checkpoint's fetch, tried again on failure.
    fetch: Retrying,
    quality: Option<bool>,
    spot: Option<bool>,
}

#[derive(Clone, Debug)]
struct VerifierJob {
    spec_hash: Hash,
    total_steps: Step,
    interval: Step,
    /// The drawn committee: only its members' votes count.
    committee: Vec<Address>,
    spot_checks: u32,
    epoch: Epoch,
    provider: Option<Address>,
    head_step: Step,
    head_hash: Hash,
    queue: BTreeMap<Step, CheckpointAnnounce>,
    active: Option<Check>,
    voted: BTreeSet<(Epoch, Step, Hash)>,
    /// Our votes the escrow has not acted on yet, by (epoch, step).
    unsettled: BTreeMap<(Epoch, Step), Unsettled>,
    /// The one live entry of this job in `Verifier::regossips`.
    regossip_at: Option<Time>,
}

impl VerifierJob {
    fn reset_to_chain(&mut self, step: Step, hash: Hash) {
        self.head_step = step;
        self.head_hash = hash;
        self.queue.clear();
        self.active = None;
    }
}

/// A vote of ours the escrow has not acted on.
#[derive(Clone, Debug)]
struct Unsettled {
    vote: Vote,
    /// When it was last published.
    at: Time,
    /// Set when the client ended the vote's epoch: an accept then stays payable for the
    /// escrow's decision window (the provider's late claim needs a quorum of it), so it is
    /// published again until this time, unless the job's head moves first.
    until: Option<Time>,
}

/// What a `JobCreated` says that a seat needs, kept until the job's committee is drawn.
#[derive(Clone, Copy, Debug)]
struct Created {
    spec_hash: Hash,
    total_steps: Step,
    interval: Step,
}

#[derive(Debug)]
pub struct Verifier {
    config: VerifierConfig,
    key: SigningKey,
    /// Jobs created and not yet drawn: whether this verifier gets a seat is not known yet.
    drawing: BTreeMap<JobId, Created>,
    jobs: BTreeMap<JobId, VerifierJob>,
    /// Fetches to try again, by due time; stale entries (the check moved on) are skipped.
    retries: BTreeSet<(Time, JobId)>,
    /// When each job's unsettled votes are next published again; stale entries (the votes
    /// settled since) are skipped.
    regossips: BTreeSet<(Time, JobId)>,
    /// Completed jobs of ours not yet settled, by when we settle them ourselves.
    settles: BTreeMap<JobId, Time>,
    next_tx: u64,
    outputs: VecDeque<Output>,
}

/// splitmix64: a tiny, well-mixed generator; enough to choose steps, and dependency-free.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Distinct steps in `parent+1 ..= step`, chosen from the seed and the checkpoint's identity.
pub fn spot_check_steps(seed: u64, ann: &CheckpointAnnounce, count: u32) -> Vec<Step> {
    let span = ann.step.saturating_sub(ann.parent_step);
    let count = u64::from(count).min(span);
    let mut mix = blake3::Hasher::new();
    mix.update(&seed.to_le_bytes());
    mix.update(&ann.job_id.to_be_bytes::<32>());
    mix.update(&ann.epoch.to_le_bytes());
    mix.update(&ann.step.to_le_bytes());
    mix.update(ann.checkpoint_hash.as_slice());
    let digest = mix.finalize();
    let mut state = u64::from_le_bytes(digest.as_bytes()[..8].try_into().unwrap_or([0; 8]));
    let mut picked = BTreeSet::new();
    while (picked.len() as u64) < count {
        picked.insert(ann.parent_step + 1 + splitmix64(&mut state) % span);
    }
    picked.into_iter().collect()
}

/// The runner's work for each sampled step: replay from the nearest anchor at or before
/// `step - 1`, checking every committed hash on the way. Validation made the anchors the
/// rule's and the hashes one per step, so nothing here is missing for a checked announce.
pub fn spot_steps(ann: &CheckpointAnnounce, sampled: Vec<Step>) -> Vec<SpotStep> {
    sampled
        .into_iter()
        .filter_map(|s| {
            let anchor_step = anchor_before(&ann.anchor_steps, s)?;
            let from = usize::try_from(anchor_step.checked_sub(ann.parent_step)?).ok()?;
            let to = usize::try_from(s.checked_sub(ann.parent_step)?).ok()?;
            Some(SpotStep {
                step: s,
                anchor_step,
                hashes: ann.state_hashes.get(from..=to)?.to_vec(),
            })
        })
        .collect()
}

impl Verifier {
    pub fn new(config: VerifierConfig, key: SigningKey) -> Self {
        Verifier {
            config,
            key,
            drawing: BTreeMap::new(),
            jobs: BTreeMap::new(),
            retries: BTreeSet::new(),
            regossips: BTreeSet::new(),
            settles: BTreeMap::new(),
            next_tx: SETTLE_TX_BASE,
            outputs: VecDeque::new(),
        }
    }

    pub fn address(&self) -> Address {
        self.key.address()
    }

    /// The last checkpoint this verifier builds on: (step, hash).
    pub fn head(&self, job_id: JobId) -> Option<(Step, Hash)> {
        self.jobs.get(&job_id).map(|j| (j.head_step, j.head_hash))
    }

    fn advance(&mut self, job_id: JobId) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        if job.active.is_some() {
            return;
        }
        let head = job.head_step;
        job.queue
            .retain(|step, ann| *step > head && ann.parent_step >= head);
        let Some(step) = job
            .queue
            .iter()
            .find(|(_, a)| a.parent_step == head)
            .map(|(s, _)| *s)
        else {
            return;
        };
        let Some(ann) = job.queue.remove(&step) else {
            return;
        };
        let fetch = Output::FetchBlob {
            hash: ann.checkpoint_hash,
            from: Some(ann.provider),
        };
        job.active = Some(Check {
            ann,
            fetch: Retrying::default(),
            quality: None,
            spot: None,
        });
        self.outputs.push_back(fetch);
    }

    fn vote(&mut self, now: Time, job_id: JobId, accept: bool) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        let Some(check) = job.active.take() else {
            return;
        };
        let ann = check.ann;
        job.voted.insert((ann.epoch, ann.step, ann.checkpoint_hash));
        if accept {
            job.head_step = ann.step;
            job.head_hash = ann.checkpoint_hash;
        } else {
            // The escrow will end this epoch; nothing built on the bad checkpoint can pass.
            job.queue.clear();
        }
        let vote = Vote {
            job_id,
            epoch: ann.epoch,
            step: ann.step,
            checkpoint_hash: ann.checkpoint_hash,
            accept,
            verifier: Address::ZERO,
            signature: Sig65::ZERO,
        }
        .sign(&self.config.domain, &self.key);
        job.unsettled.insert(
            (ann.epoch, ann.step),
            Unsettled {
                vote: vote.clone(),
                at: now,
                until: None,
            },
        );
        if job.regossip_at.is_none() {
            let due = now.saturating_add(self.config.regossip_after);
            job.regossip_at = Some(due);
            self.regossips.insert((due, job_id));
        }
        self.outputs.push_back(Output::Publish {
            topic: job_topic(job_id),
            message: Message::Vote(vote),
        });
        self.outputs.push_back(Output::Notice(Notice::Voted {
            job_id,
            epoch: ann.epoch,
            step: ann.step,
            accept,
        }));
        if accept {
            self.advance(job_id);
        }
    }

    fn decide(&mut self, now: Time, job_id: JobId) {
        let Some(check) = self.jobs.get(&job_id).and_then(|j| j.active.as_ref()) else {
            return;
        };
        match (check.quality, check.spot) {
            (Some(false), _) | (_, Some(false)) => self.vote(now, job_id, false),
            (Some(true), Some(true)) => self.vote(now, job_id, true),
            _ => {}
        }
    }

    /// The active check for exactly this checkpoint, if results are for it.
    fn active_for(
        &mut self,
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        hash: Hash,
    ) -> Option<&mut Check> {
        let check = self.jobs.get_mut(&job_id)?.active.as_mut()?;
        let a = &check.ann;
        (a.epoch == epoch && a.step == step && a.checkpoint_hash == hash).then_some(check)
    }

    fn on_blob(&mut self, now: Time, hash: Hash, ok: bool) {
        let retry = self.config.fetch_retry;
        let ids: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.active.as_ref().is_some_and(|c| {
                    c.ann.checkpoint_hash == hash && c.quality.is_none() && c.spot.is_none()
                })
            })
            .map(|(id, _)| *id)
            .collect();
        for job_id in ids {
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            let (head_step, head_hash, count, spec_hash) =
                (job.head_step, job.head_hash, job.spot_checks, job.spec_hash);
            let Some(check) = job.active.as_mut() else {
                continue;
            };
            if !ok {
                match check.fetch.failed(now, &retry) {
                    AfterFailure::RetryAt(due) => {
                        self.retries.insert((due, job_id));
                    }
                    AfterFailure::AlreadyArmed => {}
                    // A provider that cannot serve its checkpoint cannot be paid for it.
                    AfterFailure::GiveUp => self.vote(now, job_id, false),
                }
                continue;
            }
            // Fetched (perhaps for another role of this node): no retry is wanted any more.
            check.fetch.cancel();
            // Read in place: a copy would be the interval's state hashes again.
            let ann = &check.ann;
            let steps = spot_steps(ann, spot_check_steps(self.config.seed, ann, count));
            // An announce without state hashes commits to nothing a checkpoint can match.
            let committed_state = ann.state_hashes.last().copied().unwrap_or(Hash::ZERO);
            self.outputs.push_back(Output::RunQualityTest {
                job_id,
                spec_hash,
                epoch: ann.epoch,
                step: ann.step,
                checkpoint_hash: hash,
                committed_state,
                baseline: head_hash,
                baseline_step: head_step,
            });
            self.outputs.push_back(Output::RunSpotCheck {
                job_id,
                spec_hash,
                epoch: ann.epoch,
                step: ann.step,
                checkpoint_hash: hash,
                provider: ann.provider,
                parent_step: ann.parent_step,
                parent_checkpoint: head_hash,
                steps,
            });
        }
    }

    fn on_announce(&mut self, ann: &CheckpointAnnounce) -> Verdict {
        let job_id = ann.job_id;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Verdict::Accept;
        };
        if ann.epoch < job.epoch {
            return Verdict::Ignore(IgnoreReason::StaleEpoch);
        }
        if ann.epoch > job.epoch {
            return Verdict::Ignore(IgnoreReason::FutureEpoch);
        }
        match job.provider {
            None => return Verdict::Ignore(IgnoreReason::StaleEpoch),
            Some(p) if p != ann.provider => {
                return Verdict::Reject(RejectReason::NotAssignedProvider);
            }
            Some(_) => {}
        }
        let on_grid = ann.step.is_multiple_of(job.interval) || ann.step == job.total_steps;
        if ann.step > job.total_steps || !on_grid {
            return Verdict::Reject(RejectReason::InvalidCheckpointStep);
        }
        let key = (ann.epoch, ann.step, ann.checkpoint_hash);
        let is_active = job
            .active
            .as_ref()
            .is_some_and(|c| (c.ann.epoch, c.ann.step, c.ann.checkpoint_hash) == key);
        if job.voted.contains(&key)
            || is_active
            || job.queue.get(&ann.step).is_some_and(|q| q == ann)
        {
            return Verdict::Ignore(IgnoreReason::Duplicate);
        }
        if ann.step <= job.head_step {
            return Verdict::Ignore(IgnoreReason::AlreadyDecided);
        }
        if job.queue.len() >= MAX_QUEUED && !job.queue.contains_key(&ann.step) {
            return Verdict::Ignore(IgnoreReason::Overloaded);
        }
        // First announcement for a step wins: a provider cannot swap a checkpoint mid-check.
        job.queue.entry(ann.step).or_insert_with(|| ann.clone());
        self.advance(job_id);
        Verdict::Accept
    }

    fn on_offer(&mut self, offer: &JobOffer) -> Verdict {
        if let Some(job) = self.jobs.get_mut(&offer.job_id)
            && offer.spec.spec_hash() == job.spec_hash
        {
            job.spot_checks = offer.spec.quality.spot_check_steps;
        }
        Verdict::Accept
    }

    fn on_vote(&self, vote: &Vote) -> Verdict {
        match self.jobs.get(&vote.job_id) {
            Some(job) if !job.committee.contains(&vote.verifier) => {
                Verdict::Reject(RejectReason::NotListedVerifier)
            }
            _ => Verdict::Accept,
        }
    }

    fn on_chain(&mut self, now: Time, event: ChainEvent) {
        let job_id = event.job_id();
        let me = self.key.address();
        if matches!(event, ChainEvent::JobSettled { .. }) {
            self.settles.remove(&job_id);
            return;
        }
        if let ChainEvent::JobCreated {
            spec_hash,
            total_steps,
            checkpoint_interval,
            ..
        } = &event
        {
            if !self.jobs.contains_key(&job_id) {
                self.drawing.insert(
                    job_id,
                    Created {
                        spec_hash: *spec_hash,
                        total_steps: *total_steps,
                        interval: (*checkpoint_interval).max(1),
                    },
                );
            }
            return;
        }
        if let ChainEvent::CommitteeDrawn { committee, .. } = &event {
            let Some(created) = self.drawing.remove(&job_id) else {
                return;
            };
            if committee.contains(&me) && !self.jobs.contains_key(&job_id) {
                let Created {
                    spec_hash,
                    total_steps,
                    interval,
                } = created;
                self.jobs.insert(
                    job_id,
                    VerifierJob {
                        spec_hash,
                        total_steps,
                        interval,
                        committee: committee.clone(),
                        spot_checks: self.config.default_spot_checks,
                        epoch: 0,
                        provider: None,
                        head_step: 0,
                        // The escrow's convention: before any acceptance the "checkpoint" is the spec.
                        head_hash: spec_hash,
                        queue: BTreeMap::new(),
                        active: None,
                        voted: BTreeSet::new(),
                        unsettled: BTreeMap::new(),
                        regossip_at: None,
                    },
                );
                self.outputs.push_back(Output::Subscribe {
                    topic: job_topic(job_id),
                });
            }
            return;
        }
        if matches!(event, ChainEvent::JobExpired { .. }) {
            self.drawing.remove(&job_id);
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        match event {
            ChainEvent::JobCreated { .. }
            | ChainEvent::CommitteeSeedMoved { .. }
            | ChainEvent::CommitteeDrawn { .. } => {}
            ChainEvent::ProviderAssigned {
                epoch,
                provider,
                start_step,
                start_checkpoint,
                ..
            } => {
                if epoch > job.epoch {
                    job.epoch = epoch;
                    job.provider = Some(provider);
                    job.reset_to_chain(start_step, start_checkpoint);
                }
                job.unsettled
                    .retain(|(e, _), u| *e >= epoch || u.until.is_some());
            }
            ChainEvent::EpochEnded { epoch, reason, .. } if reason.by_client() => {
                if epoch == job.epoch {
                    job.provider = None;
                    job.queue.clear();
                    job.active = None;
                }
                // Its accepts can still land late: keep them going; its rejects cannot.
                let until = now.saturating_add(crate::provider::CLAIM_KEPT_FOR);
                job.unsettled
                    .retain(|(e, _), u| *e != epoch || u.vote.accept);
                for ((_, _), u) in job.unsettled.iter_mut().filter(|((e, _), _)| *e == epoch) {
                    u.until = Some(until);
                }
            }
            ChainEvent::EpochEnded { epoch, .. } | ChainEvent::CheckpointRejected { epoch, .. } => {
                if epoch == job.epoch {
                    job.provider = None;
                    job.queue.clear();
                    job.active = None;
                }
                job.unsettled
                    .retain(|(e, _), u| *e > epoch || (*e < epoch && u.until.is_some()));
            }
            ChainEvent::CheckpointAccepted {
                epoch,
                step,
                checkpoint_hash,
                ..
            } => {
                // The head moved: what the client ended can no longer be paid either.
                job.unsettled.retain(|(e, s), u| {
                    u.until.is_none() && (*e > epoch || (*e == epoch && *s > step))
                });
                if step > job.head_step {
                    // The chain is ahead of us (we missed or lag on some checkpoint): follow it.
                    job.head_step = step;
                    job.head_hash = checkpoint_hash;
                    if job.active.as_ref().is_some_and(|c| c.ann.step <= step) {
                        job.active = None;
                    }
                }
                self.advance(job_id);
            }
            ChainEvent::JobSettled { .. } => {}
            ChainEvent::JobCompleted { .. } | ChainEvent::JobExpired { .. } => {
                // A completed job's fees (ours among them) wait for its settle; an expired
                // one credited them already.
                if matches!(event, ChainEvent::JobCompleted { .. }) {
                    self.settles
                        .insert(job_id, now.saturating_add(SETTLE_FALLBACK_AFTER));
                }
                self.jobs.remove(&job_id);
                self.outputs.push_back(Output::Unsubscribe {
                    topic: job_topic(job_id),
                });
            }
        }
    }
}

impl StateMachine for Verifier {
    fn checks_under(&self) -> (EscrowDomain, Scheme) {
        (self.config.domain, self.key.scheme())
    }

    fn on_checked(&mut self, _now: Time, msg: &Message, _: Passed) -> Verdict {
        match msg {
            Message::CheckpointAnnounce(a) => self.on_announce(a),
            Message::JobOffer(o) => self.on_offer(o),
            Message::Vote(v) => self.on_vote(v),
            _ => Verdict::Accept,
        }
    }

    fn handle_input(&mut self, now: Time, input: Input) {
        match input {
            Input::Chain { event, .. } => self.on_chain(now, event),
            Input::BlobFetched { hash, ok } => self.on_blob(now, hash, ok),
            Input::QualityResult {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                report,
            } => {
                if let Some(c) = self.active_for(job_id, epoch, step, checkpoint_hash) {
                    // Non-finite metrics fail whatever the runner concluded.
                    c.quality =
                        Some(report.pass && report.accuracy.is_finite() && report.loss.is_finite());
                    self.decide(now, job_id);
                }
            }
            Input::SpotCheckResult {
                job_id,
                epoch,
                step,
                checkpoint_hash,
                pass,
            } => {
                if let Some(c) = self.active_for(job_id, epoch, step, checkpoint_hash) {
                    c.spot = Some(pass);
                    self.decide(now, job_id);
                }
            }
            Input::ConnectionClosed { .. }
            | Input::PathRtt { .. }
            | Input::TxFailed { .. }
            | Input::StepDone { .. }
            | Input::CheckpointReady { .. }
            | Input::TrainingFailed { .. }
            | Input::StakeChanged { .. }
            | Input::ComputeStarved { .. } => {}
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        let due: Vec<JobId> = self
            .settles
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(id, _)| *id)
            .collect();
        for job_id in due {
            // Once: if it fails, someone settled first (or will: the client, another member).
            self.settles.remove(&job_id);
            let id = TxId(self.next_tx);
            self.next_tx += 1;
            self.outputs.push_back(Output::SubmitTx {
                id,
                tx: ChainTx::Settle { job_id },
            });
        }
        while let Some(&(due, job_id)) = self.regossips.first() {
            if due > now {
                break;
            }
            self.regossips.pop_first();
            let after = self.config.regossip_after;
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            if job.regossip_at != Some(due) {
                continue;
            }
            job.unsettled
                .retain(|_, u| u.until.is_none_or(|until| until > now));
            for u in job.unsettled.values_mut() {
                if now >= u.at.saturating_add(after) {
                    u.at = now;
                    self.outputs.push_back(Output::Publish {
                        topic: job_topic(job_id),
                        message: Message::Vote(u.vote.clone()),
                    });
                }
            }
            job.regossip_at = job
                .unsettled
                .values()
                .map(|u| u.at.saturating_add(after))
                .min();
            if let Some(next) = job.regossip_at {
                self.regossips.insert((next, job_id));
            }
        }
        while let Some(&(due, job_id)) = self.retries.first() {
            if due > now {
                break;
            }
            self.retries.pop_first();
            let Some(check) = self.jobs.get_mut(&job_id).and_then(|j| j.active.as_mut()) else {
                continue;
            };
            // A stale entry: that retry was cancelled or re-armed since.
            if check.fetch.due() != Some(due) || !check.fetch.take_due(now) {
                continue;
            }
            self.outputs.push_back(Output::FetchBlob {
                hash: check.ann.checkpoint_hash,
                from: Some(check.ann.provider),
            });
        }
    }

    fn poll_timeout(&self) -> Option<Time> {
        let retry = self.retries.first().map(|(due, _)| *due);
        let regossip = self.regossips.first().map(|(due, _)| *due);
        let settle = self.settles.values().min().copied();
        retry.into_iter().chain(regossip).chain(settle).min()
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }
}
