//! One engine's measurements that the HTTP API's `/metrics` reads: how long
//! its worker's claims take. Kept per engine, so a process working several
//! stores reports each store's claims apart. Plain atomics: a claim adds to
//! them, a scrape reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The claims of one engine so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    pub count: u64,
    pub total: Duration,
    pub max: Duration,
}

/// Where an engine's worker adds each claim's time.
#[derive(Debug, Default)]
pub(crate) struct ClaimTimes {
    count: AtomicU64,
    micros: AtomicU64,
    max_micros: AtomicU64,
}

impl ClaimTimes {
    pub(crate) fn claimed(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.micros.fetch_add(us, Ordering::Relaxed);
        self.max_micros.fetch_max(us, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Claims {
        Claims {
            count: self.count.load(Ordering::Relaxed),
            total: Duration::from_micros(self.micros.load(Ordering::Relaxed)),
            max: Duration::from_micros(self.max_micros.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_add_up_per_engine() {
        let (one, other) = (ClaimTimes::default(), ClaimTimes::default());
        one.claimed(Duration::from_millis(3));
        one.claimed(Duration::from_millis(1));
        other.claimed(Duration::from_millis(7));
        let read = one.read();
        assert_eq!(read.count, 2);
        assert_eq!(read.total, Duration::from_millis(4));
        assert_eq!(read.max, Duration::from_millis(3));
        assert_eq!(other.read().count, 1, "another engine's claims stay its own");
    }
}
