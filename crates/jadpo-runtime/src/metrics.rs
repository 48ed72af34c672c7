//! One engine's measurements that the HTTP API's `/metrics` reads: how long
//! its worker's claims take, how long its attempts run and how long a
//! delivery waited for its first. Kept per engine, so a process working
//! several stores reports each store's apart. Plain atomics: a claim or an
//! attempt adds to them, a scrape reads.

use crate::histogram::HistogramCell;
pub use crate::histogram::{Histogram, BUCKETS};
use std::collections::BTreeMap;
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

/// The label an attempt that called no connection is counted under in the
/// attempt-duration histogram.
pub const NO_CONNECTION: &str = "none";

/// The label of a connection the engine was not told of (not in its
/// catalog): counted together rather than as a series per name, so a label
/// never comes from anything but the app.
pub const OTHER_CONNECTION: &str = "other";

/// One engine's histograms so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// Each claim's time (real time).
    pub claim: Histogram,
    /// From a delivery's creation (its event's emit) to the start of its
    /// first attempt, in engine time.
    pub emit_to_start: Histogram,
    /// Each attempt's run (real time), under each connection it called,
    /// [`NO_CONNECTION`] for none.
    pub attempts: BTreeMap<String, Histogram>,
}

/// Where an engine adds its timings. The per-connection cells are made
/// once, from the catalog, so an attempt finds its cell without a lock.
#[derive(Debug, Default)]
pub(crate) struct TimingCells {
    pub claim: HistogramCell,
    pub emit_to_start: HistogramCell,
    attempts: BTreeMap<String, HistogramCell>,
}

impl TimingCells {
    pub(crate) fn new<'a>(connections: impl IntoIterator<Item = &'a String>) -> TimingCells {
        let mut attempts: BTreeMap<String, HistogramCell> = connections
            .into_iter()
            .map(|c| (c.clone(), HistogramCell::default()))
            .collect();
        for fixed in [NO_CONNECTION, OTHER_CONNECTION] {
            attempts.entry(fixed.to_owned()).or_default();
        }
        TimingCells {
            attempts,
            ..TimingCells::default()
        }
    }

    /// An attempt that ran `took` and called `connections`.
    pub(crate) fn attempted(&self, took: Duration, connections: &[String]) {
        if connections.is_empty() {
            self.cell(NO_CONNECTION).observe(took);
        }
        for c in connections {
            self.cell(c).observe(took);
        }
    }

    fn cell(&self, connection: &str) -> &HistogramCell {
        match self.attempts.get(connection) {
            Some(cell) => cell,
            None => &self.attempts[OTHER_CONNECTION],
        }
    }

    pub(crate) fn read(&self) -> Timings {
        Timings {
            claim: self.claim.read(),
            emit_to_start: self.emit_to_start.read(),
            attempts: self.attempts.iter().map(|(c, h)| (c.clone(), h.read())).collect(),
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

    #[test]
    fn an_attempt_counts_under_each_connection_it_called() {
        let cells = TimingCells::new(&["payments".to_string(), "crm".to_string()]);
        cells.attempted(Duration::from_millis(20), &["payments".into(), "crm".into()]);
        cells.attempted(Duration::from_millis(3), &[]);
        cells.attempted(Duration::from_millis(4), &["unknown".into()]);
        let read = cells.read();
        let count = |c: &str| read.attempts[c].count;
        assert_eq!((count("payments"), count("crm")), (1, 1));
        assert_eq!(count(NO_CONNECTION), 1);
        assert_eq!(count(OTHER_CONNECTION), 1, "never a series of its own");
        assert_eq!(read.attempts.len(), 4);
    }
}
