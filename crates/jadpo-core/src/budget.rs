//! How many tries a delivery gets, and for how long.

use crate::time::{Timestamp, DAY};
use std::fmt;
use std::time::Duration;

/// `retry: { attempts: N, within: D }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    attempts: u32,
    within: Duration,
}

/// Why a `retry:` block was refused. The app file reports either as
/// `subscriber.retry_invalid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetError {
    AttemptsOutOfRange(u64),
    WithinOutOfRange(Duration),
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::AttemptsOutOfRange(n) => write!(
                f,
                "`attempts:` takes {} to {}, not {n}",
                Budget::MIN_ATTEMPTS,
                Budget::MAX_ATTEMPTS
            ),
            BudgetError::WithinOutOfRange(d) => write!(
                f,
                "`within:` takes more than 0s and at most 30d, not {}s",
                d.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

impl Budget {
    pub const MIN_ATTEMPTS: u32 = 1;
    pub const MAX_ATTEMPTS: u32 = 100;
    pub const MAX_WITHIN: Duration = Duration::from_secs(30 * 86_400);
    /// 10 attempts within 24 hours.
    pub const DEFAULT: Budget = Budget {
        attempts: 10,
        within: DAY,
    };

    pub fn new(attempts: u64, within: Duration) -> Result<Budget, BudgetError> {
        let attempts = u32::try_from(attempts)
            .ok()
            .filter(|n| (Self::MIN_ATTEMPTS..=Self::MAX_ATTEMPTS).contains(n))
            .ok_or(BudgetError::AttemptsOutOfRange(attempts))?;
        if within.is_zero() || within > Self::MAX_WITHIN {
            return Err(BudgetError::WithinOutOfRange(within));
        }
        Ok(Budget { attempts, within })
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn within(&self) -> Duration {
        self.within
    }

    /// The last moment an attempt may start: `within` after the budget's
    /// start (the event, or an operator's retry), moved on by the time the
    /// delivery spent held.
    pub fn deadline(&self, budget_from: Timestamp, held_for: Duration) -> Timestamp {
        budget_from.plus(self.within).plus(held_for)
    }

    /// True when no attempt may follow `attempts` tries.
    pub fn attempts_used(&self, attempts: u32) -> bool {
        attempts >= self.attempts
    }
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::HOUR;
    use proptest::prelude::*;

    #[test]
    fn default_is_ten_attempts_within_a_day() {
        assert_eq!(Budget::DEFAULT.attempts(), 10);
        assert_eq!(Budget::DEFAULT.within(), 24 * HOUR);
        assert_eq!(Budget::default(), Budget::DEFAULT);
    }

    #[test]
    fn boundaries() {
        let ok = |a: u64, w: Duration| Budget::new(a, w).is_ok();
        assert!(ok(1, DAY));
        assert!(ok(100, DAY));
        assert!(!ok(0, DAY));
        assert!(!ok(101, DAY));
        assert!(!ok(u64::MAX, DAY));
        assert!(!ok(u64::from(u32::MAX) + 1, DAY), "no truncation to u32");
        assert!(ok(10, 30 * DAY), "exactly 30 days");
        assert!(!ok(10, 30 * DAY + Duration::from_millis(1)));
        assert!(!ok(10, 31 * DAY));
        assert!(!ok(10, Duration::ZERO));
        assert!(ok(10, Duration::from_millis(1)));
    }

    #[test]
    fn documented_example_twenty_within_three_days() {
        let b = Budget::new(20, 3 * DAY).unwrap();
        let from = Timestamp::from_millis(0);
        assert_eq!(b.deadline(from, Duration::ZERO), from.plus(3 * DAY));
        assert_eq!(b.deadline(from, 2 * HOUR), from.plus(3 * DAY + 2 * HOUR));
        assert!(!b.attempts_used(19));
        assert!(b.attempts_used(20));
    }

    #[test]
    fn errors_say_what_to_fix() {
        assert_eq!(
            Budget::new(0, DAY).unwrap_err().to_string(),
            "`attempts:` takes 1 to 100, not 0"
        );
        assert!(Budget::new(5, 31 * DAY)
            .unwrap_err()
            .to_string()
            .contains("at most 30d"));
    }

    proptest! {
        #[test]
        fn new_accepts_exactly_the_documented_ranges(attempts in 0u64..300, within_s in 0u64..40 * 86_400) {
            let within = Duration::from_secs(within_s);
            let valid = (1..=100).contains(&attempts) && within_s > 0 && within <= 30 * DAY;
            prop_assert_eq!(Budget::new(attempts, within).is_ok(), valid);
        }

        #[test]
        fn deadline_moves_on_by_exactly_the_time_held(from in 0i64..4_000_000_000_000, held_s in 0u64..10_000_000) {
            let b = Budget::DEFAULT;
            let from = Timestamp::from_millis(from);
            let held = Duration::from_secs(held_s);
            prop_assert_eq!(b.deadline(from, held).since(b.deadline(from, Duration::ZERO)), held);
        }
    }
}
