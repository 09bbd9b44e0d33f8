//! What the node does when its timer fires late. A timer that fires well after its deadline
//! means this process was not running for a while (a host too loaded to schedule it, a paused
//! VM, a debugger): every provider the client watches then looks silent at once, while their
//! heartbeats wait unread in its sockets and queues. Deciding on that silence would fail
//! honest providers over, so the client's verdicts wait [`LateTimer::catch_up`] for the swarm
//! to deliver what came in. A frozen provider is still noticed: its silence outlasts the wait,
//! which only a late timer pays.
//!
//! The timer may be on time while the swarm is not (busy with one long event while
//! heartbeats queue behind it): before a verdict the runtime asks the swarm for what it
//! already had ready (`Command::Sync`), which hands over that queue. A reply slower than
//! [`LATE`] means the swarm was behind, and what reached the node meanwhile may still be on
//! its way through, so the verdict waits the catch-up too. In the detection bench at a
//! 300 ms floor, the client failed 7 honest providers over in 55 trials without the handover
//! (each right after another node restarted, while the client's swarm delivered nothing for
//! 0.4 s), and none in 54 with it.
//!
//! Only the client waits. The node's provider sends its heartbeats on the same timer, and
//! holding them too would turn every late timer of a loaded provider into a gap a whole
//! catch-up longer, the kind of gap that gets an honest provider failed over.

use std::time::Duration;

use gpuchain_protocol::Time;

/// A client deadline this far behind when the timer fires, or a swarm this slow to hand
/// over what it had, starts a catch-up.
pub const LATE: Duration = Duration::from_millis(20);

/// Which machines' timers run now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fire {
    All,
    /// The client's verdicts wait for the catch-up; the provider and verifier run.
    AllButClient,
}

#[derive(Debug)]
pub struct LateTimer {
    /// How long a late client deadline waits for what arrived meanwhile.
    catch_up: Duration,
    held_until: Option<Time>,
}

impl LateTimer {
    pub fn new(catch_up: Duration) -> Self {
        LateTimer {
            catch_up,
            held_until: None,
        }
    }

    /// When the client's timer should fire: its deadline, or the end of a catch-up.
    pub fn client_deadline(&self, due: Option<Time>) -> Option<Time> {
        due.map(|d| self.held_until.map_or(d, |h| d.max(h)))
    }

    /// The timer fired at `now`; `client_due` is the client's deadline, `lag` how long the
    /// swarm took to hand over what it had ready.
    pub fn on_fire(&mut self, now: Time, client_due: Option<Time>, lag: Duration) -> Fire {
        let Some(due) = client_due.filter(|d| *d <= now) else {
            // Nothing of the client's is due (a heartbeat moved its deadline on): a later late
            // timer gets a catch-up of its own.
            self.held_until = None;
            return Fire::All;
        };
        match self.held_until {
            Some(h) if now < h => Fire::AllButClient,
            Some(_) => {
                self.held_until = None;
                Fire::All
            }
            None if now.since(due) > LATE || lag > LATE => {
                tracing::debug!(
                    late_ms = now.since(due).as_millis() as u64,
                    swarm_lag_ms = lag.as_millis() as u64,
                    "timer or swarm behind: hearing what arrived meanwhile before any verdict"
                );
                self.held_until = Some(now.saturating_add(self.catch_up));
                Fire::AllButClient
            }
            None => Fire::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZERO: Duration = Duration::ZERO;

    fn t(ms: u64) -> Time {
        Time::from_millis(ms)
    }

    #[test]
    fn a_punctual_timer_runs_everything() {
        let mut l = LateTimer::new(Duration::from_millis(100));
        assert_eq!(l.on_fire(t(1_010), Some(t(1_000)), ZERO), Fire::All);
        assert_eq!(l.on_fire(t(1_010), None, ZERO), Fire::All);
        assert_eq!(l.client_deadline(Some(t(2_000))), Some(t(2_000)));
    }

    #[test]
    fn a_late_client_deadline_waits_one_catch_up_and_no_more() {
        let mut l = LateTimer::new(Duration::from_millis(100));
        assert_eq!(
            l.on_fire(t(1_300), Some(t(1_000)), ZERO),
            Fire::AllButClient
        );
        assert_eq!(l.client_deadline(Some(t(1_000))), Some(t(1_400)));
        // The provider's next heartbeat falls inside the catch-up: it goes out, the client waits.
        assert_eq!(
            l.on_fire(t(1_350), Some(t(1_000)), ZERO),
            Fire::AllButClient
        );
        // The catch-up is over: the verdict is made, however late the timer is by now.
        assert_eq!(l.on_fire(t(1_400), Some(t(1_000)), ZERO), Fire::All);
        assert_eq!(l.client_deadline(Some(t(1_000))), Some(t(1_000)));
    }

    #[test]
    fn a_heartbeat_heard_during_the_catch_up_ends_it() {
        let mut l = LateTimer::new(Duration::from_millis(100));
        assert_eq!(
            l.on_fire(t(1_300), Some(t(1_000)), ZERO),
            Fire::AllButClient
        );
        // The swarm delivered the heartbeat; the client's deadline moved on.
        assert_eq!(l.on_fire(t(1_320), Some(t(1_550)), ZERO), Fire::All);
        assert_eq!(l.client_deadline(Some(t(1_550))), Some(t(1_550)));
        // Its next late deadline gets a catch-up of its own.
        assert_eq!(
            l.on_fire(t(1_700), Some(t(1_550)), ZERO),
            Fire::AllButClient
        );
    }

    #[test]
    fn only_the_clients_lateness_counts() {
        let mut l = LateTimer::new(Duration::from_millis(100));
        // The provider's heartbeat timer was late, the client has nothing due: no catch-up.
        assert_eq!(l.on_fire(t(1_300), Some(t(5_000)), ZERO), Fire::All);
        assert_eq!(l.client_deadline(Some(t(5_000))), Some(t(5_000)));
    }

    #[test]
    fn a_slow_swarm_holds_the_verdict_like_a_late_timer() {
        let mut l = LateTimer::new(Duration::from_millis(100));
        // On time, but the swarm took 200 ms to hand over its backlog.
        let lag = Duration::from_millis(200);
        assert_eq!(l.on_fire(t(1_005), Some(t(1_000)), lag), Fire::AllButClient);
        assert_eq!(l.client_deadline(Some(t(1_000))), Some(t(1_105)));
        assert_eq!(l.on_fire(t(1_105), Some(t(1_000)), ZERO), Fire::All);
        // A quick handover on a punctual timer: no wait.
        assert_eq!(
            l.on_fire(t(2_005), Some(t(2_000)), Duration::from_millis(3)),
            Fire::All
        );
    }
}
