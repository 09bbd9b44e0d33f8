//! What the run measured, collected as it goes; `report` turns it into figures.

use std::collections::BTreeMap;

use crate::cheat::CheatKind;
use crate::queue::Millis;

#[derive(Clone, Debug, Default)]
pub struct CheatTally {
    pub announced: u64,
    pub caught: u64,
    pub missed: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub events: u64,
    /// Kill or failure of a provider while it held a live epoch.
    pub failures_while_assigned: u64,
    /// Failure to the client declaring the provider lost.
    pub detection_ms: Vec<Millis>,
    /// Provider declared lost while it was alive (partition, lost heartbeats).
    pub false_detections: u64,
    /// Failure to the replacement training again on the same job.
    pub recovery_after_failure_ms: Vec<Millis>,
    /// Rejection on chain to the replacement training again.
    pub recovery_after_reject_ms: Vec<Millis>,
    /// Cheating checkpoint announced to its rejection on chain.
    pub cheat_detection_ms: Vec<Millis>,
    pub steps_trained: u64,
    pub steps_accepted: u64,
    pub paid: u128,
    pub refunded: u128,
    pub slashed: u128,
    /// Verifier fees taken from budgets by decisions (`fees` of each accept and reject).
    pub fees: u128,
    /// Verifier fees credited by `settle` and `expire` (`FeesCredited`).
    pub fees_credited: u128,
    /// Fees credited per verifier, by name (small runs only, like the timeline).
    pub fees_by_verifier: BTreeMap<String, u128>,
    /// Committees drawn, by how many of their members are byzantine.
    pub committees_by_byzantine: BTreeMap<usize, u64>,
    pub jobs_created: u64,
    pub jobs_completed: u64,
    pub jobs_expired: u64,
    pub cheats: BTreeMap<CheatKind, CheatTally>,
    pub tx_ok: BTreeMap<&'static str, u64>,
    pub tx_failed: BTreeMap<String, u64>,
    /// (time, cumulative accepted steps), sampled at each acceptance: the goodput plot.
    pub accepted_curve: Vec<(Millis, u64)>,
    /// Paid per named provider (presets' per-provider lines).
    pub paid_by_name: BTreeMap<String, u128>,
    /// Human-readable run timeline, kept only for small runs.
    pub timeline: Vec<(Millis, String)>,
}
