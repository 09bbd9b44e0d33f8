//! What goes into and comes out of the role machines. One vocabulary for all three roles, so a
//! node running several roles (and the simulator) drives them with one loop.

use std::time::Duration;

use alloy_primitives::{Address, U256};

use crate::chain::{ChainEvent, ChainTx, TxId};
use crate::eip712::EscrowDomain;
use crate::signing::Scheme;
use crate::time::Time;
use crate::types::{Epoch, Hash, JobId, Step};
use crate::validation::{Checked, Verdict, check_message};
use crate::wire::Message;

#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A JobEscrow event, with the timestamp of its block (bid expiries are in block time).
    Chain { block_time: u64, event: ChainEvent },
    /// The transport lost its connection to the peer bound (by NodeHello) to `address`.
    ConnectionClosed { address: Address },
    /// The transport's round trip to the peer bound to `address`: the client's liveness
    /// floor for that provider covers one lost heartbeat on that path.
    PathRtt { address: Address, rtt: Duration },
    /// A transaction from [`Output::SubmitTx`] reverted or could not be sent.
    TxFailed { id: TxId, reason: String },
    /// Trainer: one optimizer step finished.
    StepDone {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        loss: f32,
    },
    /// The node: its compute threads have waited this long in all, in ms, for a CPU they were
    /// ready to use (see [`crate::Heartbeat::starved_ms`]). Never decreases.
    ComputeStarved { total_ms: u64 },
    /// Trainer: a checkpoint is in the local blob store, with the per-step state hashes of
    /// `last checkpoint ..= step`.
    CheckpointReady {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        state_hashes: Vec<Hash>,
    },
    /// Trainer: it stopped with an error (out of memory, bad blob...).
    TrainingFailed {
        job_id: JobId,
        epoch: Epoch,
        reason: String,
    },
    /// Blob store: a requested fetch finished (BLAKE3-verified when `ok`).
    BlobFetched { hash: Hash, ok: bool },
    /// The provider's bonded stake as the chain reports it now (staking and unbonding are not
    /// job events, so the node reads it): what the provider's stake rule checks against.
    StakeChanged { bonded: U256, min_stake: U256 },
    /// Verifier runner: the quality test's result.
    QualityResult {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        report: QualityReport,
    },
    /// Verifier runner: the re-execution spot check's result.
    SpotCheckResult {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        pass: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QualityReport {
    pub pass: bool,
    pub accuracy: f64,
    pub loss: f64,
}

/// One sampled transition of a spot check, `step - 1 → step`, with all the runner needs: fetch
/// the anchor state by `hashes[0]` (the blob the provider keeps), replay `step - anchor_step`
/// steps from it, and check the state after each replayed step `anchor_step + k` against
/// `hashes[k]`, so a cheat in any replayed step fails the check, not only in the sampled one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpotStep {
    /// The sampled transition ends here.
    pub step: Step,
    /// The nearest anchor ([`crate::anchors`]) at or before `step - 1`.
    pub anchor_step: Step,
    /// The committed state hashes of `anchor_step ..= step`: the anchor's, then one per
    /// replayed step.
    pub hashes: Vec<Hash>,
}

impl SpotStep {
    /// The anchor state's hash: the one blob this sample fetches.
    pub fn anchor(&self) -> Option<Hash> {
        self.hashes.first().copied()
    }

    /// Steps the runner replays for this sample.
    pub fn replayed(&self) -> u64 {
        self.step.saturating_sub(self.anchor_step)
    }
}

