//! Run configuration: TOML in, validated before anything runs. Every field has a default so a
//! config names only what it changes; unknown fields are refused so a typo cannot silently fall
//! back to a default. Errors name the offending field.
//!
//! Long because it is the whole configuration surface in one place: every field, its
//! default and its validation sit together, so a new field cannot miss its check.

use serde::{Deserialize, Serialize};

use crate::cheat::CheatKind;

/// 1 USDC in token units (6 decimals).
pub const USDC: u128 = 1_000_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    pub name: String,
    /// Simulated duration, seconds.
    pub duration_s: f64,
    pub clients: u32,
    pub providers: u32,
    pub verifiers: u32,
    pub job: JobConfig,
    pub protocol: ProtocolConfig,
    pub network: NetworkConfig,
    pub chain: ChainConfig,
    pub churn: ChurnConfig,
    pub cheat: CheatConfig,
    /// Byzantine verifiers and hostile clients (none by default).
    pub hostile: HostileConfig,
    /// Hardware classes providers are drawn from (by weight), unless a provider is named.
    pub hardware: Vec<HardwareClass>,
    /// Providers given by hand (presets): their name, price, hardware and behaviour. The first
    /// `named_providers.len()` providers are these; the rest are drawn.
    pub named_providers: Vec<NamedProvider>,
    /// Provider prices drawn uniformly from this range, token units per step.
    pub price_min: u128,
    pub price_max: u128,
    /// Faults (churn, partitions, loss, cheating) stop at this time, seconds; absent: never.
    /// Runs where faults stop are checked for liveness.
    pub faults_stop_s: Option<f64>,
    /// Scripted faults (presets, demos).
    pub script: Vec<ScriptedFault>,
    /// Check the escrow's books from scratch after every event (slow at scale).
    pub full_checks: bool,
    /// Keep the escrow call log (for `--calls` and replaying a run call by call).
    pub keep_call_log: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobConfig {
    pub total_steps: u64,
    pub checkpoint_interval: u64,
    pub budget: u128,
    pub max_price_per_step: u128,
    /// Seconds from creation.
    pub deadline_s: u64,
    pub grace_s: u64,
    /// Seats the escrow draws from the verifier pool for each job (2..=32), as the client's
    /// `createJob` asks.
    pub committee_size: u8,
    /// Signatures a decision needs: a strict majority of `committee_size`.
    pub quorum: u8,
    /// Paid out of the budget to each committee member whose signature is in a decision,
    /// token units (the budget must cover it for every seat and checkpoint).
    pub verifier_fee: u128,
    /// Jobs each client runs, one after the other; 0 = keep starting jobs until the run ends.
    pub jobs_per_client: u32,
    /// Latest creation time of a job, seconds (continuous runs).
    pub last_start_s: f64,
    /// Checkpoint (and base model) size, bytes: what a verifier or replacement fetches.
    pub checkpoint_bytes: u64,
    /// Device memory a full effective batch needs, bytes; smaller devices accumulate.
    pub batch_memory_bytes: u64,
    /// Device memory the smallest micro-batch needs, bytes; smaller devices cannot bid.
    pub min_memory_bytes: u64,
    /// Loss curve: loss(s) = floor + (start - floor) · exp(-s / tau).
    pub loss_start: f64,
    pub loss_floor: f64,
    pub loss_tau_steps: f64,
    /// Accuracy curve: acc(s) = top - (top - base) · exp(-s / tau).
    pub acc_base: f64,
    pub acc_top: f64,
    /// Quality test thresholds.
    pub min_accuracy: f64,
    pub min_accuracy_after_step: u64,
    pub max_accuracy_drop: f64,
    pub max_loss: f64,
    /// Steps each verifier re-executes per checkpoint.
    pub spot_check_steps: u32,
    /// Verifier time for the quality test, seconds.
    pub quality_test_s: f64,
    /// Verifier time per re-executed step, seconds.
    pub spot_step_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolConfig {
    pub heartbeat_ms: u64,
    pub heartbeat_timeout_ms: u64,
    /// How long a client collects bids after an offer.
    pub bid_window_ms: u64,
    /// Bid validity, seconds.
    pub bid_ttl_s: u64,
    /// Idle providers an offer reaches before its bid window closes (a gossip mesh reaches
    /// some, not all, of 10,000 peers in half a second).
    pub offer_fanout: u32,
    /// Provider stake, token units (also the escrow's minStake).
    pub stake: u128,
    /// What each verifier stakes into the pool at the start, token units (at least
    /// `chain.min_verifier_stake`, or it is not pooled and no job can draw it).
    pub verifier_stake: u128,
    /// How the protocol machines sign: `secp256k1`, what the node does,
    /// or `simulated`, signatures that name their signer and cost nothing, for runs where
    /// secp256k1 would be nearly all the work (`gpuchain_protocol::signing::Scheme`).
    pub signatures: gpuchain_protocol::signing::Scheme,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    pub latency_median_ms: f64,
    /// Log-normal shape of the latency.
    pub latency_sigma: f64,
    /// Probability that a gossip message is lost.
    pub loss: f64,
    /// Median per-node bandwidth for blob transfers, Mbit/s (log-normal across nodes).
    pub bandwidth_median_mbps: f64,
    pub bandwidth_sigma: f64,
    /// Mean time between partitions, seconds; 0 = none.
    pub partition_every_s: f64,
    pub partition_duration_s: f64,
    /// Fraction of nodes cut off from the rest during a partition.
    pub partition_fraction: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainConfig {
    pub block_ms: u64,
    pub unbond_delay_s: u64,
    /// The escrow's `minVerifierStake`: bonded verifier stake that puts an account in the
    /// pool committees are drawn from.
    pub min_verifier_stake: u128,
    /// The escrow's `decisionWindow`, seconds: how long after a client ended an epoch a
    /// quorum's accept of its next checkpoint still lands (the provider's late claim).
    pub decision_window_s: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChurnConfig {
    /// Mean provider time to failure, seconds; 0 = no churn.
    pub mttf_s: f64,
    /// Mean time before a failed provider rejoins, seconds; 0 = never rejoins.
    pub rejoin_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheatConfig {
    /// Fraction of drawn providers that cheat.
    pub fraction: f64,
    /// Kinds a cheater is drawn from (uniformly).
    pub kinds: Vec<CheatKind>,
    /// Probability a cheater cheats on a given checkpoint.
    pub rate: f64,
    /// Fraction of steps a lazy cheater skips.
    pub lazy_skip: f64,
}

/// Parties that attack the honest ones. Byzantine verifiers vote reject on every checkpoint,
/// honest or not (the node's `--fault reject-all`: the quality test's result turned into a
/// failure); they are the hostile clients' sybils, registered in the pool like any verifier,
/// the one way left to a client to get honest work rejected. Hostile clients run
/// `gpuchain_protocol::faults::ClientFault::WithholdPay`: they never submit an accept and
/// release the provider instead, so only the provider's own late claim gets it paid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostileConfig {
    /// Fraction of the verifiers that are byzantine (rounded to the nearest count; the last
    /// ones by index).
    pub byzantine_verifiers: f64,
    /// Fraction of the clients that withhold pay (rounded; the last ones by index).
    pub withhold_pay_clients: f64,
}

impl Default for HostileConfig {
    fn default() -> Self {
        HostileConfig {
            byzantine_verifiers: 0.0,
            withhold_pay_clients: 0.0,
        }
    }
}

impl HostileConfig {
    /// How many of `n` parties `fraction` makes hostile.
    pub fn count(fraction: f64, n: u32) -> u32 {
        ((fraction * f64::from(n)).round() as u32).min(n)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HardwareClass {
    pub name: String,
    pub weight: f64,
    /// Steps per second at the full effective batch.
    pub steps_per_s: f64,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedProvider {
    pub name: String,
    pub price_per_step: u128,
    /// A `hardware` class name.
    pub hardware: String,
    #[serde(default)]
    pub cheat: Option<CheatKind>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedFault {
    pub at_s: f64,
    /// A named provider.
    pub provider: String,
    pub action: ScriptAction,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScriptAction {
    /// Stop the provider's process (no rejoin unless scripted).
    Kill,
    Rejoin,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            name: "custom".into(),
            duration_s: 3600.0,
            clients: 4,
            providers: 12,
            verifiers: 5,
            job: JobConfig::default(),
            protocol: ProtocolConfig::default(),
            network: NetworkConfig::default(),
            chain: ChainConfig::default(),
            churn: ChurnConfig::default(),
            cheat: CheatConfig::default(),
            hostile: HostileConfig::default(),
            hardware: default_hardware(),
            named_providers: Vec::new(),
            price_min: 1_000,
            price_max: 3_000,
            faults_stop_s: None,
            script: Vec::new(),
            full_checks: true,
            keep_call_log: false,
        }
    }
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            total_steps: 400,
            checkpoint_interval: 50,
            budget: 5 * USDC,
            max_price_per_step: 10_000,
            deadline_s: 3600,
            grace_s: 600,
            committee_size: 2,
            quorum: 2,
            verifier_fee: 1_000,
            jobs_per_client: 1,
            last_start_s: 0.0,
            checkpoint_bytes: 4 << 20,
            batch_memory_bytes: 2 << 30,
            min_memory_bytes: 256 << 20,
            loss_start: 2.3,
            loss_floor: 0.35,
            loss_tau_steps: 120.0,
            acc_base: 0.10,
            acc_top: 0.90,
            min_accuracy: 0.5,
            min_accuracy_after_step: 100,
            max_accuracy_drop: 0.05,
            max_loss: 10.0,
            spot_check_steps: 2,
            quality_test_s: 0.8,
            spot_step_s: 0.1,
        }
    }
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        ProtocolConfig {
            heartbeat_ms: 100,
            heartbeat_timeout_ms: 250,
            bid_window_ms: 500,
            bid_ttl_s: 60,
            offer_fanout: 32,
            stake: 10 * USDC,
            verifier_stake: 5 * USDC,
            signatures: gpuchain_protocol::signing::Scheme::Secp256k1,
        }
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            latency_median_ms: 20.0,
            latency_sigma: 0.5,
            loss: 0.0,
            bandwidth_median_mbps: 200.0,
            bandwidth_sigma: 0.5,
            partition_every_s: 0.0,
            partition_duration_s: 30.0,
            partition_fraction: 0.1,
        }
    }
}

impl Default for ChainConfig {
    fn default() -> Self {
        ChainConfig {
            block_ms: 1000,
            unbond_delay_s: 86_400,
            min_verifier_stake: 5 * USDC,
            decision_window_s: 120,
        }
    }
}

impl Default for ChurnConfig {
    fn default() -> Self {
        ChurnConfig {
            mttf_s: 0.0,
            rejoin_s: 0.0,
        }
    }
}

impl Default for CheatConfig {
    fn default() -> Self {
        CheatConfig {
            fraction: 0.0,
            kinds: CheatKind::ALL.to_vec(),
            rate: 1.0,
            lazy_skip: 0.5,
        }
    }
}

impl Default for HardwareClass {
    fn default() -> Self {
        HardwareClass {
            name: "gpu".into(),
            weight: 1.0,
            steps_per_s: 10.0,
            memory_bytes: 8 << 30,
        }
    }
}

pub fn default_hardware() -> Vec<HardwareClass> {
    vec![
        HardwareClass {
            name: "rtx3060".into(),
            weight: 3.0,
            steps_per_s: 10.0,
            memory_bytes: 6 << 30,
        },
        HardwareClass {
            name: "rtx4090".into(),
            weight: 2.0,
            steps_per_s: 30.0,
            memory_bytes: 24 << 30,
        },
        HardwareClass {
            name: "h100".into(),
            weight: 1.0,
            steps_per_s: 60.0,
            memory_bytes: 80 << 30,
        },
        HardwareClass {
            name: "laptop-1gb".into(),
            weight: 1.0,
            steps_per_s: 4.0,
            memory_bytes: 1 << 30,
        },
    ]
}

/// A config problem, naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("config field `{field}`: {reason}")]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

fn bad(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        reason: reason.into(),
    }
}

fn check_nonneg(field: &str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(bad(field, format!("must be a finite number ≥ 0, got {v}")))
    }
}

