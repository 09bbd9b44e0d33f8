//! Failure detection for one assignment: is the provider alive (liveness), and is it getting
//! anywhere (progress)?
//!
//! **Liveness** adapts to each provider's observed heartbeat rhythm, phi-accrual style. The
//! last [`GAP_WINDOW`] inter-arrival gaps give a mean `μ` and a standard deviation `σ`; the
//! provider is suspected once nothing has arrived for `2μ + PHI_K·σ`, clamped to
//! `[floor, timeout]`. `2μ` is when the next-but-one heartbeat is due, so one lost heartbeat
//! (a single gap of about 2 periods) never fails over; `PHI_K·σ` is phi-accrual's threshold
//! written as a timeout under a normal model of the gaps (for one gap, `μ + 4σ` is a phi of
//! about 4.5: one false suspicion in ~30 000 gaps, and we also demand a whole missing beat
//! on top). The floor (`floor`, 2.5 periods by default) keeps a perfectly regular rhythm (σ = 0,
//! as in virtual time) from cutting the margin for a lost heartbeat below half a period; the
//! ceiling is the configured `timeout`, so adapting never makes detection slower than a fixed
//! timeout, and until [`MIN_GAPS`] gaps are known the configured timeout applies as before.
//! A steady 100 ms provider that freezes is so noticed 250 ms after its last heartbeat; one
//! whose heartbeats jitter (a loaded host, a congested mesh) widens its own margin up to the
//! ceiling instead of being failed over, and a false failover is expensive (the new epoch
//! fences the provider and its unaccepted steps are lost).
//!
//! The floor also covers one lost heartbeat on the provider's network path. On Linux TCP
//! (RACK loss detection, the default since 4.18) a lost segment is resent once the next
//! heartbeat's acknowledgement shows it missing, so the client hears it about two periods
//! plus one round trip after the one before it. Once the transport has measured the round
//! trip to the provider ([`FailureDetector::path_rtt`]), the floor is at least
//! [`FailureDetector::one_loss_gap`], `2 × period + 1.25 × RTT + period / 2`: on loopback or
//! a LAN that is 250 ms and the configured floor rules; across an ocean (RTT 150 ms) it is
//! 440 ms.
//!
//! A closed connection to the provider is a strong hint: the deadline is pulled in to
//! `closed_grace` from then (a reconnect or a heartbeat through another peer cancels it).
//!
//! **Progress**: heartbeats carry the provider's step. A process that still heartbeats while
//! its GPU hangs is alive but useless, and without this the job would wait for its deadline.
//! The detector records when the step last advanced and estimates the provider's own step time
//! (the mean of its last [`STEP_WINDOW`] per-step times, or of the last two when that is
//! slower, so a provider slowed for a while stretches its own allowance); the provider is *stalled*
//! once no step has completed for `stall_factor × step time + slack` (at least
//! `stall_floor`). Two things a heartbeat says besides the step keep that tight rule from
//! taking an honest provider for a hung one:
//! - *checkpointing*: while the trainer makes a checkpoint (hashing states, adding blobs) the
//!   allowance is at least `checkpoint_floor`, or twice the slowest checkpoint seen, and the
//!   step clock restarts when it is done. Only then: a hang next to a checkpoint is judged at
//!   the step pace like any other.
//! - *starved_ms*: the provider's compute threads' total wait for a CPU. Load on the host
//!   (its own verifier, a neighbour, a CPU hog) makes a step slow, not absent, and shows up
//!   there, so the wait since the clock started is added to the allowance (and left out of
//!   the step-time samples). A hung GPU waits for no CPU and gets no credit. The credit is
//!   capped by the time heard so far and by `max_starved_credit`, so a provider that inflates
//!   it delays only its own failover, by at most that cap.
//!
//! Before the first advance of an assignment (model load, checkpoint fetch) and until
//! [`MIN_STEP_SAMPLES`] step times are known, the allowance is `first_step_floor`. Once the
//! last step is reached nothing more is expected, so a finished provider waiting for its
//! decision is never stalled.

use std::time::Duration;

use crate::time::Time;
use crate::types::Step;

/// Inter-arrival gaps kept per watched provider: enough for a stable σ, short enough to
/// follow a change of load within a few seconds at 10 Hz.
pub const GAP_WINDOW: usize = 32;
/// Gaps needed before the adaptive timeout replaces the configured one.
pub const MIN_GAPS: usize = 8;
/// Standard deviations of margin on top of two mean gaps (phi-accrual's threshold).
pub const PHI_K: f64 = 4.0;
/// Per-step times kept for the provider's step-time estimate.
pub const STEP_WINDOW: usize = 16;
/// Step times needed before the estimate is trusted over `first_step_floor`.
pub const MIN_STEP_SAMPLES: usize = 3;
/// The last `N` samples (saturated to `u32`: 49 days of milliseconds) with their running
/// sums, held inline: the detector's timeouts are read on every heartbeat and, by the client,
/// for every live job after each of its inputs, so a walk over the window each time, in a
/// buffer of its own that was cold at every heartbeat, was the detector's main cost at many
/// jobs.
#[derive(Clone, Debug)]
struct Window<const N: usize> {
    samples: [u32; N],
    /// Where the oldest sample is.
    head: usize,
    len: usize,
    sum: u64,
    sum_sq: u128,
}

