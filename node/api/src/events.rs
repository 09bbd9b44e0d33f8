//! The node's machine-readable events, typed once for the writer (the node's log) and every
//! reader (the testnet harness, the run record, the tests, the dashboard). A node writes each
//! as one log line with target [`EVENT_TARGET`], the event's name in `event` and the whole
//! event as JSON in `data`; readers parse `data` back into a [`NodeEvent`], so a renamed or
//! retyped field is a compile error on both sides instead of a silently missed match.
//!
//! Ids, hashes, addresses and token amounts travel as the strings the node prints (decimal
//! job ids and base units, 0x-hex hashes and addresses), which keeps this crate free of the
//! protocol's types and every reader free to parse only what it uses.

use serde::{Deserialize, Serialize};

/// The tracing target of the node's machine-readable events.
pub const EVENT_TARGET: &str = "gpuchain::event";
/// The log field holding the event as JSON.
pub const DATA_FIELD: &str = "data";

/// How loud an event is in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum NodeEvent {
    // --- startup and shutdown
    Started {
        peer_id: String,
        eth_address: String,
        blob_endpoint: String,
        roles: Vec<String>,
    },
    ChainConnected {
        chain_id: u64,
        escrow: String,
        token: String,
        replayed_events: usize,
    },
    FaultEnabled {
        fault: String,
    },
    ApiListening {
        addr: String,
        token_file: String,
    },
    Listening {
        addr: String,
    },
    Bootstrapped {
        peer: String,
    },
    Signal,
    Shutdown,
    RolesFailed {
        error: String,
    },
    /// The node could not start or stopped on an error; the process exits with failure.
    Fatal {
        error: String,
    },

    // --- the swarm
    Connected {
        peer: String,
    },
    Disconnected {
        peer: String,
    },
    Hello {
        peer: String,
        /// Through the direct exchange on a new connection, not gossip.
        direct: bool,
    },
    /// A peer's direct hello failed validation; the peer is not learned from it.
    HelloRefused {
        peer: String,
        reason: String,
    },
    GossipIgnored {
        peer: String,
        topic: String,
        reason: String,
    },
    GossipRejected {
        peer: String,
        topic: String,
        reason: String,
    },
    RolesQueueFull {
        error: String,
    },
    VerdictDropped {
        error: String,
    },
    ApiRefused {
        status: u16,
        reason: String,
    },

    // --- the chain as followed
    ChainJobCreated {
        block: u64,
        job_id: String,
        client: String,
        budget: String,
    },
    ChainAssigned {
        block: u64,
        job_id: String,
        epoch: u64,
        provider: String,
        price_per_step: String,
        start_step: u64,
    },
    ChainEpochEnded {
        block: u64,
        job_id: String,
        epoch: u64,
        reason: String,
    },
    /// The escrow drew the job's verifier committee (bids can be made from now on).
    ChainCommitteeDrawn {
        block: u64,
        job_id: String,
        committee: Vec<String>,
    },
    /// The draw found its seed block's hash gone or the pool changed since: it moved the
    /// seed to `seed_block` and will draw on the next call.
    ChainSeedMoved {
        block: u64,
        job_id: String,
        seed_block: u64,
    },
    ChainAccepted {
        block: u64,
        job_id: String,
        epoch: u64,
        step: u64,
        provider: String,
        amount: String,
        /// Verifier fees the decision charged (base units), to the members who signed.
        #[serde(default)]
        fees: String,
        /// Which committee positions signed it (a bit set, `0x…`; positions are the order
        /// of `ChainCommitteeDrawn.committee`).
        #[serde(default)]
        voters: String,
    },
    ChainRejected {
        block: u64,
        job_id: String,
        epoch: u64,
        step: u64,
        provider: String,
        slashed: String,
        #[serde(default)]
        fees: String,
        #[serde(default)]
        voters: String,
    },
    ChainCompleted {
        block: u64,
        job_id: String,
        refund: String,
    },
    ChainExpired {
        block: u64,
        job_id: String,
        refund: String,
    },
    /// `settle` credited a completed job's unspent budget to its client.
    ChainSettled {
        block: u64,
        job_id: String,
        refund: String,
    },
    /// The provider submitted the accept of its own checkpoint (the client had not landed
    /// it in time, or had ended the epoch first: `late`).
    ClaimSubmitted {
        job_id: String,
        epoch: u64,
        step: u64,
        late: bool,
    },
    /// The provider will not bid on a job: its terms break `rule` (a `VetRule` name).
    BidRefused {
        job_id: String,
        rule: String,
        /// The figures where the rule alone does not say them (`memory`: what the job needs,
        /// what this provider offers); empty otherwise and in older records.
        #[serde(default)]
        detail: String,
    },
    ChainPollFailed {
        error: String,
    },
    CursorReset,
    CursorNotSaved {
        error: String,
    },
    SpecNotSaved {
        dir: String,
        error: String,
    },
    TxMined {
        call: String,
        tx_hash: String,
        block: u64,
        gas_used: u64,
    },
    TxFailed {
        tx: u64,
        reason: String,
    },

    // --- what the machines did
    OfferPublished {
        job_id: String,
        next_epoch: u64,
    },
    BidPublished {
        job_id: String,
        epoch: u64,
        price_per_step: String,
    },
    ProviderSelected {
        job_id: String,
        epoch: u64,
        provider: String,
        price_per_step: String,
    },
    /// The client gave a provider up and fails the job over.
    ProviderLost {
        job_id: String,
        epoch: u64,
        provider: String,
        /// Lost: since the last heartbeat. Stalled: since the step last advanced.
        silent_for_ms: u64,
        /// `"lost"` (no heartbeat) or `"stalled"` (heartbeats, but no step completed); empty
        /// in records written before stalls were detected, which were all losses.
        #[serde(default)]
        reason: String,
    },
    NoUsableBids {
        job_id: String,
        epoch: u64,
    },
    Heartbeat {
        job_id: String,
        epoch: u64,
        provider: String,
        seq: u64,
        step: u64,
        loss: f32,
        /// The provider's compute threads' total wait for a CPU, ms (its heartbeat's).
        #[serde(default)]
        starved_ms: u64,
        #[serde(default)]
        checkpointing: bool,
    },
    /// This provider sent a job's heartbeat more than two periods after the one before: its
    /// host did not run the node in time. `timer_late_ms`: how long after its deadline the
    /// machines' timer woke; `publish_ms`: how long the swarm took to take the heartbeat.
    /// The rest of `gap_ms` is the timer's own wait. The client judges silence on arrival, so
    /// an operator reads here whether a failover was the host's doing.
    HeartbeatLate {
        job_id: String,
        gap_ms: u64,
        timer_late_ms: u64,
        publish_ms: u64,
    },
    CheckpointAnnounced {
        job_id: String,
        epoch: u64,
        step: u64,
        parent_step: u64,
        checkpoint: String,
    },
    VotePublished {
        job_id: String,
        epoch: u64,
        step: u64,
        accept: bool,
        checkpoint: String,
    },
    Voted {
        job_id: String,
        epoch: u64,
        step: u64,
        accept: bool,
    },
    Quorum {
        job_id: String,
        epoch: u64,
        step: u64,
        accept: bool,
    },
    Fenced {
        job_id: String,
        epoch: u64,
    },
    JobFinished {
        job_id: String,
    },
    UnknownJob {
        job_id: String,
    },
    TrainerInconsistent {
        job_id: String,
        epoch: u64,
        step: u64,
    },

    // --- training (provider)
    /// A job's data fetched and loaded ahead of an assignment, when the provider bid on it.
    JobPrepared {
        spec_hash: String,
        ms: u64,
    },
    TrainingStarted {
        job_id: String,
        epoch: u64,
        from_step: u64,
        from_checkpoint: String,
        fault: Option<String>,
    },
    /// How this provider splits the job's effective batch, chosen from the memory it offers
    /// (`--memory-mb`): `accumulation` micro-batches of `micro_batch` examples a step. Its
    /// checkpoints record the micro-batch, and the verifiers replay with it.
    TrainingPlan {
        job_id: String,
        epoch: u64,
        effective_batch: u64,
        micro_batch: u64,
        accumulation: u64,
        /// The memory offered, in bytes.
        memory_bytes: u64,
        /// Activations per example, as the trainer estimates them, in bytes.
        bytes_per_example: u64,
    },
    FirstStep {
        job_id: String,
        epoch: u64,
        step: u64,
        loss: f32,
    },
    Step {
        job_id: String,
        epoch: u64,
        step: u64,
        loss: f32,
    },
    TrainingDone {
        job_id: String,
        epoch: u64,
        step: u64,
    },
    TrainingFailed {
        job_id: String,
        epoch: u64,
        error: String,
    },

    // --- verification (verifier)
    BlobFetched {
        hash: String,
        elapsed_ms: u64,
    },
    BlobFetchFailed {
        hash: String,
        error: String,
    },
    QualityTest {
        job_id: String,
        epoch: u64,
        step: u64,
        checkpoint: String,
        pass: bool,
        accuracy: f64,
        loss: f64,
        previous_accuracy: Option<f64>,
        reasons: String,
    },
    QualityError {
        job_id: String,
        step: u64,
        error: String,
    },
    SpotCheck {
        job_id: String,
        step: u64,
        pass: bool,
        /// The replayed step that failed, when one did.
        checked_step: Option<u64>,
        /// How many steps were replayed, when all passed.
        checked: Option<usize>,
        detail: String,
    },
    SpotCheckError {
        job_id: String,
        step: u64,
        error: String,
    },
}

