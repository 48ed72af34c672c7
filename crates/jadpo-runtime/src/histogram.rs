//! Fixed-bucket histograms of durations, kept with atomics: an observation
//! is two `fetch_add`s and no lock, so the worker's hot path (every claim,
//! every attempt) pays nothing it would notice. `/metrics` reads them as
//! Prometheus histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The buckets' upper bounds, in seconds: one set for every histogram
/// (claims take milliseconds, attempts up to their time limit, a start
/// after an emit up to hours behind a backlog), so dashboards can compare
/// them and each series costs the same. Fixed: changing them would break
/// every stored query over `le`.
pub const BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];

/// A histogram as read: the count at or under each bound of [`BUCKETS`]
/// (cumulative, as Prometheus wants), the count and the sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Histogram {
    pub buckets: [u64; BUCKETS.len()],
    pub count: u64,
    pub sum: Duration,
}

/// Where observations are added.
#[derive(Debug, Default)]
pub(crate) struct HistogramCell {
    // Each observation in the first bucket it fits, not cumulative: one
    // add per observation; the read adds them up.
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    micros: AtomicU64,
}

/// [`BUCKETS`] in microseconds, to compare without floating point.
const BOUNDS_US: [u64; BUCKETS.len()] = {
    let mut us = [0; BUCKETS.len()];
    let mut i = 0;
    while i < BUCKETS.len() {
        us[i] = (BUCKETS[i] * 1_000_000.0) as u64;
        i += 1;
    }
    us
};

impl HistogramCell {
    pub(crate) fn observe(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        // Past the last bound, only the count (+Inf) has it.
        if let Some(i) = BOUNDS_US.iter().position(|b| us <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.micros.fetch_add(us, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Histogram {
        let mut h = Histogram {
            count: self.count.load(Ordering::Relaxed),
            sum: Duration::from_micros(self.micros.load(Ordering::Relaxed)),
            ..Histogram::default()
        };
        let mut below = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            below += b.load(Ordering::Relaxed);
            h.buckets[i] = below;
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_counts_in_every_bucket_at_or_above_it() {
        let h = HistogramCell::default();
        h.observe(Duration::from_millis(7));
        h.observe(Duration::from_millis(10));
        h.observe(Duration::from_secs(7200));
        let r = h.read();
        assert_eq!(r.count, 3);
        assert_eq!(r.sum, Duration::from_millis(7_200_017));
        assert_eq!(r.buckets[1], 0, "5 ms: neither");
        assert_eq!(r.buckets[2], 2, "10 ms: both, a bound is inclusive");
        assert_eq!(r.buckets[BUCKETS.len() - 1], 2, "two hours is past every bound");
    }
}