impl<const N: usize> Window<N> {
    fn new() -> Self {
        Window {
            samples: [0; N],
            head: 0,
            len: 0,
            sum: 0,
            sum_sq: 0,
        }
    }

    fn push(&mut self, x: u64) {
        let x = u32::try_from(x).unwrap_or(u32::MAX);
        let at = (self.head + self.len) % N;
        if self.len == N {
            let old = self.samples[self.head];
            self.sum -= u64::from(old);
            self.sum_sq -= u128::from(old) * u128::from(old);
            self.head = (self.head + 1) % N;
        } else {
            self.len += 1;
        }
        self.samples[at] = x;
        self.sum += u64::from(x);
        self.sum_sq += u128::from(x) * u128::from(x);
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The mean, rounded down; 0 when empty.
    fn mean_floor(&self) -> u64 {
        self.sum.checked_div(self.len as u64).unwrap_or(0)
    }

    /// The mean and the (population) variance, from the exact integer sums.
    fn mean_var(&self) -> (f64, f64) {
        if self.len == 0 {
            return (0.0, 0.0);
        }
        let n = self.len as u128;
        let sum = u128::from(self.sum);
        // n·Σx² − (Σx)² ≥ 0 exactly (Cauchy–Schwarz), then one rounding each.
        let spread = (n * self.sum_sq).saturating_sub(sum * sum);
        let n = n as f64;
        (sum as f64 / n, spread as f64 / (n * n))
    }

    /// The mean of the last `k` samples (at least one), rounded down; 0 when empty.
    fn recent_mean_floor(&self, k: usize) -> u64 {
        let k = k.min(self.len);
        if k == 0 {
            return 0;
        }
        let newest = self.head + self.len;
        let total: u64 = (1..=k)
            .map(|i| u64::from(self.samples[(newest - i) % N]))
            .sum();
        total / k as u64
    }
}

/// The allowance while checkpointing is at least this many times the slowest checkpoint seen
/// (plus the slack).
pub const CHECKPOINT_FACTOR: u32 = 2;

/// What a heartbeat says about the provider's work besides its step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Busy {
    /// Making the checkpoint of the step reported.
    pub checkpointing: bool,
    /// The compute threads' total wait for a CPU, ms (never decreases).
    pub starved_ms: u64,
}

/// Why a provider was given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Suspicion {
    /// No heartbeat for the (adaptive) timeout, or a closed connection not reopened.
    Lost,
    /// Heartbeating, but no step completed for several of its own step times.
    Stalled,
}

impl Suspicion {
    /// The name in events and status: `"lost"`, `"stalled"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Suspicion::Lost => "lost",
            Suspicion::Stalled => "stalled",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    /// The providers' heartbeat period.
    pub period: Duration,
    /// The ceiling of the adaptive liveness timeout, and the timeout until enough gaps are
    /// known.
    pub timeout: Duration,
    /// The least adaptive timeout; at least 2 periods (one lost heartbeat). The default, 2.5
    /// periods, is one lost heartbeat plus half a period of jitter, the margin the fixed
    /// 250 ms default had.
    pub floor: Duration,
    pub closed_grace: Duration,
    /// The least stall allowance, whatever the step time. Load on the provider's host comes
    /// back as starvation credit, so this only covers what the credit cannot see (page
    /// faults, a blocked write); the hang target is `3 × step + 500 ms`.
    pub stall_floor: Duration,
    /// Stalled after this many of the provider's step times without a completed step.
    pub stall_factor: u32,
    /// Added to the stall allowance: heartbeats show an advance only when they are sent
    /// (every `period`, and one may be lost), so the observed step time is quantised.
    pub stall_slack: Duration,
    /// The allowance before the first step of an assignment (model load, checkpoint fetch)
    /// and until the step time is known.
    pub first_step_floor: Duration,
    /// The least allowance while the provider says it is making a checkpoint.
    pub checkpoint_floor: Duration,
    /// The most starvation credit one stall allowance gets: a host that leaves the trainer
    /// no CPU for this long is of no use to the job either.
    pub max_starved_credit: Duration,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            period: Duration::from_millis(100),
            timeout: Duration::from_millis(250),
            floor: Duration::from_millis(250),
            closed_grace: Duration::from_millis(50),
            stall_floor: Duration::from_millis(500),
            stall_factor: 3,
            stall_slack: Duration::from_millis(500),
            first_step_floor: Duration::from_secs(60),
            checkpoint_floor: Duration::from_secs(5),
            max_starved_credit: Duration::from_secs(30),
        }
    }
}

