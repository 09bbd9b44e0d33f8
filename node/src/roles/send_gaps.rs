//! Where a provider's late heartbeat lost its time. The client sees only silence; a false
//! failover under load is the provider host's doing or the path's, and only the provider can
//! say which. Each heartbeat sent more than [`LATE_AFTER`] periods after the one before is
//! reported ([`NodeEvent::HeartbeatLate`]) with its two parts the node controls: how late the
//! machines' timer woke (the runtime was not scheduled) and how long the swarm took to take
//! the heartbeat (the event loop was busy).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gpuchain_protocol::JobId;

use crate::events::NodeEvent;

/// A gap this many heartbeat periods long is reported: one period of jitter is normal.
pub const LATE_AFTER: u32 = 2;

/// A gap longer than this is a new stream (an epoch that starts after the last one ended),
/// not a late heartbeat.
const NEW_STREAM: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct SendGaps {
    period: Duration,
    last: HashMap<JobId, Instant>,
}

impl SendGaps {
    pub fn new(period: Duration) -> Self {
        SendGaps {
            period,
            last: HashMap::new(),
        }
    }

    /// A heartbeat of `job` was handed to the swarm at `at`, `publish` after it was asked to;
    /// the timer that sent it had woken `timer_late` after its deadline.
    pub fn on_sent(
        &mut self,
        job: JobId,
        at: Instant,
        timer_late: Duration,
        publish: Duration,
    ) -> Option<NodeEvent> {
        let before = self.last.insert(job, at)?;
        let gap = at.saturating_duration_since(before);
        if gap <= self.period * LATE_AFTER || gap > NEW_STREAM {
            return None;
        }
        Some(NodeEvent::HeartbeatLate {
            job_id: job.to_string(),
            gap_ms: ms(gap),
            timer_late_ms: ms(timer_late),
            publish_ms: ms(publish),
        })
    }

    /// The job's heartbeat stream ends (training stopped) or starts afresh (a new epoch):
    /// the next heartbeat has no gap to report.
    pub fn forget(&mut self, job: JobId) {
        self.last.remove(&job);
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_gap_past_two_periods_is_reported_with_its_parts() {
        let period = Duration::from_millis(100);
        let mut gaps = SendGaps::new(period);
        let t0 = Instant::now();
        let job = JobId::from(7u64);
        let none = Duration::ZERO;
        assert_eq!(
            gaps.on_sent(job, t0, none, none),
            None,
            "the first has no gap"
        );
        assert_eq!(
            gaps.on_sent(job, t0 + period * 2, none, none),
            None,
            "two periods is jitter"
        );
        let ev = gaps.on_sent(
            job,
            t0 + period * 2 + Duration::from_millis(350),
            Duration::from_millis(240),
            Duration::from_millis(30),
        );
        assert_eq!(
            ev,
            Some(NodeEvent::HeartbeatLate {
                job_id: "7".into(),
                gap_ms: 350,
                timer_late_ms: 240,
                publish_ms: 30,
            })
        );
        // Another job's stream is its own.
        assert_eq!(
            gaps.on_sent(JobId::from(8u64), t0 + period * 9, none, none),
            None
        );
    }

    #[test]
    fn a_stream_that_stopped_or_restarted_long_after_is_not_late() {
        let period = Duration::from_millis(100);
        let mut gaps = SendGaps::new(period);
        let t0 = Instant::now();
        let job = JobId::from(1u64);
        let none = Duration::ZERO;
        gaps.on_sent(job, t0, none, none);
        assert_eq!(gaps.on_sent(job, t0 + NEW_STREAM * 2, none, none), None);
        gaps.forget(job);
        assert_eq!(
            gaps.on_sent(job, t0 + NEW_STREAM * 2 + period * 5, none, none),
            None,
            "forgotten: the next one starts a stream"
        );
    }
}