fn check_prob(field: &str, v: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(bad(field, format!("must be in [0, 1], got {v}")))
    }
}

/// Virtual time is u64 milliseconds; a century is plenty and keeps all sums far from overflow.
const MAX_SECONDS: f64 = 100.0 * 365.0 * 86_400.0;

impl SimConfig {
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: SimConfig = toml::from_str(text).map_err(|e| {
            let message = e.to_string();
            // Configs written for the stand-in roles, which are gone, say what changed.
            if message.contains("unknown field `driver`") {
                return bad(
                    "driver",
                    "no longer a setting: every run plays the roles with the protocol \
                     crate's machines (the simulator's stand-ins were removed); delete the line",
                );
            }
            if message.contains("unknown field `client_only_heartbeats`") {
                return bad(
                    "protocol.client_only_heartbeats",
                    "no longer a setting: heartbeats go on their job's heartbeat topic \
                     (gpuchain/1/job/<id>/heartbeats), which only the job's client subscribes \
                     to, in every run; delete the line",
                );
            }
            if message.contains("unknown field `verifiers_per_job`") {
                return bad(
                    "job.verifiers_per_job",
                    "no longer a setting: the escrow draws each job's committee from the \
                     verifier pool; set job.committee_size (and job.quorum, a strict majority)",
                );
            }
            // toml names the key in its message; keep its words, they point at the line.
            bad("(toml)", message.trim().to_string())
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        check_nonneg("duration_s", self.duration_s)?;
        if self.duration_s <= 0.0 || self.duration_s > MAX_SECONDS {
            return Err(bad("duration_s", "must be in (0, 100 years]"));
        }
        if self.clients == 0 {
            return Err(bad("clients", "at least one client"));
        }
        if self.providers == 0 {
            return Err(bad("providers", "at least one provider"));
        }
        if self
            .clients
            .saturating_add(self.providers)
            .saturating_add(self.verifiers)
            > 1_000_000
        {
            return Err(bad("providers", "more than 1,000,000 nodes in all"));
        }
        let j = &self.job;
        if j.total_steps == 0 {
            return Err(bad("job.total_steps", "must be positive"));
        }
        if j.checkpoint_interval == 0 || j.checkpoint_interval > j.total_steps {
            return Err(bad(
                "job.checkpoint_interval",
                "must be in 1..=job.total_steps",
            ));
        }
        if j.max_price_per_step == 0 {
            return Err(bad("job.max_price_per_step", "must be positive"));
        }
        // The escrow stores budgets in 96 bits (`AmountTooLarge` above).
        if j.total_steps > 1 << 40 || j.max_price_per_step > 1 << 80 || j.budget >= 1 << 96 {
            return Err(bad("job.budget", "amounts or steps too large to simulate"));
        }
        if j.verifier_fee > 1 << 80 {
            return Err(bad("job.verifier_fee", "too large to simulate"));
        }
        let size = usize::from(j.committee_size);
        if !(gpuchain_protocol::escrow::MIN_VERIFIERS..=crate::escrow::MAX_VERIFIERS)
            .contains(&size)
        {
            return Err(bad("job.committee_size", "must be in 2..=32"));
        }
        if u32::from(j.committee_size) > self.verifiers {
            return Err(bad(
                "job.committee_size",
                "more seats than there are verifiers in the pool",
            ));
        }
        if !gpuchain_protocol::escrow::is_strict_majority(j.quorum, size) {
            return Err(bad(
                "job.quorum",
                "must be a strict majority of job.committee_size (and at most it)",
            ));
        }
        let needed = gpuchain_protocol::escrow::cost_bound(
            gpuchain_protocol::U256::from(j.max_price_per_step),
            j.total_steps,
            j.checkpoint_interval,
            gpuchain_protocol::U256::from(j.verifier_fee),
            j.committee_size,
        );
        if gpuchain_protocol::U256::from(j.budget) < needed {
            return Err(bad(
                "job.budget",
                format!(
                    "must cover total_steps × max_price_per_step + verifier_fee × committee_size × checkpoints = {needed}"
                ),
            ));
        }
        if j.deadline_s == 0 || j.deadline_s as f64 > MAX_SECONDS || j.grace_s as f64 > MAX_SECONDS
        {
            return Err(bad(
                "job.deadline_s",
                "must be positive and under 100 years (grace too)",
            ));
        }
        check_nonneg("job.last_start_s", j.last_start_s)?;
        for (f, v) in [
            ("job.loss_start", j.loss_start),
            ("job.loss_floor", j.loss_floor),
            ("job.loss_tau_steps", j.loss_tau_steps),
            ("job.max_loss", j.max_loss),
            ("job.quality_test_s", j.quality_test_s),
            ("job.spot_step_s", j.spot_step_s),
        ] {
            check_nonneg(f, v)?;
        }
        for (f, v) in [
            ("job.acc_base", j.acc_base),
            ("job.acc_top", j.acc_top),
            ("job.min_accuracy", j.min_accuracy),
            ("job.max_accuracy_drop", j.max_accuracy_drop),
        ] {
            check_prob(f, v)?;
        }
        if j.loss_tau_steps <= 0.0 {
            return Err(bad("job.loss_tau_steps", "must be positive"));
        }
        // An honest provider must pass the quality test, or the run only measures slashing.
        let at = j.min_accuracy_after_step.min(j.total_steps) as f64;
        let honest = crate::training::accuracy_at(j, at);
        if j.min_accuracy_after_step <= j.total_steps && honest < j.min_accuracy + 0.02 {
            return Err(bad(
                "job.min_accuracy",
                format!(
                    "honest training reaches only {honest:.3} at step {at}: every honest checkpoint would be refused"
                ),
            ));
        }
        let p = &self.protocol;
        if p.heartbeat_ms == 0 {
            return Err(bad("protocol.heartbeat_ms", "must be positive"));
        }
        if p.heartbeat_timeout_ms <= p.heartbeat_ms {
            return Err(bad(
                "protocol.heartbeat_timeout_ms",
                "must exceed protocol.heartbeat_ms",
            ));
        }
        if p.bid_window_ms == 0 {
            return Err(bad("protocol.bid_window_ms", "must be positive"));
        }
        if p.offer_fanout == 0 {
            return Err(bad("protocol.offer_fanout", "must be positive"));
        }
        if p.stake == 0 || p.stake > 1 << 100 {
            return Err(bad(
                "protocol.stake",
                "must be positive (it is the escrow's minStake)",
            ));
        }
        let c = &self.chain;
        if c.min_verifier_stake == 0 || c.min_verifier_stake > 1 << 100 {
            return Err(bad(
                "chain.min_verifier_stake",
                "must be positive (the escrow's minVerifierStake)",
            ));
        }
        if p.verifier_stake < c.min_verifier_stake || p.verifier_stake > 1 << 100 {
            return Err(bad(
                "protocol.verifier_stake",
                "must be at least chain.min_verifier_stake, or no verifier is pooled",
            ));
        }
        if c.decision_window_s as f64 > MAX_SECONDS {
            return Err(bad("chain.decision_window_s", "under 100 years"));
        }
        let h = &self.hostile;
        check_prob("hostile.byzantine_verifiers", h.byzantine_verifiers)?;
        check_prob("hostile.withhold_pay_clients", h.withhold_pay_clients)?;
        let n = &self.network;
        check_nonneg("network.latency_median_ms", n.latency_median_ms)?;
        check_nonneg("network.latency_sigma", n.latency_sigma)?;
        check_prob("network.loss", n.loss)?;
        if n.loss >= 1.0 {
            return Err(bad(
                "network.loss",
                "must be below 1 (nothing would ever arrive)",
            ));
        }
        check_nonneg("network.bandwidth_median_mbps", n.bandwidth_median_mbps)?;
        if n.bandwidth_median_mbps <= 0.0 {
            return Err(bad("network.bandwidth_median_mbps", "must be positive"));
        }
        check_nonneg("network.bandwidth_sigma", n.bandwidth_sigma)?;
        check_nonneg("network.partition_every_s", n.partition_every_s)?;
        check_nonneg("network.partition_duration_s", n.partition_duration_s)?;
        check_prob("network.partition_fraction", n.partition_fraction)?;
        if self.chain.block_ms == 0 {
            return Err(bad("chain.block_ms", "must be positive"));
        }
        check_nonneg("churn.mttf_s", self.churn.mttf_s)?;
        check_nonneg("churn.rejoin_s", self.churn.rejoin_s)?;
        check_prob("cheat.fraction", self.cheat.fraction)?;
        check_prob("cheat.rate", self.cheat.rate)?;
        check_prob("cheat.lazy_skip", self.cheat.lazy_skip)?;
        if self.cheat.fraction > 0.0 && self.cheat.kinds.is_empty() {
            return Err(bad("cheat.kinds", "empty while cheat.fraction > 0"));
        }
        if self.hardware.is_empty() {
            return Err(bad("hardware", "at least one hardware class"));
        }
        for (i, h) in self.hardware.iter().enumerate() {
            if !(h.steps_per_s.is_finite() && h.steps_per_s > 0.0) {
                return Err(bad(
                    &format!("hardware[{i}].steps_per_s"),
                    "must be positive",
                ));
            }
            check_nonneg(&format!("hardware[{i}].weight"), h.weight)?;
        }
        if self.hardware.iter().all(|h| h.weight == 0.0)
            && self.named_providers.len() < self.providers as usize
        {
            return Err(bad("hardware", "all weights are zero"));
        }
        if self.price_min == 0 || self.price_min > self.price_max {
            return Err(bad("price_min", "must be positive and ≤ price_max"));
        }
        if self.named_providers.len() > self.providers as usize {
            return Err(bad(
                "named_providers",
                "more named providers than `providers`",
            ));
        }
        for (i, np) in self.named_providers.iter().enumerate() {
            if !self.hardware.iter().any(|h| h.name == np.hardware) {
                return Err(bad(
                    &format!("named_providers[{i}].hardware"),
                    format!("no hardware class `{}`", np.hardware),
                ));
            }
            if np.price_per_step == 0 {
                return Err(bad(
                    &format!("named_providers[{i}].price_per_step"),
                    "must be positive",
                ));
            }
        }
        if j.checkpoint_interval > gpuchain_protocol::spec::MAX_CHECKPOINT_INTERVAL {
            return Err(bad(
                "job.checkpoint_interval",
                "the protocol's announcements carry at most 1024 state hashes",
            ));
        }
        if let Some(s) = self.faults_stop_s {
            check_nonneg("faults_stop_s", s)?;
        }
        for (i, s) in self.script.iter().enumerate() {
            check_nonneg(&format!("script[{i}].at_s"), s.at_s)?;
            if !self.named_providers.iter().any(|np| np.name == s.provider) {
                return Err(bad(
                    &format!("script[{i}].provider"),
                    format!("no named provider `{}`", s.provider),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let e = SimConfig::from_toml("clients = 0").expect_err("zero clients");
        assert_eq!(e.field, "clients");
        let e = SimConfig::from_toml("[job]\nquorum = 3\ncommittee_size = 2").expect_err("quorum");
        assert_eq!(e.field, "job.quorum");
        // A quorum that is no strict majority lets two quorums disagree: refused.
        let e =
            SimConfig::from_toml("[job]\nquorum = 2\ncommittee_size = 4").expect_err("majority");
        assert_eq!(e.field, "job.quorum");
        let e = SimConfig::from_toml("[job]\nquorum = 1\ncommittee_size = 1").expect_err("size");
        assert_eq!(e.field, "job.committee_size");
        let e = SimConfig::from_toml("verifiers = 2\n[job]\nquorum = 2\ncommittee_size = 3")
            .expect_err("pool too small");
        assert_eq!(e.field, "job.committee_size");
        let e = SimConfig::from_toml("[job]\nverifiers_per_job = 2").expect_err("renamed");
        assert_eq!(e.field, "job.verifiers_per_job");
        assert!(e.reason.contains("committee_size"), "{e}");
        // The budget covers every seat's fee on every checkpoint, not only the steps.
        let e = SimConfig::from_toml("[job]\nbudget = 4000000\nverifier_fee = 1000")
            .expect_err("fees uncovered");
        assert_eq!(e.field, "job.budget");
        let e = SimConfig::from_toml("[protocol]\nverifier_stake = 1").expect_err("unpooled");
        assert_eq!(e.field, "protocol.verifier_stake");
        let e = SimConfig::from_toml("[hostile]\nbyzantine_verifiers = 2.0").expect_err("fraction");
        assert_eq!(e.field, "hostile.byzantine_verifiers");
        let e = SimConfig::from_toml("[network]\nloss = 1.5").expect_err("loss");
        assert_eq!(e.field, "network.loss");
        let e = SimConfig::from_toml("[job]\nbudget = 10").expect_err("budget");
        assert_eq!(e.field, "job.budget");
        let e = SimConfig::from_toml("bogus = 1").expect_err("unknown");
        assert!(e.reason.contains("bogus"), "{e}");
        let e = SimConfig::from_toml("driver = \"stand-in\"").expect_err("stand-ins are gone");
        assert_eq!(e.field, "driver");
        assert!(e.reason.contains("protocol crate's machines"), "{e}");
        let e = SimConfig::from_toml("[protocol]\nclient_only_heartbeats = true")
            .expect_err("heartbeats have their own topic now");
        assert_eq!(e.field, "protocol.client_only_heartbeats");
        assert!(e.reason.contains("heartbeat topic"), "{e}");
        let e = SimConfig::from_toml("duration_s = \"long\"").expect_err("type");
        assert!(e.to_string().contains("duration_s"), "{e}");
        let e = SimConfig::from_toml("[[script]]\nat_s = 1.0\nprovider = \"Z\"\naction = \"kill\"")
            .expect_err("script");
        assert_eq!(e.field, "script[0].provider");
    }

    #[test]
    fn default_round_trips_through_toml() {
        let cfg = SimConfig::default();
        let back = SimConfig::from_toml(&cfg.to_toml()).expect("round trip");
        assert_eq!(back, cfg);
    }
}
