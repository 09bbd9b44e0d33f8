//! The one retry policy of the project: a bounded number of tries with exponential backoff.
//! It only computes waits, so the machines (which take time as an input and arm a timer) and
//! the drivers (which sleep, as the chain client does) share it.

use std::time::Duration;

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