impl NodeEvent {
    /// The `event` field and the `data` field of the event's log line: its variant's name in
    /// snake_case, and the whole event as JSON (which carries the name too).
    pub fn to_fields(&self) -> (String, String) {
        match serde_json::to_value(self) {
            Ok(v) => (
                v["event"].as_str().unwrap_or_default().to_string(),
                v.to_string(),
            ),
            // A derive-only enum of strings and numbers does not fail to serialise; say so
            // loudly in the log if it ever does.
            Err(e) => ("unserialisable".into(), format!("{{\"error\":\"{e}\"}}")),
        }
    }

    pub fn level(&self) -> Level {
        use NodeEvent::*;
        match self {
            Connected { .. } | Disconnected { .. } | Hello { .. } | GossipIgnored { .. } => {
                Level::Debug
            }
            FaultEnabled { .. }
            | GossipRejected { .. }
            | HelloRefused { .. }
            | RolesQueueFull { .. }
            | VerdictDropped { .. }
            | ApiRefused { .. }
            | ChainRejected { .. }
            | ChainPollFailed { .. }
            | CursorReset
            | ProviderLost { .. }
            | HeartbeatLate { .. }
            | Fenced { .. }
            | TxFailed { .. }
            | UnknownJob { .. }
            | BidRefused { .. }
            | BlobFetchFailed { .. }
            | QualityError { .. }
            | SpotCheckError { .. } => Level::Warn,
            RolesFailed { .. }
            | Fatal { .. }
            | CursorNotSaved { .. }
            | SpecNotSaved { .. }
            | TrainerInconsistent { .. }
            | TrainingFailed { .. } => Level::Error,
            _ => Level::Info,
        }
    }

