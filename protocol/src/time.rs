//! Time as a plain value: milliseconds since an origin the driver chooses. The node maps a
//! monotonic clock onto it, the simulator its virtual clock; nothing here reads either.

use std::ops::Add;
use std::time::Duration;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub const fn from_millis(ms: u64) -> Self {
        Time(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating: a far-future deadline must not wrap into the past.
    pub fn saturating_add(self, d: Duration) -> Time {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(ms))
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later (drivers may be non-monotonic).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;

    fn add(self, d: Duration) -> Time {
        self.saturating_add(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_and_since_clamps() {
        let t = Time::from_millis(u64::MAX - 1);
        assert_eq!(t + Duration::from_secs(10), Time::from_millis(u64::MAX));
        assert_eq!(
            Time::from_millis(5).since(Time::from_millis(9)),
            Duration::ZERO
        );
        assert_eq!(
            Time::from_millis(250).since(Time::from_millis(100)),
            Duration::from_millis(150)
        );
    }
}
