//! What a bench run measured, as a readable summary or one JSON line.

use jadpo_core::DeliveryState;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// One run's figures.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub events: u64,
    pub concurrency: usize,
    /// `backlog` or `rate`.
    pub mode: &'static str,
    pub rate_per_s: Option<u64>,
    /// `noop`, `http` or `publish`.
    pub subscriber: &'static str,
    /// `--driver`: the broker published to.
    pub driver: Option<&'static str>,
    pub http_latency: Option<Duration>,
    /// `--connection-rate`: the sink connection's `rate:`.
    pub connection_rate: Option<u64>,
    /// `--keys`: the deliveries were keyed over this many keys.
    pub keys: Option<u64>,
    /// `--order` or `--concurrency-per-key`: the keys' rule, as a
    /// delivery keeps it (`fifo`, `strict`, `cap:N`).
    pub order: Option<String>,
    pub store: &'static str,
    pub schema: Option<String>,
    pub store_url: String,
    pub kept: bool,
    pub emit: Duration,
    pub drain: Duration,
    /// Emit to finish, in milliseconds; `None` when no finish was seen in
    /// process.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub counts: BTreeMap<DeliveryState, u64>,
    pub sink_requests: Option<u64>,
    pub http_baseline_per_s: Option<f64>,
    /// `--driver`: a plain client loop's confirmed publishes a second.
    pub broker_baseline_per_s: Option<f64>,
    /// Deliveries seen finishing in process.
    pub seen_finished: u64,
    /// A soak's length and its intervals.
    pub duration: Option<Duration>,
    pub intervals: Vec<super::soak::Interval>,
    /// `--retention`: finished deliveries older were pruned during the run.
    pub retention: Option<Duration>,
    /// With spans exported: how many the collector took, how many dropped.
    pub spans: Option<(u64, u64)>,
    /// `--hot-key`: how long after the drain began every other key's
    /// delivery had started (the drain is not waited for).
    pub others_started: Option<Duration>,
}

