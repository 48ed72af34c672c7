//! `jadpo bench --rate R/s --duration D`: a soak. The engine drains while
//! events come at the rate for the whole duration, retention prunes behind
//! it (`--retention`), and every `--report-every` the bench reports what
//! changed: deliveries emitted and finished, the interval's emit-to-finish
//! latencies, the rows left in the store and how much room it takes (its
//! tables' rows, dead rows and bytes on PostgreSQL; the file, its WAL and
//! its free pages on SQLite). A store that keeps up levels off: finished
//! rows near rate × retention, sizes flat (docs/performance.md, "Soak").
//!
//! The figures are read through a second handle on the bench's store, so
//! the engine's own connections are not borrowed for it.

use super::finishes::Finishes;
use crate::output::{self, CliError};
use crate::store_url::AnyStore;
use jadpo_store::{Footprint, Store};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Emits older than this are forgotten: a delivery that takes longer from
/// emit to finish is counted without a latency.
const REMEMBER_EMITS: Duration = Duration::from_secs(600);

/// What one interval saw.
#[derive(Clone, Debug, Default)]
pub(super) struct Interval {
    /// From 1.
    pub index: u32,
    /// When it ended, in seconds since the engine started.
    pub seconds: f64,
    /// Its length in seconds.
    pub length: f64,
    /// Deliveries emitted, and seen finishing, in it.
    pub emitted: u64,
    pub finished: u64,
    /// Emit to finish, for the deliveries that finished in it.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Rows in the store at its end.
    pub finished_rows: u64,
    pub unfinished_rows: u64,
    pub footprint: Footprint,
    /// WAL the PostgreSQL server wrote during it (the whole server's).
    pub wal_written_bytes: Option<u64>,
}

fn tenth(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl Interval {
    pub(super) fn drain_per_s(&self) -> f64 {
        self.finished as f64 / self.length.max(1e-9)
    }

    /// Dead rows as a share of all row versions, across the tables
    /// (PostgreSQL).
    pub(super) fn dead_share(&self) -> Option<f64> {
        if self.footprint.tables.is_empty() {
            return None;
        }
        let dead: Option<u64> = self.footprint.tables.iter().map(|t| t.dead_rows).sum();
        let live: u64 = self.footprint.tables.iter().map(|t| t.live_rows).sum();
        dead.map(|d| d as f64 / (d + live).max(1) as f64)
    }

    pub(super) fn json(&self) -> Value {
        let tables: Map<String, Value> = self
            .footprint
            .tables
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    json!({
                        "live_rows": t.live_rows,
                        "dead_rows": t.dead_rows,
                        "bytes": t.bytes,
                        "vacuums": t.vacuums,
                    }),
                )
            })
            .collect();
        json!({
            "interval": self.index,
            "seconds": tenth(self.seconds),
            "emitted": self.emitted,
            "finished": self.finished,
            "drain_per_s": tenth(self.drain_per_s()),
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "finished_rows": self.finished_rows,
            "unfinished_rows": self.unfinished_rows,
            "tables": tables,
            "table_bytes": self.footprint.table_bytes(),
            "file_bytes": self.footprint.file_bytes,
            "wal_bytes": self.footprint.wal_bytes,
            "free_bytes": self.footprint.free_bytes,
            "wal_written_bytes": self.wal_written_bytes,
            "autovacuum": self.footprint.autovacuum,
        })
    }

    /// One line of the human report; [`Interval::HEADER`] names its columns.
    pub(super) fn human(&self) -> String {
        let latency = match (self.p50_ms, self.p99_ms) {
            (Some(p50), Some(p99)) => format!("{p50:>8.1} {p99:>8.1}"),
            _ => format!("{:>8} {:>8}", "-", "-"),
        };
        let size = match (self.footprint.table_bytes(), self.footprint.file_bytes) {
            (Some(t), _) => format!("{:>9.1}", mib(t)),
            (None, Some(f)) => format!("{:>9.1}", mib(f)),
            (None, None) => format!("{:>9}", "-"),
        };
        let extra = match (self.dead_share(), self.footprint.wal_bytes) {
            (Some(d), _) => format!("dead {:.1}%", d * 100.0),
            (None, Some(w)) => format!("wal {:.1} MiB", mib(w)),
            (None, None) => String::new(),
        };
        format!(
            "{:>7.0} {:>10} {:>10.0} {latency} {:>12} {size}  {extra}\n",
            self.seconds,
            self.emitted,
            self.drain_per_s(),
            self.finished_rows,
        )
    }

    pub(super) const HEADER: &'static str = "      s    emitted  drained/s  p50 ms   p99 ms  finished rows  MiB\n";
}

/// The store's size, through the bench's second handle on it.
async fn footprint(store: &AnyStore) -> Result<Footprint, CliError> {
    match store {
        AnyStore::Sqlite(s) => s.footprint().await,
        AnyStore::Postgres(s) => s.footprint().await,
    }
    .map_err(CliError::store)
}