/// What the progress half knows of the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressSpec {
    /// The step the assignment starts from.
    pub start_step: Step,
    pub checkpoint_interval: Step,
    /// No progress is expected at or past this step.
    pub end_step: Step,
}

#[derive(Clone, Debug)]
struct Progress {
    spec: ProgressSpec,
    last_step: Step,
    /// When the step clock last started: the latest advance, or the end of a checkpoint after
    /// it. `None` before the first advance of the assignment.
    clock: Option<Time>,
    /// Whether `clock` was started by a checkpoint's end rather than by an advance.
    clock_after_checkpoint: bool,
    /// Per-step times in ms (starvation left out) of advances that made no checkpoint.
    step_ms: Window<STEP_WINDOW>,
    /// The slowest checkpoint seen, in ms.
    checkpoint_ms: u64,
    /// When the provider began the checkpoint it is making, if it says it is.
    checkpointing_since: Option<Time>,
    /// The provider's reported starvation now, and when the clock started.
    starved_ms: u64,
    starved_at_clock: u64,
}

#[derive(Clone, Debug)]
pub struct FailureDetector {
    config: DetectorConfig,
    armed_at: Time,
    last_heard: Time,
    heard_any: bool,
    gaps_ms: Window<GAP_WINDOW>,
    /// The liveness deadline.
    deadline: Time,
    progress: Option<Progress>,
    /// The round trip to the provider, as the transport measured it.
    rtt: Option<Duration>,
}

impl FailureDetector {
    /// Armed at `now`: a fresh assignment gets a full timeout before its first heartbeat is
    /// due. Liveness only; see [`FailureDetector::watching_progress`].
    pub fn new(config: DetectorConfig, now: Time) -> Self {
        FailureDetector {
            config,
            armed_at: now,
            last_heard: now,
            heard_any: false,
            gaps_ms: Window::new(),
            deadline: now.saturating_add(config.timeout),
            progress: None,
            rtt: None,
        }
    }

    /// The transport measured the round trip to the provider: from the next heartbeat on,
    /// the floor is at least what one lost heartbeat costs on that path. The deadline already
    /// set stands, so that a measurement can never undo a closed connection's pull-in.
    pub fn path_rtt(&mut self, rtt: Duration) {
        self.rtt = Some(rtt);
    }

    /// The gap after one lost heartbeat on a path of round trip `rtt`: the next heartbeat's
    /// acknowledgement, a period later, shows the loss; the resend arrives a round trip and
    /// RACK's reordering window (a quarter round trip) after that; half a period covers the
    /// hosts' scheduling.
    pub fn one_loss_gap(period: Duration, rtt: Duration) -> Duration {
        period * 2 + rtt + rtt / 4 + period / 2
    }

    /// Also expects the step to advance.
    pub fn watching_progress(mut self, spec: ProgressSpec) -> Self {
        self.progress = Some(Progress {
            spec,
            last_step: spec.start_step,
            clock: None,
            clock_after_checkpoint: false,
            step_ms: Window::new(),
            checkpoint_ms: 0,
            checkpointing_since: None,
            starved_ms: 0,
            starved_at_clock: 0,
        });
        self
    }

    /// A new heartbeat arrived at `now`.
    pub fn heard(&mut self, now: Time) {
        if self.heard_any && now > self.last_heard {
            self.gaps_ms
                .push(now.since(self.last_heard).as_millis() as u64);
        }
        // The wait for the first heartbeat (the provider starting up) is not a gap.
        self.heard_any = true;
        self.last_heard = self.last_heard.max(now);
        self.deadline = self.last_heard.saturating_add(self.liveness_timeout());
    }

    /// A heartbeat at `now` reported `step`, and what the provider was busy with.
    pub fn progressed(&mut self, now: Time, step: Step, busy: Busy) {
        let Some(p) = self.progress.as_mut() else {
            return;
        };
        p.starved_ms = p.starved_ms.max(busy.starved_ms);
        if step > p.last_step {
            if let Some(prev) = p.clock {
                let elapsed = now.since(prev).as_millis() as u64;
                let starved = p.starved_ms.saturating_sub(p.starved_at_clock);
                // An advance that included making a checkpoint, unseen because it was quicker
                // than a heartbeat period, says nothing reliable of a step's time.
                let made_checkpoint = !p.clock_after_checkpoint
                    && checkpoint_between(p.spec.checkpoint_interval, p.last_step, step);
                if !made_checkpoint {
                    p.step_ms
                        .push(elapsed.saturating_sub(starved) / (step - p.last_step));
                }
            }
            // The first advance measures start-up, not a step: it only starts the clock.
            p.last_step = step;
            p.clock = Some(now);
            p.clock_after_checkpoint = false;
            p.starved_at_clock = p.starved_ms;
            p.checkpointing_since = None;
        }
        match (busy.checkpointing, p.checkpointing_since) {
            (true, None) => p.checkpointing_since = Some(now),
            (false, Some(since)) => {
                p.checkpoint_ms = p.checkpoint_ms.max(now.since(since).as_millis() as u64);
                p.checkpointing_since = None;
                p.clock = Some(now);
                p.clock_after_checkpoint = true;
                p.starved_at_clock = p.starved_ms;
            }
            _ => {}
        }
    }