    /// The job an event is about, if any (decimal id).
    pub fn job_id(&self) -> Option<&str> {
        use NodeEvent::*;
        match self {
            ChainJobCreated { job_id, .. }
            | ChainAssigned { job_id, .. }
            | ChainEpochEnded { job_id, .. }
            | ChainCommitteeDrawn { job_id, .. }
            | ChainSeedMoved { job_id, .. }
            | ChainAccepted { job_id, .. }
            | ChainRejected { job_id, .. }
            | ChainCompleted { job_id, .. }
            | ChainExpired { job_id, .. }
            | ChainSettled { job_id, .. }
            | BidRefused { job_id, .. }
            | ClaimSubmitted { job_id, .. }
            | OfferPublished { job_id, .. }
            | BidPublished { job_id, .. }
            | ProviderSelected { job_id, .. }
            | ProviderLost { job_id, .. }
            | NoUsableBids { job_id, .. }
            | Heartbeat { job_id, .. }
            | HeartbeatLate { job_id, .. }
            | CheckpointAnnounced { job_id, .. }
            | VotePublished { job_id, .. }
            | Voted { job_id, .. }
            | Quorum { job_id, .. }
            | Fenced { job_id, .. }
            | JobFinished { job_id }
            | UnknownJob { job_id }
            | TrainerInconsistent { job_id, .. }
            | TrainingStarted { job_id, .. }
            | TrainingPlan { job_id, .. }
            | FirstStep { job_id, .. }
            | Step { job_id, .. }
            | TrainingDone { job_id, .. }
            | TrainingFailed { job_id, .. }
            | QualityTest { job_id, .. }
            | QualityError { job_id, .. }
            | SpotCheck { job_id, .. }
            | SpotCheckError { job_id, .. } => Some(job_id),
            _ => None,
        }
    }

