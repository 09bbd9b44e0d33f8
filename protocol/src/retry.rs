//! The one retry policy of the project: a bounded number of tries with exponential backoff.
//! It only computes waits, so the machines (which take time as an input and arm a timer) and
//! the drivers (which sleep, as the chain client does) share it.

use std::time::Duration;

use crate::time::Time;

/// How often and how patiently a failed operation is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    /// Wait before the second try; doubled after each failure.
    pub initial_backoff: Duration,
    /// Longest wait between tries.
    pub max_backoff: Duration,
}

impl RetryPolicy {
    pub const fn new(attempts: u32, initial_backoff: Duration, max_backoff: Duration) -> Self {
        Self {
            attempts,
            initial_backoff,
            max_backoff,
        }
    }

    /// The wait before the next try once `failed` tries (1 or more) have failed, or `None`
    /// when none is left.
    pub fn wait_after(&self, failed: u32) -> Option<Duration> {
        if failed >= self.attempts.max(1) {
            return None;
        }
        let doublings = failed.saturating_sub(1).min(31);
        Some(
            self.initial_backoff
                .saturating_mul(1u32 << doublings)
                .min(self.max_backoff),
        )
    }
}

/// Fetching a checkpoint blob from peers: three tries, 200 ms then 400 ms apart. A verifier
/// that still has not got it votes it down; a client gives up on its own copy.
pub const BLOB_FETCH: RetryPolicy =
    RetryPolicy::new(3, Duration::from_millis(200), Duration::from_secs(2));

/// A transaction the machines asked for, while the chain RPC cannot be reached: seven tries
/// over about half a minute (1, 2, 4 then 8 s apart), which rides out an RPC node's restart
/// or a short network cut. The driver waits; the machines hear of a failure only after it.
pub const CHAIN_OUTAGE: RetryPolicy =
    RetryPolicy::new(7, Duration::from_secs(1), Duration::from_secs(8));

/// One operation a machine retries on its own timer under a [`RetryPolicy`]: how many tries
/// failed and when the next one is due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retrying {
    failed: u32,
    due: Option<Time>,
}

/// What a failed try leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// The next try is due then.
    RetryAt(Time),
    /// A retry was already armed: this was a second answer to a try that had failed.
    AlreadyArmed,
    /// No try is left.
    GiveUp,
}

impl Retrying {
    /// A try failed at `now`.
    pub fn failed(&mut self, now: Time, policy: &RetryPolicy) -> AfterFailure {
        if self.due.is_some() {
            return AfterFailure::AlreadyArmed;
        }
        self.failed += 1;
        match policy.wait_after(self.failed) {
            Some(wait) => {
                let due = now + wait;
                self.due = Some(due);
                AfterFailure::RetryAt(due)
            }
            None => AfterFailure::GiveUp,
        }
    }

    /// When the next try is due, if one is armed.
    pub fn due(&self) -> Option<Time> {
        self.due
    }

    /// Whether the next try is due at `now`; if so it is disarmed, and the caller makes it.
    pub fn take_due(&mut self, now: Time) -> bool {
        let due = self.due.is_some_and(|t| t <= now);
        if due {
            self.due = None;
        }
        due
    }

    /// The operation succeeded another way: nothing is tried again.
    pub fn cancel(&mut self) {
        self.due = None;
    }
}

impl Default for RetryPolicy {
    /// Four tries over about 0.7 s: rides out a busy or restarting local peer, and fails fast
    /// enough that a wrong address is reported while the user still watches.
    fn default() -> Self {
        Self::new(4, Duration::from_millis(100), Duration::from_secs(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_operation_arms_once_per_failure_and_gives_up_after_the_last_try() {
        let t = Time::from_millis;
        let mut r = Retrying::default();
        assert_eq!(
            r.failed(t(1_000), &BLOB_FETCH),
            AfterFailure::RetryAt(t(1_200))
        );
        assert_eq!(r.failed(t(1_000), &BLOB_FETCH), AfterFailure::AlreadyArmed);
        assert!(!r.take_due(t(1_199)));
        assert!(r.take_due(t(1_200)));
        assert_eq!(r.due(), None);
        assert_eq!(
            r.failed(t(1_300), &BLOB_FETCH),
            AfterFailure::RetryAt(t(1_700))
        );
        r.cancel();
        assert!(!r.take_due(t(9_000)));
        assert_eq!(r.failed(t(9_000), &BLOB_FETCH), AfterFailure::GiveUp);
    }

    #[test]
    fn waits_double_up_to_the_cap_and_stop_after_the_last_try() {
        let p = RetryPolicy::new(5, Duration::from_millis(100), Duration::from_millis(300));
        let waits: Vec<_> = (1..=5).map(|f| p.wait_after(f)).collect();
        let ms = |m| Some(Duration::from_millis(m));
        assert_eq!(waits, vec![ms(100), ms(200), ms(300), ms(300), None]);
        assert_eq!(
            RetryPolicy::new(0, Duration::ZERO, Duration::ZERO).wait_after(1),
            None
        );
        // A huge try count does not overflow the doubling.
        let long = RetryPolicy::new(u32::MAX, Duration::from_secs(1), Duration::from_secs(9));
        assert_eq!(long.wait_after(1000), Some(Duration::from_secs(9)));
    }
}