    pub fn connection_closed(&mut self, now: Time) {
        self.deadline = self
            .deadline
            .min(now.saturating_add(self.config.closed_grace));
    }

    /// The liveness timeout as it stands: adaptive once enough gaps are known.
    pub fn liveness_timeout(&self) -> Duration {
        let ceiling = self.config.timeout;
        if self.gaps_ms.len() < MIN_GAPS {
            return ceiling;
        }
        let (mean, var) = self.gaps_ms.mean_var();
        let adaptive = Duration::from_millis((2.0 * mean + PHI_K * var.sqrt()).ceil() as u64);
        let path = self.rtt.map_or(Duration::ZERO, |rtt| {
            Self::one_loss_gap(self.config.period, rtt)
        });
        let floor = self.config.floor.max(path).min(ceiling);
        adaptive.clamp(floor, ceiling)
    }

    /// When the provider counts as stalled if its step does not advance first; `None` when no
    /// progress is watched or expected.
    pub fn stall_deadline(&self) -> Option<Time> {
        let p = self.progress.as_ref()?;
        if p.last_step >= p.spec.end_step {
            return None;
        }
        let c = &self.config;
        let Some(clock) = p.clock else {
            return Some(self.armed_at.saturating_add(c.first_step_floor));
        };
        // What the provider waited for a CPU since the clock started: never more than the
        // time heard since then, nor than the cap.
        let credit = Duration::from_millis(p.starved_ms.saturating_sub(p.starved_at_clock))
            .min(self.last_heard.since(clock))
            .min(c.max_starved_credit);
        if p.step_ms.len() < MIN_STEP_SAMPLES {
            return Some(clock.saturating_add(c.first_step_floor + credit));
        }
        // The window's mean, or the last two steps' if slower. Heartbeats quantise each
        // sample to whole periods (150 ms steps seen every 100 ms read as 100, 200, 100, …),
        // which a mean averages out and a median or a single sample does not; the recent
        // mean lets a host that slows down for a while (a throttling GPU) stretch its own
        // allowance within two steps, while a hang stops the steps and is caught at the old
        // pace.
        let mean = p.step_ms.mean_floor();
        let recent = p.step_ms.recent_mean_floor(2);
        let step_time = Duration::from_millis(mean.max(recent));
        // Two periods at least: a lost heartbeat delays the sight of an advance by one.
        let slack = c.stall_slack.max(c.period * 2);
        let allowance = (step_time * c.stall_factor + slack).max(c.stall_floor);
        let deadline = match p.checkpointing_since {
            Some(since) => {
                let seen = Duration::from_millis(p.checkpoint_ms) * CHECKPOINT_FACTOR + slack;
                since.saturating_add(allowance.max(c.checkpoint_floor).max(seen))
            }
            None => clock.saturating_add(allowance),
        };
        Some(deadline.saturating_add(credit))
    }

    /// The next time a verdict may change.
    pub fn deadline(&self) -> Time {
        match self.stall_due() {
            Some(s) => s.min(self.deadline),
            None => self.deadline,
        }
    }

    /// The stall deadline, once the heartbeats heard can back a stall verdict there: only a
    /// provider heard within a period of it, still at its old step, is stalled. One whose
    /// heartbeats were lost meanwhile (a lossy link, a partition) shows no progress because
    /// nothing was heard at all, which is the liveness rule's to judge; its next heartbeat
    /// settles it either way.
    fn stall_due(&self) -> Option<Time> {
        self.stall_deadline()
            .filter(|s| self.last_heard.saturating_add(self.config.period) >= *s)
    }

    pub fn last_heard(&self) -> Time {
        self.last_heard
    }

    /// When the step clock last started: the latest advance or the end of a checkpoint (the
    /// arming time before any advance).
    pub fn last_progress(&self) -> Time {
        self.progress
            .as_ref()
            .and_then(|p| p.clock)
            .unwrap_or(self.armed_at)
    }

