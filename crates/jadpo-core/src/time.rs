//! Time as the rules see it: whole milliseconds since the Unix epoch.
//!
//! The core never reads a clock. Every function that needs "now" takes it as
//! an argument, so tests and the simulation decide what time it is. Integer
//! milliseconds keep arithmetic exact and cheap to store in SQL; the shells
//! convert to RFC 3339 (with `jiff`) only when they print.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A point in time, in milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const EPOCH: Timestamp = Timestamp(0);
    /// Far enough out that no budget or pause reaches it, near enough that
    /// adding a 30-day budget to it cannot overflow.
    pub const MAX: Timestamp = Timestamp(i64::MAX / 2);

    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating at [`Timestamp::MAX`] rather than wrapping: a
    /// time past the end of every budget is the right answer for a huge wait.
    pub fn plus(self, d: Duration) -> Timestamp {
        let add = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(add).min(Self::MAX.0))
    }

    /// `self - d`, saturating at [`Timestamp::EPOCH`]: the last moment
    /// something taking `d` may begin and still end by `self`.
    pub fn minus(self, d: Duration) -> Timestamp {
        let sub = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(sub).max(Self::EPOCH.0))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        let ms = self.0.saturating_sub(earlier.0).max(0);
        Duration::from_millis(ms as u64)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

pub const SECOND: Duration = Duration::from_secs(1);
pub const MINUTE: Duration = Duration::from_secs(60);
pub const HOUR: Duration = Duration::from_secs(3600);
pub const DAY: Duration = Duration::from_secs(86_400);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plus_saturates_instead_of_wrapping() {
        assert_eq!(Timestamp::MAX.plus(DAY), Timestamp::MAX);
        assert_eq!(Timestamp::from_millis(1).plus(Duration::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::from_millis(1_000).plus(SECOND).as_millis(), 2_000);
    }

    #[test]
    fn since_never_goes_negative() {
        let a = Timestamp::from_millis(5_000);
        let b = Timestamp::from_millis(2_000);
        assert_eq!(a.since(b), Duration::from_secs(3));
        assert_eq!(b.since(a), Duration::ZERO);
    }
}
