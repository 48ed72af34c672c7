//! A call's own resends within one run (a connection's `retry: {
//! attempts }`), the same for an HTTP call and a publish: only an
//! `unavailable` or `rate_limited` ending is sent again, after
//! `Backoff::CALL`'s jittered wait, and never past the run's deadline.

use jadpo_core::{Backoff, Failure, FailureKind};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Duration;
use tokio::time::Instant;

pub(crate) struct Resends {
    attempts: u32,
    seed: u64,
    /// Seeded on the first wait only: most calls never wait.
    rng: Option<StdRng>,
}

impl Resends {
    /// Up to `attempts` sends in all, the first included; waits drawn from
    /// a source seeded by `seed`.
    pub(crate) fn new(attempts: u32, seed: u64) -> Resends {
        Resends {
            attempts: attempts.max(1),
            seed,
            rng: None,
        }
    }

    /// After send number `sends` ended in `failure`: whether to send again.
    /// When so, the wait is taken (and kept in `waits`) before returning; a
    /// wait that would reach `deadline` is not taken, and kept in
    /// `skipped`.
    pub(crate) async fn again(
        &mut self,
        sends: u32,
        failure: &Failure,
        deadline: Instant,
        waits: &mut Vec<Duration>,
        skipped: &mut Option<Duration>,
    ) -> bool {
        let resendable = matches!(failure.kind, FailureKind::Unavailable | FailureKind::RateLimited);
        if !resendable || sends >= self.attempts {
            return false;
        }
        let seed = self.seed;
        let rng = self.rng.get_or_insert_with(|| StdRng::seed_from_u64(seed));
        let wait = Backoff::CALL.draw(sends, failure.retry_after, rng);
        match Instant::now().checked_add(wait) {
            Some(resume) if resume < deadline => {
                waits.push(wait);
                tokio::time::sleep_until(resume).await;
                true
            }
            _ => {
                *skipped = Some(wait);
                false
            }
        }
    }
}