/// Reports every `every` until `done` is set, then once more for the part
/// of an interval left; prints each as it comes (a JSON line with `json`)
/// and returns them all.
pub(super) async fn report(
    store: &AnyStore,
    finishes: &Finishes,
    every: Duration,
    json: bool,
    done: &AtomicBool,
) -> Result<Vec<Interval>, CliError> {
    let started = Instant::now();
    let mut intervals = Vec::new();
    let (mut emitted, mut finished) = (0u64, 0u64);
    let mut wal = footprint(store).await?.wal_position;
    let mut last = started;
    if !json {
        output::print(Interval::HEADER);
    }
    loop {
        let end = last + every;
        let finishing = loop {
            if done.load(Ordering::Acquire) {
                break true;
            }
            if Instant::now() >= end {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(50).min(end.saturating_duration_since(Instant::now()))).await;
        };
        let now = Instant::now();
        finishes.forget_emits_before(now - REMEMBER_EMITS.min(now.saturating_duration_since(started)));
        let window = finishes.take_window();
        let counts = store.counts().await.map_err(CliError::store)?;
        let fp = footprint(store).await?;
        let (e, f) = (finishes.emitted_count(), finishes.count());
        let quantile = |p: f64| (window.count() > 0).then(|| window.quantile(p) as f64 / 1000.0);
        let interval = Interval {
            index: intervals.len() as u32 + 1,
            seconds: now.duration_since(started).as_secs_f64(),
            length: now.duration_since(last).as_secs_f64(),
            emitted: e - emitted,
            finished: f - finished,
            p50_ms: quantile(0.50),
            p99_ms: quantile(0.99),
            finished_rows: counts.iter().filter(|(s, _)| s.is_finished()).map(|(_, n)| n).sum(),
            unfinished_rows: counts.iter().filter(|(s, _)| !s.is_finished()).map(|(_, n)| n).sum(),
            wal_written_bytes: fp.wal_position.zip(wal).map(|(now, before)| now.saturating_sub(before)),
            footprint: fp,
        };
        wal = interval.footprint.wal_position;
        (emitted, finished, last) = (e, f, now);
        // The drain ended right after an interval: nothing more to say.
        if finishing && interval.emitted == 0 && interval.finished == 0 && !intervals.is_empty() {
            return Ok(intervals);
        }
        if json {
            let mut line = serde_json::to_string(&interval.json()).unwrap_or_default();
            line.push('\n');
            output::print(&line);
        } else {
            output::print(&interval.human());
        }
        intervals.push(interval);
        if finishing {
            return Ok(intervals);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_store::TableFootprint;

    #[test]
    fn an_interval_reports_its_rates_and_the_stores_size() {
        let i = Interval {
            index: 2,
            seconds: 120.0,
            length: 60.0,
            emitted: 300_000,
            finished: 240_000,
            p50_ms: Some(3.0),
            p99_ms: Some(20.0),
            finished_rows: 1_500_000,
            unfinished_rows: 12,
            footprint: Footprint {
                tables: vec![
                    TableFootprint {
                        name: "jadpo_deliveries".into(),
                        live_rows: 900,
                        dead_rows: Some(100),
                        bytes: Some(3 << 20),
                        vacuums: Some(4),
                    },
                    TableFootprint {
                        name: "jadpo_events".into(),
                        live_rows: 1_000,
                        dead_rows: Some(0),
                        bytes: Some(1 << 20),
                        vacuums: Some(1),
                    },
                ],
                wal_position: Some(99),
                ..Footprint::default()
            },
            wal_written_bytes: Some(7),
        };
        assert_eq!(i.drain_per_s(), 4_000.0);
        assert_eq!(i.dead_share(), Some(0.05));
        let j = i.json();
        assert_eq!(j["drain_per_s"], 4_000.0);
        assert_eq!(j["table_bytes"], 4 << 20);
        assert_eq!(j["tables"]["jadpo_deliveries"]["dead_rows"], 100);
        assert_eq!(j["file_bytes"], Value::Null);
        let line = i.human();
        assert!(
            line.contains("1500000") && line.contains("4.0") && line.contains("dead 5.0%"),
            "{line}"
        );
        let sqlite = Interval {
            footprint: Footprint {
                tables: vec![TableFootprint {
                    name: "jadpo_deliveries".into(),
                    live_rows: 900,
                    dead_rows: None,
                    bytes: None,
                    vacuums: None,
                }],
                file_bytes: Some(2 << 20),
                wal_bytes: Some(1 << 20),
                free_bytes: Some(0),
                ..Footprint::default()
            },
            ..i
        };
        assert_eq!(sqlite.dead_share(), None);
        assert!(sqlite.human().contains("wal 1.0 MiB"), "{}", sqlite.human());
    }
}
