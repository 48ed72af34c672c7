//! How long to wait before trying again.
//!
//! Each wait is drawn evenly from zero to a ceiling that doubles with each
//! attempt ("full jitter"), so a crowd of failures spreads out instead of
//! retrying together. A provider's `Retry-After` is a floor on the wait.
//! The random source is an argument: production passes a thread RNG, tests
//! and the simulation pass a seeded one.

use rand::Rng;
use std::time::Duration;

/// A doubling ceiling with full jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling before the second try.
    pub base: Duration,
    /// No ceiling goes above this.
    pub cap: Duration,
    /// No wait is shorter than this.
    pub floor: Duration,
}

impl Backoff {
    /// Between a delivery's attempts: 30 s doubling, at most 6 h, at least 1 s.
    pub const DELIVERY: Backoff = Backoff {
        base: Duration::from_secs(30),
        cap: Duration::from_secs(6 * 3600),
        floor: Duration::from_secs(1),
    };

    /// Between a connection's own resends inside one attempt
    /// (docs/retries.md): 100 ms doubling. The cap keeps a resend inside a run's
    /// time limit; the run's limit still bounds them all.
    pub const CALL: Backoff = Backoff {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(10),
        floor: Duration::ZERO,
    };

    /// After a store fault (unreachable, failed before commit): 100 ms
    /// doubling to 5 s, so a store coming back is not met by every
    /// process's retries at once, and is found again within seconds. The
    /// floor keeps a loop that keeps failing from spinning.
    pub const STORE: Backoff = Backoff {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(5),
        floor: Duration::from_millis(50),
    };

    /// Before redoing a transaction another process's write conflicted
    /// with: both are alive and the store is fine, so milliseconds are
    /// enough for two that keep colliding on one row to drift apart.
    pub const CONFLICT: Backoff = Backoff {
        base: Duration::from_millis(2),
        cap: Duration::from_millis(64),
        floor: Duration::ZERO,
    };

