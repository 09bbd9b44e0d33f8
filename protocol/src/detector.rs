//! Heartbeat failure detector.
//!
//! The provider heartbeats every `period`; the detector declares it lost when nothing new has
//! arrived for `timeout`. Trade-off: a shorter timeout notices death sooner but turns jitter
//! and lost gossip into false failovers, and a false failover is expensive (the new epoch
//! fences the provider and its unaccepted steps are lost). `timeout = 2.5 × period` tolerates
//! one lost heartbeat plus half a period of jitter (a single gap is 2 periods < 2.5), yet a
//! provider that dies right after a heartbeat is declared lost `timeout` later: 250 ms at a
//! 100 ms period, inside the 0.3 s target. Two consecutive lost heartbeats (plus jitter) do
//! cause a failover; at 10 Hz on a healthy mesh that is rare, and being fenced costs an honest
//! provider at most one checkpoint interval.
//!
//! A closed connection to the provider is a strong hint: the deadline is pulled in to
//! `closed_grace` from then (a reconnect or a heartbeat through another peer cancels it).

use std::time::Duration;

use crate::time::Time;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    pub period: Duration,
    pub timeout: Duration,
    pub closed_grace: Duration,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            period: Duration::from_millis(100),
            timeout: Duration::from_millis(250),
            closed_grace: Duration::from_millis(50),
        }
    }
}

#[derive(Clone, Debug)]
pub struct FailureDetector {
    config: DetectorConfig,
    last_heard: Time,
    deadline: Time,
}

impl FailureDetector {
    /// Armed at `now`: a fresh assignment gets a full timeout before its first heartbeat is due.
    pub fn new(config: DetectorConfig, now: Time) -> Self {
        FailureDetector {
            config,
            last_heard: now,
            deadline: now.saturating_add(config.timeout),
        }
    }

    pub fn heard(&mut self, now: Time) {
        self.last_heard = self.last_heard.max(now);
        self.deadline = self.last_heard.saturating_add(self.config.timeout);
    }

    pub fn connection_closed(&mut self, now: Time) {
        self.deadline = self
            .deadline
            .min(now.saturating_add(self.config.closed_grace));
    }

    pub fn deadline(&self) -> Time {
        self.deadline
    }

    pub fn last_heard(&self) -> Time {
        self.last_heard
    }

    pub fn is_dead(&self, now: Time) -> bool {
        now >= self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