// Outputs are drained as soon as they are produced, so the size of the largest variant (an
// offer carrying its spec) costs nothing worth a Box in every driver's match.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Publish {
        topic: String,
        message: Message,
    },
    Subscribe {
        topic: String,
    },
    Unsubscribe {
        topic: String,
    },
    SubmitTx {
        id: TxId,
        tx: ChainTx,
    },
    /// Fetch a blob into the local store (and keep re-serving it); `from` is a hint. Every
    /// fetch must be answered with [`Input::BlobFetched`] (`ok: false` after giving up): the
    /// verifier has no timer of its own and waits for it.
    FetchBlob {
        hash: Hash,
        from: Option<Address>,
    },
    StartTraining {
        job_id: JobId,
        epoch: Epoch,
        spec_hash: Hash,
        from_step: Step,
        /// The escrow's `startCheckpoint`: the last accepted checkpoint, or the job's spec hash
        /// before any was accepted (start from the spec's base model).
        from_checkpoint: Hash,
        until_step: Step,
        checkpoint_interval: Step,
    },
    StopTraining {
        job_id: JobId,
        epoch: Epoch,
    },
    /// The provider bid on this job: the driver may fetch and load the job's data now, so an
    /// assignment starts training without waiting for it (a replacement that never saw the
    /// job spent about a second on that after the failover). Nothing waits for an answer:
    /// [`Output::StartTraining`] prepares whatever is still missing.
    PrepareJob {
        job_id: JobId,
        spec_hash: Hash,
    },
    /// Must be answered with [`Input::QualityResult`]; a runner error is `pass: false`.
    RunQualityTest {
        job_id: JobId,
        /// The job's spec, as the escrow recorded it: what the runner loads the model from.
        spec_hash: Hash,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        /// The interval's last state hash in the announce: the checkpoint must hold exactly
        /// this state, or it is not the work the provider committed to.
        committed_state: Hash,
        /// The previous accepted (or already verified) checkpoint; the job's spec hash means the
        /// spec's base model (the escrow's convention before any acceptance).
        baseline: Hash,
        baseline_step: Step,
    },
    /// Must be answered with [`Input::SpotCheckResult`]; a runner error is `pass: false`.
    RunSpotCheck {
        job_id: JobId,
        spec_hash: Hash,
        epoch: Epoch,
        step: Step,
        checkpoint_hash: Hash,
        provider: Address,
        /// The interval's first step: its anchor, the parent state, is not a state blob but
        /// the previous checkpoint's state, which every holder of that checkpoint keeps
        /// anyway (the provider stores no copy of it).
        parent_step: Step,
        /// The previous accepted (or verified) checkpoint, the parent state's source; the
        /// job's spec hash before any acceptance (then the parent is the spec's initial state).
        parent_checkpoint: Hash,
        steps: Vec<SpotStep>,
    },
    /// Something worth logging or measuring; needs no action.
    Notice(Notice),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    ProviderSelected {
        job_id: JobId,
        epoch: Epoch,
        provider: Address,
        price_per_step: U256,
    },
    /// The client gave the provider up and fails the job over.
    ProviderLost {
        job_id: JobId,
        epoch: Epoch,
        provider: Address,
        /// Lost: since the last heartbeat. Stalled: since the step last advanced.
        silent_for: Duration,
        reason: crate::detector::Suspicion,
    },
    NoUsableBids {
        job_id: JobId,
        epoch: Epoch,
    },
    QuorumReached {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        accept: bool,
    },
    Voted {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        accept: bool,
    },
    Fenced {
        job_id: JobId,
        epoch: Epoch,
    },
    JobFinished {
        job_id: JobId,
    },
    TxFailed {
        id: TxId,
        reason: String,
    },
    /// The trainer reported something inconsistent (wrong number of state hashes...).
    TrainerInconsistent {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
    },
    /// An assignment for a job whose spec or parameters this node never learned.
    UnknownJob {
        job_id: JobId,
    },
    /// The provider submitted the accept of its own checkpoint: the client had not landed
    /// it in time, or (`late`) had ended the epoch before it landed.
    ClaimSubmitted {
        job_id: JobId,
        epoch: Epoch,
        step: Step,
        late: bool,
    },
    /// The provider will not bid on the job: its terms break `rule`. Reported once per job
    /// and rule, not on every event that would have let it bid.
    BidRefused {
        job_id: JobId,
        rule: crate::provider::VetRule,
        /// The figures behind the refusal where the rule alone does not say them (the
        /// memory rule: what the job needs and what this provider offers); empty otherwise.
        detail: String,
    },
}

/// That a message passed the stateless checks: made only here, so a role machine acts only on
/// checked messages.
#[derive(Debug)]
pub struct Passed(());

/// The sans-IO surface every role machine offers (quinn-proto/str0m style): feed inputs and
/// `now`, then drain `poll_output` and arm a timer for `poll_timeout`.
pub trait StateMachine {
    /// The escrow domain and signature scheme this machine checks messages under.
    fn checks_under(&self) -> (EscrowDomain, Scheme);
    /// What the role does with a gossip message that passed the stateless checks under its
    /// domain and scheme: `passed` is the proof, and only this crate's
    /// [`StateMachine::handle_checked`] and [`StateMachine::handle_message`] make one.
    /// Messages about jobs the role does not track are accepted so the mesh keeps relaying them.
    fn on_checked(&mut self, now: Time, msg: &Message, passed: Passed) -> Verdict;
    /// A message checked once for several machines. One checked under another domain or
    /// scheme than this machine's is checked again.
    fn handle_checked(&mut self, now: Time, msg: &Checked) -> Verdict {
        let (domain, scheme) = self.checks_under();
        match msg.check_for(&domain, scheme) {
            Ok(()) => self.on_checked(now, msg.message(), Passed(())),
            Err(verdict) => verdict,
        }
    }
    /// A gossip message as received: the stateless checks as this machine makes them, then
    /// what the role does with it.
    fn handle_message(&mut self, now: Time, msg: &Message) -> Verdict {
        let (domain, scheme) = self.checks_under();
        match check_message(msg, &domain, scheme) {
            Verdict::Accept => self.on_checked(now, msg, Passed(())),
            verdict => verdict,
        }
    }
    fn handle_input(&mut self, now: Time, input: Input);
    fn handle_timeout(&mut self, now: Time);
    /// The earliest time `handle_timeout` has something to do.
    fn poll_timeout(&self) -> Option<Time>;
    fn poll_output(&mut self) -> Option<Output>;
}