    /// The provider's verdict at `now`: silence outranks a stall (a silent provider is not
    /// heard progressing either).
    pub fn suspicion(&self, now: Time) -> Option<Suspicion> {
        if now >= self.deadline {
            return Some(Suspicion::Lost);
        }
        match self.stall_due() {
            Some(s) if now >= s => Some(Suspicion::Stalled),
            _ => None,
        }
    }

    pub fn is_dead(&self, now: Time) -> bool {
        self.suspicion(now).is_some()
    }
}

/// Whether the work from just after `from` to `to` included making a checkpoint: the
/// provider reports a step before it makes that step's checkpoint, so a checkpoint at step
/// `c` lies between advances `from ≤ c < to`.
fn checkpoint_between(interval: Step, from: Step, to: Step) -> bool {
    let interval = interval.max(1);
    let c = from.div_ceil(interval).max(1) * interval;
    c >= from && c < to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_its_sums_as_a_walk_over_its_samples_would() {
        let mut w = Window::<5>::new();
        assert_eq!((w.len(), w.mean_floor(), w.mean_var()), (0, 0, (0.0, 0.0)));
        // Gaps with jitter, one outlier, and more than the window holds: the sums must
        // forget what left.
        let xs = [
            100u64,
            104,
            97,
            100,
            2_500,
            99,
            101,
            103,
            98,
            100,
            u64::from(u32::MAX),
            7,
        ];
        for (i, &x) in xs.iter().enumerate() {
            w.push(x);
            let kept = &xs[(i + 1).saturating_sub(5)..=i];
            assert_eq!(w.len(), kept.len());
            let n = kept.len() as f64;
            let mean = kept.iter().map(|&g| g as f64).sum::<f64>() / n;
            let var = kept.iter().map(|&g| (g as f64 - mean).powi(2)).sum::<f64>() / n;
            let (m, v) = w.mean_var();
            assert!(
                (m - mean).abs() <= mean * 1e-12,
                "mean after {i}: {m} vs {mean}"
            );
            assert!(
                (v - var).abs() <= var.max(1.0) * 1e-9,
                "var after {i}: {v} vs {var}"
            );
            assert_eq!(w.mean_floor(), kept.iter().sum::<u64>() / kept.len() as u64);
            let last2 = &kept[kept.len().saturating_sub(2)..];
            assert_eq!(
                w.recent_mean_floor(2),
                last2.iter().sum::<u64>() / last2.len() as u64
            );
        }
        // A sample past u32 (a gap of 49 days) counts as u32::MAX, not as a wrapped value.
        let mut w = Window::<2>::new();
        w.push(u64::MAX);
        w.push(1);
        assert_eq!(w.mean_floor(), 1 << 31, "(2³² − 1 + 1) / 2");
    }

    fn ms(t: u64) -> Time {
        Time::from_millis(t)
    }

    #[test]
    fn one_lost_heartbeat_is_tolerated() {
        let mut d = FailureDetector::new(DetectorConfig::default(), ms(0));
        d.heard(ms(100));
        // The heartbeat at 200 is lost; at 299 we are still inside the timeout.
        assert!(!d.is_dead(ms(299)));
        d.heard(ms(300));
        assert!(!d.is_dead(ms(540)));
    }

    #[test]
    fn death_is_declared_within_300ms_of_last_heartbeat() {
        let mut d = FailureDetector::new(DetectorConfig::default(), ms(0));
        d.heard(ms(1000));
        // Death any time after 1000 (before the next beat at 1100) is noticed by 1250.
        assert!(!d.is_dead(ms(1249)));
        assert!(d.is_dead(ms(1250)));
        assert!(d.deadline().since(ms(1000)) <= Duration::from_millis(300));
    }

    #[test]
    fn closed_connection_speeds_detection_and_heartbeat_cancels() {
        let mut d = FailureDetector::new(DetectorConfig::default(), ms(0));
        d.heard(ms(1000));
        d.connection_closed(ms(1010));
        assert_eq!(d.deadline(), ms(1060));
        d.heard(ms(1040));
        assert_eq!(d.deadline(), ms(1290));
    }

    /// The node's configuration: a 100 ms period under a 750 ms ceiling.
    fn node_config() -> DetectorConfig {
        DetectorConfig {
            timeout: Duration::from_millis(750),
            floor: Duration::from_millis(300),
            ..DetectorConfig::default()
        }
    }

    /// A small deterministic jitter pattern, in ms.
    fn beat(d: &mut FailureDetector, from: u64, n: u64, jitter: &[i64]) -> u64 {
        let mut t = from;
        for i in 0..n {
            let j = jitter[i as usize % jitter.len()];
            t = (t as i64 + 100 + j) as u64;
            d.heard(ms(t));
        }
        t
    }

    #[test]
    fn frozen_after_a_steady_rhythm_is_noticed_within_300ms() {
        let mut d = FailureDetector::new(node_config(), ms(0));
        // Before enough gaps are known the configured ceiling applies.
        d.heard(ms(100));
        assert_eq!(d.liveness_timeout(), Duration::from_millis(750));
        let last = beat(&mut d, 100, 40, &[3, -2, 1, -3, 2, -1]);
        let t = d.liveness_timeout();
        assert!(t <= Duration::from_millis(300), "{t:?}");
        assert!(d.deadline().since(ms(last)) <= Duration::from_millis(300));
        assert_eq!(d.suspicion(ms(last + 300)), Some(Suspicion::Lost));
    }

    #[test]
    fn deadline_adapts_to_jitter_between_floor_and_ceiling() {
        let calm = {
            let mut d = FailureDetector::new(node_config(), ms(0));
            beat(&mut d, 0, 40, &[0]);
            d.liveness_timeout()
        };
        // σ = 0: the floor.
        assert_eq!(calm, Duration::from_millis(300));
        let jittery = {
            let mut d = FailureDetector::new(node_config(), ms(0));
            beat(&mut d, 0, 40, &[40, -40, 30, -30, 50, -50]);
            d.liveness_timeout()
        };
        assert!(jittery > calm + Duration::from_millis(50), "{jittery:?}");
        assert!(jittery < Duration::from_millis(750), "{jittery:?}");
        // Wild gaps: the ceiling caps it.
        let wild = {
            let mut d = FailureDetector::new(node_config(), ms(0));
            beat(&mut d, 0, 40, &[400, -90, 300, -90, -90]);
            d.liveness_timeout()
        };
        assert_eq!(wild, Duration::from_millis(750));
    }

    #[test]
    fn a_long_path_raises_the_floor_to_what_one_lost_heartbeat_costs() {
        let mut d = FailureDetector::new(node_config(), ms(0));
        let last = beat(&mut d, 0, 40, &[0]);
        assert_eq!(d.liveness_timeout(), Duration::from_millis(300));
        // Loopback: one lost heartbeat costs 250 ms, under the configured floor.
        d.path_rtt(Duration::from_micros(200));
        assert_eq!(d.liveness_timeout(), Duration::from_millis(300));
        // A 160 ms round trip: 200 + 160 + 40 + 50, from the next heartbeat on.
        d.path_rtt(Duration::from_millis(160));
        assert_eq!(d.liveness_timeout(), Duration::from_millis(450));
        assert_eq!(d.deadline(), ms(last + 300));
        d.heard(ms(last + 100));
        assert!(!d.is_dead(ms(last + 100 + 440)));
        assert!(d.is_dead(ms(last + 100 + 450)));
        // A closed connection still pulls the deadline in, and a measurement after it does
        // not push it out again.
        d.connection_closed(ms(last + 150));
        d.path_rtt(Duration::from_millis(200));
        assert!(d.is_dead(ms(last + 200)));
        // Never past the ceiling.
        d.path_rtt(Duration::from_secs(2));
        assert_eq!(d.liveness_timeout(), Duration::from_millis(750));
    }

    #[test]
    fn one_lost_heartbeat_after_adapting_is_not_a_failure() {
        let mut d = FailureDetector::new(node_config(), ms(0));
        let last = beat(&mut d, 0, 40, &[5, -5, 3, -3]);
        // The next beat is lost; the one after arrives a little late.
        assert!(!d.is_dead(ms(last + 200 + 20)));
        d.heard(ms(last + 220));
        assert!(!d.is_dead(ms(last + 320)));
    }

    fn progress_spec() -> ProgressSpec {
        ProgressSpec {
            start_step: 0,
            checkpoint_interval: 10,
            end_step: 40,
        }
    }

    /// Heartbeats every 100 ms, a step every `step_ms`, with checkpoint steps followed by
    /// `checkpoint_ms` of making the checkpoint (reported as such), asserting at every
    /// heartbeat that this honest provider is suspected of nothing; returns the time of the
    /// last heartbeat, at which `upto` was reported.
    fn train(d: &mut FailureDetector, step_ms: u64, checkpoint_ms: u64, upto: Step) -> u64 {
        let start = 2000; // the model load
        // (step done, its checkpoint done)
        let mut done_at = Vec::new();
        let mut t = start;
        for s in 1..=upto {
            t += step_ms;
            let done = t;
            if s % 10 == 0 {
                t += checkpoint_ms;
            }
            done_at.push((done, t));
        }
        let mut now = 0;
        loop {
            now += 100;
            let step = done_at.iter().take_while(|&&(a, _)| a <= now).count();
            let checkpointing = step > 0 && done_at[step - 1].1 > now;
            d.heard(ms(now));
            d.progressed(
                ms(now),
                step as Step,
                Busy {
                    checkpointing,
                    starved_ms: 0,
                },
            );
            assert_eq!(d.suspicion(ms(now)), None, "at {now} ms, step {step}");
            if step as Step >= upto && !checkpointing {
                return now;
            }
        }
    }

    /// One heartbeat at `now` reporting `step`, idle.
    fn beat_at(d: &mut FailureDetector, now: u64, step: Step, starved_ms: u64) {
        d.heard(ms(now));
        d.progressed(
            ms(now),
            step,
            Busy {
                checkpointing: false,
                starved_ms,
            },
        );
    }

    /// Heartbeats at `step` from `from` on, until a verdict; the time it came.
    fn hang_until_verdict(d: &mut FailureDetector, from: u64, step: Step) -> u64 {
        let mut now = from;
        while d.suspicion(ms(now)).is_none() {
            now += 100;
            beat_at(d, now, step, 0);
        }
        assert_eq!(d.suspicion(ms(now)), Some(Suspicion::Stalled));
        now
    }

    #[test]
    fn a_stall_is_declared_at_about_three_step_times_plus_slack() {
        let mut d = FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
        let last = train(&mut d, 600, 0, 15);
        let hung_for = hang_until_verdict(&mut d, last, 15) - last;
        // 3 × 600 + 500, give or take a heartbeat.
        assert!((2200..=2400).contains(&hung_for), "{hung_for}");
    }

    #[test]
    fn fast_steps_are_judged_at_their_own_pace() {
        // A CPU CNN step: 150 ms. The hang target is 3 × 150 + 500 ms.
        let mut d = FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
        let last = train(&mut d, 150, 0, 15);
        let hung_for = hang_until_verdict(&mut d, last, 15) - last;
        assert!(hung_for <= 3 * 150 + 500 + 100, "{hung_for}");
    }

    #[test]
    fn a_gradual_slowdown_is_not_a_stall() {
        // What the e2e run showed on a shared 2-core host: ~300 ms steps, then the verifiers'
        // evaluation of checkpoint 10 slows steps to 0.9, 1.0, 1.9, 1.0 s.
        let mut d = FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
        let mut done_at: Vec<u64> = (1..=10).map(|s| 2000 + 300 * s).collect();
        for slow in [900, 1000, 1900, 1000, 1500, 2500, 1200] {
            done_at.push(done_at.last().unwrap() + slow);
        }
        let mut now = 0;
        while now < *done_at.last().unwrap() + 100 {
            now += 100;
            let step = done_at.iter().take_while(|&&a| a <= now).count() as Step;
            beat_at(&mut d, now, step, 0);
            assert_eq!(d.suspicion(ms(now)), None, "at {now} ms, step {step}");
        }
    }

    #[test]
    fn a_starved_step_is_not_a_stall_and_a_hang_gets_no_credit() {
        // The soak's false failover: 400 ms steps, then one of 3.1 s on a host whose other
        // work took the CPU from the trainer for 2.7 s of it.
        let run = |report_starvation: bool| {
            let mut d =
                FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
            let last = train(&mut d, 400, 0, 5);
            let mut now = last;
            let mut verdict = None;
            while now < last + 3100 {
                now += 100;
                // Starved for all but 400 ms of the slow step.
                let starved = if report_starvation {
                    (now - last).saturating_sub(400).min(2700)
                } else {
                    0
                };
                beat_at(&mut d, now, 5, starved);
                verdict = verdict.or(d.suspicion(ms(now)));
            }
            now += 100;
            beat_at(&mut d, now, 6, if report_starvation { 2700 } else { 0 });
            (verdict, d, now)
        };
        let (verdict, mut d, last) = run(true);
        assert_eq!(verdict, None);
        // The starved step did not inflate the step time: a hang now is caught at the pace
        // of 400 ms steps, with no credit since nothing more was starved.
        let hung_for = hang_until_verdict(&mut d, last, 6) - last;
        // The slow step counts 500 ms (its 3.2 s seen less 2.7 s starved), so the pace is
        // 450 ms a step at most; a credit would have added seconds.
        assert!(hung_for <= 3 * 450 + 500 + 100, "{hung_for}");
        // Without the starvation reported, the same slow step is a stall.
        assert_eq!(run(false).0, Some(Suspicion::Stalled));
    }

    #[test]
    fn starvation_credit_is_capped() {
        let cfg = DetectorConfig {
            max_starved_credit: Duration::from_secs(2),
            ..node_config()
        };
        let mut d = FailureDetector::new(cfg, ms(0)).watching_progress(progress_spec());
        let last = train(&mut d, 400, 0, 5);
        // A provider that claims to be starved all the time, and a lot more.
        let mut now = last;
        while d.suspicion(ms(now)).is_none() {
            now += 100;
            beat_at(&mut d, now, 5, (now - last) * 1000);
        }
        let hung_for = now - last;
        assert!(
            (3 * 400 + 500 + 2000..=3 * 400 + 500 + 2000 + 100).contains(&hung_for),
            "{hung_for}"
        );
    }

    #[test]
    fn a_lost_heartbeat_is_not_a_stall() {
        // The simulator's `faults` rhythm: heartbeats every 500 ms, a 1.25 s timeout, 60
        // steps a second. The stall allowance (3 × 17 ms + 2 periods) is under the gap a
        // lost heartbeat plus a late one leaves.
        let cfg = DetectorConfig {
            period: Duration::from_millis(500),
            timeout: Duration::from_millis(1250),
            floor: Duration::from_millis(1250),
            ..DetectorConfig::default()
        };
        let mut d = FailureDetector::new(cfg, ms(0)).watching_progress(ProgressSpec {
            start_step: 0,
            checkpoint_interval: 1000,
            end_step: 100_000,
        });
        let mut now = 0;
        for i in 1..=10u64 {
            now = 500 * i;
            beat_at(&mut d, now, 30 * i, 0);
        }
        // The next heartbeat is lost and the one after arrives 100 ms late.
        for t in (now..now + 1100).step_by(10) {
            assert_eq!(d.suspicion(ms(t)), None, "at {t}");
            assert!(d.deadline() >= ms(now + 1250), "{:?}", d.deadline());
        }
        beat_at(&mut d, now + 1100, 330, 0);
        assert_eq!(d.suspicion(ms(now + 1100)), None);
        // A hang is still caught, from the heartbeats that report it.
        let last = now + 1100;
        let mut t = last;
        while d.suspicion(ms(t)).is_none() {
            t += 500;
            beat_at(&mut d, t, 330, 0);
        }
        assert_eq!(d.suspicion(ms(t)), Some(Suspicion::Stalled));
        assert!(t - last <= 1500, "{}", t - last);
    }

    #[test]
    fn a_slow_checkpoint_is_not_a_stall() {
        let mut d = FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
        // Checkpoints take 8 step times (2.4 s at 300 ms a step); `train` checks every
        // heartbeat on the way.
        let last = train(&mut d, 300, 2400, 40);
        // Finished: waiting for the decision is not a stall.
        let mut now = last;
        for _ in 0..1000 {
            now += 100;
            d.heard(ms(now));
            assert_eq!(d.suspicion(ms(now)), None);
        }
    }

    #[test]
    fn a_hang_next_to_a_checkpoint_is_caught_at_the_step_pace() {
        // Steps of 300 ms, checkpoints of 2.4 s; the trainer hangs on the first step after
        // checkpoint 10 (the old rule gave every step within three of a checkpoint 5 s).
        let mut d = FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
        let last = train(&mut d, 300, 2400, 10);
        let hung_for = hang_until_verdict(&mut d, last, 10) - last;
        assert!(hung_for <= 3 * 300 + 500 + 100, "{hung_for}");
    }

    #[test]
    fn a_checkpoint_that_never_ends_is_a_stall() {
        let mut d = FailureDetector::new(node_config(), ms(0)).watching_progress(progress_spec());
        let mut now = train(&mut d, 300, 0, 17);
        // Steps 18, 19 and 20, whose checkpoint starts and never finishes.
        for step in 18..=20 {
            for _ in 0..3 {
                now += 100;
                beat_at(&mut d, now, step - 1, 0);
            }
            now += 100;
            beat_at(&mut d, now, step, 0);
        }
        let started = now;
        while d.suspicion(ms(now)).is_none() {
            d.heard(ms(now));
            d.progressed(
                ms(now),
                20,
                Busy {
                    checkpointing: true,
                    starved_ms: 0,
                },
            );
            now += 100;
        }
        let took = now - started;
        assert!((5000..=5200).contains(&took), "{took}");
    }

    #[test]
    fn the_first_step_gets_its_floor() {
        let cfg = DetectorConfig {
            first_step_floor: Duration::from_secs(10),
            ..node_config()
        };
        let mut d = FailureDetector::new(cfg, ms(0)).watching_progress(progress_spec());
        let mut now = 0;
        while now < 9_900 {
            now += 100;
            beat_at(&mut d, now, 0, 0);
            assert_eq!(d.suspicion(ms(now)), None, "at {now}");
        }
        now += 100;
        d.heard(ms(now));
        assert_eq!(d.suspicion(ms(now)), Some(Suspicion::Stalled));
    }

    #[test]
    fn checkpoints_are_found_between_advances() {
        assert!(checkpoint_between(10, 10, 11));
        assert!(checkpoint_between(10, 8, 12));
        assert!(!checkpoint_between(10, 10, 10));
        assert!(!checkpoint_between(10, 11, 15));
        assert!(!checkpoint_between(10, 5, 10));
        assert!(checkpoint_between(10, 0, 11));
    }
}
