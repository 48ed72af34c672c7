//! Process-wide measurements the HTTP API's `/metrics` reads: how long the
//! worker's claims take. Plain atomics: a claim adds to them, a scrape reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static CLAIMS: AtomicU64 = AtomicU64::new(0);
static CLAIM_MICROS: AtomicU64 = AtomicU64::new(0);
static CLAIM_MAX_MICROS: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    pub count: u64,
    pub total: Duration,
    pub max: Duration,
}

pub(crate) fn claimed(took: Duration) {
    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    CLAIMS.fetch_add(1, Ordering::Relaxed);
    CLAIM_MICROS.fetch_add(us, Ordering::Relaxed);
    CLAIM_MAX_MICROS.fetch_max(us, Ordering::Relaxed);
}

/// The claims of this process so far.
pub fn claims() -> Claims {
    Claims {
        count: CLAIMS.load(Ordering::Relaxed),
        total: Duration::from_micros(CLAIM_MICROS.load(Ordering::Relaxed)),
        max: Duration::from_micros(CLAIM_MAX_MICROS.load(Ordering::Relaxed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_add_up() {
        let before = claims();
        claimed(Duration::from_millis(3));
        claimed(Duration::from_millis(1));
        let after = claims();
        assert_eq!(after.count - before.count, 2);
        assert!(after.total - before.total >= Duration::from_millis(4));
        assert!(after.max >= Duration::from_millis(3));
    }
}