    /// The ceiling of the wait after `attempts` tries (1 for the first).
    ///
    /// `attempts` of 0 is treated as 1. Never overflows: the doubling stops
    /// as soon as it passes the cap.
    pub fn ceiling(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1);
        let mut ceiling = self.base;
        for _ in 0..doublings {
            if ceiling >= self.cap {
                break;
            }
            ceiling = ceiling.saturating_mul(2);
        }
        ceiling.min(self.cap)
    }

    /// The wait after `attempts` tries: uniform in `[0, ceiling]`, then at
    /// least the floor and at least `retry_after`.
    pub fn draw(&self, attempts: u32, retry_after: Option<Duration>, rng: &mut impl Rng) -> Duration {
        let ceiling_ms = u64::try_from(self.ceiling(attempts).as_millis()).unwrap_or(u64::MAX);
        let drawn = Duration::from_millis(rng.random_range(0..=ceiling_ms));
        drawn.max(self.floor).max(retry_after.unwrap_or(Duration::ZERO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const S: u64 = 1;
    const M: u64 = 60;
    const H: u64 = 3600;

    #[test]
    fn delivery_ceiling_table() {
        let table: &[(u32, u64)] = &[
            (0, 30 * S),
            (1, 30 * S),
            (2, M),
            (3, 2 * M),
            (4, 4 * M),
            (5, 8 * M),
            (6, 16 * M),
            (7, 32 * M),
            (8, 64 * M),
            (9, 128 * M),
            (10, 256 * M),
            // 30 s * 2^10 = 512 min, past the cap.
            (11, 6 * H),
            (12, 6 * H),
            (100, 6 * H),
            (u32::MAX, 6 * H),
        ];
        for &(attempts, secs) in table {
            assert_eq!(
                Backoff::DELIVERY.ceiling(attempts),
                Duration::from_secs(secs),
                "attempt {attempts}"
            );
        }
    }

    #[test]
    fn call_ceiling_doubles_from_100ms() {
        assert_eq!(Backoff::CALL.ceiling(1), Duration::from_millis(100));
        assert_eq!(Backoff::CALL.ceiling(2), Duration::from_millis(200));
        assert_eq!(Backoff::CALL.ceiling(3), Duration::from_millis(400));
        assert_eq!(Backoff::CALL.ceiling(40), Duration::from_secs(10));
    }

    #[test]
    fn store_waits_double_from_100ms_to_5s_and_never_spin() {
        assert_eq!(Backoff::STORE.ceiling(1), Duration::from_millis(100));
        assert_eq!(Backoff::STORE.ceiling(6), Duration::from_millis(3_200));
        assert_eq!(Backoff::STORE.ceiling(7), Duration::from_secs(5));
        let mut rng = ChaCha8Rng::seed_from_u64(13);
        for attempts in [1, 3, 100] {
            let w = Backoff::STORE.draw(attempts, None, &mut rng);
            assert!(w >= Duration::from_millis(50) && w <= Duration::from_secs(5), "{w:?}");
        }
    }

    #[test]
    fn conflicts_wait_milliseconds() {
        assert_eq!(Backoff::CONFLICT.ceiling(1), Duration::from_millis(2));
        assert_eq!(Backoff::CONFLICT.ceiling(16), Duration::from_millis(64));
    }

    #[test]
    fn first_wait_is_between_one_and_thirty_seconds() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut saw_floor = false;
        let mut saw_high = false;
        for _ in 0..10_000 {
            let w = Backoff::DELIVERY.draw(1, None, &mut rng);
            assert!(w >= Duration::from_secs(1) && w <= Duration::from_secs(30), "{w:?}");
            saw_floor |= w == Duration::from_secs(1);
            saw_high |= w > Duration::from_secs(25);
        }
        // About 3 % of draws land under a second and are raised to it; the
        // top sixth of the range is reached too: the draw is spread, not fixed.
        assert!(saw_floor && saw_high);
    }

    #[test]
    fn waits_at_the_cap_and_at_attempt_100_stay_under_six_hours() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for attempts in [11, 50, 99, 100] {
            for _ in 0..1_000 {
                let w = Backoff::DELIVERY.draw(attempts, None, &mut rng);
                assert!(w <= Duration::from_secs(6 * H) && w >= Duration::from_secs(1));
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..1_000 {
            let w = Backoff::DELIVERY.draw(1, Some(Duration::from_secs(120)), &mut rng);
            assert!(w >= Duration::from_secs(120));
            // A ceiling of 30 s can't draw above 120 s: the floor is exact.
            assert_eq!(w, Duration::from_secs(120));
        }
        // Above the floor the jitter still applies.
        let w = Backoff::DELIVERY.draw(10, Some(Duration::from_secs(1)), &mut rng);
        assert!(w <= Duration::from_secs(256 * M));
    }

    #[test]
    fn mean_wait_is_about_half_the_ceiling() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let n = 20_000u32;
        let total: Duration = (0..n).map(|_| Backoff::DELIVERY.draw(5, None, &mut rng)).sum();
        let mean = total / n;
        // Ceiling 8 min, mean 4 min; 5 % either side is far outside noise at n = 20 000.
        assert!(
            mean > Duration::from_secs(228) && mean < Duration::from_secs(252),
            "{mean:?}"
        );
    }

    proptest! {
        #[test]
        fn draw_stays_within_its_bounds(
            attempts in 0u32..=200,
            retry_after_ms in proptest::option::of(0u64..=48 * H * 1000),
            seed in any::<u64>(),
        ) {
            let retry_after = retry_after_ms.map(Duration::from_millis);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let b = Backoff::DELIVERY;
            let w = b.draw(attempts, retry_after, &mut rng);
            let ceiling = b.ceiling(attempts);
            prop_assert!(w >= b.floor);
            prop_assert!(w >= retry_after.unwrap_or_default());
            prop_assert!(w <= ceiling.max(b.floor).max(retry_after.unwrap_or_default()));
            prop_assert!(ceiling <= b.cap);
        }

        #[test]
        fn ceiling_never_shrinks(attempts in 0u32..=10_000) {
            let b = Backoff::DELIVERY;
            prop_assert!(b.ceiling(attempts) <= b.ceiling(attempts.saturating_add(1)));
        }
    }
}