fn per_s(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// Rounded to a tenth, for people and JSON alike.
fn tenth(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The process's peak resident memory (`VmHWM`), on Linux.
pub(super) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl Report {
    pub(super) fn emit_per_s(&self) -> f64 {
        per_s(self.events, self.emit)
    }

    pub(super) fn drain_per_s(&self) -> f64 {
        per_s(self.events, self.drain)
    }

    pub(super) fn succeeded(&self) -> u64 {
        self.counts.get(&DeliveryState::Succeeded).copied().unwrap_or(0)
    }

    /// Whether every delivery succeeded: by the store's counts, or, where
    /// retention pruned some, by the finishes seen and no delivery failed
    /// or parked among those left.
    pub(super) fn all_succeeded(&self) -> bool {
        if self.others_started.is_some() {
            // The backlog is left undrained: none failed is what counts.
            return self
                .counts
                .iter()
                .all(|(s, n)| !matches!(s, DeliveryState::Failed | DeliveryState::Parked) || *n == 0);
        }
        match self.retention {
            None => self.succeeded() == self.events,
            Some(_) => {
                self.seen_finished >= self.events
                    && self
                        .counts
                        .iter()
                        .all(|(s, n)| *s == DeliveryState::Succeeded || *n == 0)
            }
        }
    }

    /// The engine's drain against the plain HTTP loop, as a fraction.
    pub(super) fn http_ratio(&self) -> Option<f64> {
        self.http_baseline_per_s
            .filter(|b| *b > 0.0)
            .map(|b| self.drain_per_s() / b)
    }

    /// The engine's drain against the plain client loop, as a fraction.
    pub(super) fn broker_ratio(&self) -> Option<f64> {
        self.broker_baseline_per_s
            .filter(|b| *b > 0.0)
            .map(|b| self.drain_per_s() / b)
    }

    pub(super) fn json(&self) -> Value {
        let counts: Map<String, Value> = self
            .counts
            .iter()
            .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
            .collect();
        json!({
            "events": self.events,
            "concurrency": self.concurrency,
            "mode": self.mode,
            "rate_per_s": self.rate_per_s,
            "subscriber": self.subscriber,
            "http_latency_ms": self.http_latency.map(|d| d.as_secs_f64() * 1000.0),
            "connection_rate_per_s": self.connection_rate,
            "keys": self.keys,
            "order": self.order,
            "store": self.store,
            "schema": self.schema,
            "store_url": self.store_url,
            "kept": self.kept,
            "emit_seconds": self.emit.as_secs_f64(),
            "emit_per_s": tenth(self.emit_per_s()),
            "drain_seconds": self.drain.as_secs_f64(),
            "drain_per_s": tenth(self.drain_per_s()),
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "peak_rss_bytes": self.peak_rss_bytes,
            "counts": counts,
            "sink_requests": self.sink_requests,
            "http_baseline_per_s": self.http_baseline_per_s.map(tenth),
            "http_ratio": self.http_ratio().map(|r| (r * 1000.0).round() / 1000.0),
            "driver": self.driver,
            "broker_baseline_per_s": self.broker_baseline_per_s.map(tenth),
            "broker_ratio": self.broker_ratio().map(|r| (r * 1000.0).round() / 1000.0),
            "seen_finished": self.seen_finished,
            "duration_seconds": self.duration.map(|d| d.as_secs_f64()),
            "retention_seconds": self.retention.map(|d| d.as_secs_f64()),
            "spans_exported": self.spans.map(|(exported, _)| exported),
            "spans_dropped": self.spans.map(|(_, dropped)| dropped),
            "intervals": self.intervals.iter().map(super::soak::Interval::json).collect::<Vec<_>>(),
            "hot_key": self.others_started.is_some(),
            "others_started_ms": self.others_started.map(|d| tenth(d.as_secs_f64() * 1000.0)),
        })
    }

    pub(super) fn human(&self) -> String {
        let mut out = String::new();
        let subscriber = match (self.http_latency, self.driver) {
            (Some(l), _) => format!(
                "HTTP subscriber (sink answers after {})",
                crate::output::duration_short(l)
            ),
            (None, Some(driver)) => format!("subscriber publishing to {driver}"),
            (None, None) => "no-op subscriber".to_owned(),
        };
        let mode = match self.rate_per_s {
            Some(r) => format!("emitting at {r}/s"),
            None => "backlog".to_owned(),
        };
        out.push_str(&format!(
            "jadpo bench: {} events, concurrency {}, {mode}, {subscriber}, {}\n",
            self.events, self.concurrency, self.store
        ));
        if let Some(d) = self.duration {
            out.push_str(&format!(
                "  soak      {}, {} intervals reported above\n",
                crate::output::duration_short(d),
                self.intervals.len()
            ));
        }
        if let Some(r) = self.retention {
            out.push_str(&format!(
                "  retention {}: {} finished, {} seen in process\n",
                crate::output::duration_short(r),
                self.counts
                    .iter()
                    .filter(|(s, _)| s.is_finished())
                    .map(|(_, n)| n)
                    .sum::<u64>(),
                self.seen_finished
            ));
        }
        out.push_str(&format!(
            "  emit      {:>10.0} events/s      ({} in {:.2} s)\n",
            self.emit_per_s(),
            self.events,
            self.emit.as_secs_f64()
        ));
        if let (Some(t), Some(keys)) = (self.others_started, self.keys) {
            out.push_str(&format!(
                "  hot key   every one of the {} other keys' deliveries started {:.1} ms after the drain began, behind {} on one key\n",
                keys - 1,
                t.as_secs_f64() * 1000.0,
                self.events - (keys - 1)
            ));
        } else {
            out.push_str(&format!(
                "  drain     {:>10.0} deliveries/s  ({} in {:.2} s)\n",
                self.drain_per_s(),
                self.events,
                self.drain.as_secs_f64()
            ));
        }
        match (self.p50_ms, self.p99_ms) {
            (Some(p50), Some(p99)) => out.push_str(&format!(
                "  latency   p50 {p50:.1} ms, p99 {p99:.1} ms (emit to finish)\n"
            )),
            _ => out.push_str("  latency   not measured: no finish was seen in process\n"),
        }
        if let Some(rss) = self.peak_rss_bytes {
            out.push_str(&format!("  peak RSS  {:.1} MiB\n", rss as f64 / (1024.0 * 1024.0)));
        }
        let counts: Vec<String> = self.counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
        out.push_str(&format!("  store     {}\n", counts.join(", ")));
        if let (Some(base), Some(ratio)) = (self.http_baseline_per_s, self.http_ratio()) {
            out.push_str(&format!(
                "  http      a plain HTTP loop: {base:.0} requests/s; the engine drained at {:.1}% of it\n",
                ratio * 100.0
            ));
        }
        if let (Some(base), Some(ratio), Some(driver)) = (self.broker_baseline_per_s, self.broker_ratio(), self.driver)
        {
            out.push_str(&format!(
                "  {driver:<9} a plain client loop: {base:.0} confirmed publishes/s; the engine drained at {:.1}% of it\n",
                ratio * 100.0
            ));
        }
        if self.kept {
            out.push_str(&format!("  kept      {}\n", self.store_url));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_the_ratio_come_from_the_durations() {
        let r = Report {
            events: 1_000,
            emit: Duration::from_millis(100),
            drain: Duration::from_millis(500),
            http_baseline_per_s: Some(4_000.0),
            counts: [(DeliveryState::Succeeded, 1_000)].into(),
            ..Report::default()
        };
        assert_eq!(r.emit_per_s(), 10_000.0);
        assert_eq!(r.drain_per_s(), 2_000.0);
        assert_eq!(r.http_ratio(), Some(0.5));
        let j = r.json();
        assert_eq!(j["counts"]["succeeded"], 1_000);
        assert_eq!(j["http_ratio"], 0.5);
        assert_eq!(r.succeeded(), 1_000);
    }

    #[test]
    fn peak_rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_bytes().is_some_and(|b| b > 0));
        }
    }
}