    /// The event of one parsed JSON log line; `None` for any other line (another target,
    /// an older node's line without `data`, a malformed one).
    pub fn from_line(line: &serde_json::Value) -> Option<NodeEvent> {
        if line.get("target").and_then(serde_json::Value::as_str) != Some(EVENT_TARGET) {
            return None;
        }
        let data = line
            .get(DATA_FIELD)
            .or_else(|| line.get("fields").and_then(|f| f.get(DATA_FIELD)))?
            .as_str()?;
        serde_json::from_str(data).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_a_log_line() {
        let evs = [
            NodeEvent::ProviderLost {
                job_id: "1".into(),
                epoch: 2,
                provider: "0xab".into(),
                silent_for_ms: 75,
                reason: "stalled".into(),
            },
            NodeEvent::Signal,
            NodeEvent::SpotCheck {
                job_id: "1".into(),
                step: 10,
                pass: true,
                checked_step: None,
                checked: Some(3),
                detail: String::new(),
            },
            NodeEvent::TxMined {
                call: "createJob".into(),
                tx_hash: "0x01".into(),
                block: 7,
                gas_used: 21_000,
            },
            NodeEvent::CursorReset,
            NodeEvent::Fatal {
                error: "bootstrap unreachable".into(),
            },
            NodeEvent::TrainingPlan {
                job_id: "1".into(),
                epoch: 2,
                effective_batch: 32,
                micro_batch: 8,
                accumulation: 4,
                memory_bytes: 4 << 20,
                bytes_per_example: 344_064,
            },
            NodeEvent::BidRefused {
                job_id: "1".into(),
                rule: "memory".into(),
                detail: "1.00 MiB cannot train this model".into(),
            },
        ];
        for (ev, name) in evs.into_iter().zip([
            "provider_lost",
            "signal",
            "spot_check",
            "tx_mined",
            "cursor_reset",
            "fatal",
            "training_plan",
            "bid_refused",
        ]) {
            let (event, data) = ev.to_fields();
            assert_eq!(event, name);
            let line = serde_json::json!({ "target": EVENT_TARGET, "event": event, "data": data });
            assert_eq!(NodeEvent::from_line(&line), Some(ev.clone()));
            let nested = serde_json::json!({
                "target": EVENT_TARGET,
                "fields": { "event": event, "data": data },
            });
            assert_eq!(NodeEvent::from_line(&nested), Some(ev.clone()));
            let other = serde_json::json!({ "target": "x", "data": data });
            assert_eq!(NodeEvent::from_line(&other), None);
        }
    }

    #[test]
    fn a_provider_lost_recorded_before_reasons_still_parses() {
        // As the log holds it: the data field is the event's JSON as a string.
        let data = r#"{"event":"provider_lost","job_id":"1","epoch":2,"provider":"0xab","silent_for_ms":75}"#;
        let line = serde_json::json!({
            "target": EVENT_TARGET, "event": "provider_lost", "data": data,
        });
        let Some(NodeEvent::ProviderLost { reason, .. }) = NodeEvent::from_line(&line) else {
            panic!("an old provider_lost record must parse");
        };
        assert_eq!(reason, "");
    }

    #[test]
    fn a_bid_refusal_recorded_before_details_still_parses() {
        let data = r#"{"event":"bid_refused","job_id":"1","rule":"grace"}"#;
        let line = serde_json::json!({
            "target": EVENT_TARGET, "event": "bid_refused", "data": data,
        });
        let Some(NodeEvent::BidRefused { rule, detail, .. }) = NodeEvent::from_line(&line) else {
            panic!("an old bid_refused record must parse");
        };
        assert_eq!((rule.as_str(), detail.as_str()), ("grace", ""));
    }

    #[test]
    fn failures_are_loud() {
        let error = || "x".to_string();
        for (ev, level) in [
            (NodeEvent::CursorReset, Level::Warn),
            (NodeEvent::ChainPollFailed { error: error() }, Level::Warn),
            (NodeEvent::CursorNotSaved { error: error() }, Level::Error),
            (
                NodeEvent::SpecNotSaved {
                    dir: "d".into(),
                    error: error(),
                },
                Level::Error,
            ),
            (NodeEvent::Fatal { error: error() }, Level::Error),
        ] {
            assert_eq!(ev.level(), level, "{ev:?}");
        }
    }
}
