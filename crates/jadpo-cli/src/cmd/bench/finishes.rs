//! How the bench knows deliveries finished, without asking the store: the
//! runtime's own log events. The worker logs `delivery.succeeded`
//! (`failed`, `parked`) after the store acknowledged the outcome, and the
//! claim logs `delivery.succeeded_at_claim` and `delivery.gave_up`; each
//! carries the delivery's id. A `tracing` layer of its own, with a filter
//! of its own, sees them whatever `RUST_LOG` prints, and notes when each
//! arrived. The store's counts confirm the total at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// Where the runtime's delivery events come from.
pub const TARGET: &str = "jadpo_runtime::log";

/// The events that end a delivery for good.
const TERMINAL: [&str; 5] = [
    "delivery.succeeded",
    "delivery.failed",
    "delivery.parked",
    "delivery.succeeded_at_claim",
    "delivery.gave_up",
];

/// Finished deliveries as they are seen: how many, and each one's id with
/// its time in microseconds since `start`.
#[derive(Debug)]
pub struct Finishes {
    start: Instant,
    count: AtomicU64,
    seen: Mutex<Vec<(i64, u64)>>,
}

impl Finishes {
    pub fn new(start: Instant) -> Arc<Finishes> {
        Arc::new(Finishes {
            start,
            count: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
        })
    }

    /// Deliveries seen finishing so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Microseconds since the start, on the same scale as the finishes.
    pub fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_micros()).unwrap_or(u64::MAX)
    }

    /// Every finish seen: delivery id, microseconds since the start.
    pub fn take(&self) -> Vec<(i64, u64)> {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn finished(&self, delivery: i64, at: Instant) {
        let micros = self.micros(at);
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((delivery, micros));
        self.count.fetch_add(1, Ordering::Release);
    }
}

/// The layer that feeds [`Finishes`]; give it a filter on [`TARGET`].
pub struct Watch(pub Arc<Finishes>);

#[derive(Default)]
struct Seen {
    terminal: bool,
    delivery: Option<i64>,
}

impl Visit for Seen {
    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "delivery" {
            self.delivery = Some(value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "delivery" {
            self.delivery = i64::try_from(value).ok();
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.terminal = TERMINAL.contains(&value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let text = format!("{value:?}");
            self.terminal = TERMINAL.contains(&text.as_str());
        }
    }
}

impl<S: Subscriber> Layer<S> for Watch {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let at = Instant::now();
        let mut seen = Seen::default();
        event.record(&mut seen);
        if let (true, Some(id)) = (seen.terminal, seen.delivery) {
            self.0.finished(id, at);
        }
    }
}

/// Latency percentiles in milliseconds from each delivery's emit time and
/// finish time (both in microseconds since the start). `emitted` must be
/// sorted by id. Deliveries seen on one side only are left out.
pub fn percentiles(emitted: &[(i64, u64)], finished: &[(i64, u64)], ps: &[f64]) -> Option<Vec<f64>> {
    let mut latencies: Vec<u64> = finished
        .iter()
        .filter_map(|(id, done)| {
            let i = emitted.binary_search_by_key(id, |(e, _)| *e).ok()?;
            Some(done.saturating_sub(emitted[i].1))
        })
        .collect();
    if latencies.is_empty() {
        return None;
    }
    latencies.sort_unstable();
    let n = latencies.len();
    Some(
        ps.iter()
            .map(|p| {
                // Nearest rank: the smallest value with at least p of them at or below it.
                let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
                latencies[rank - 1] as f64 / 1000.0
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pair_emits_with_finishes_by_id() {
        let emitted: Vec<(i64, u64)> = (1..=100).map(|id| (id, 1_000)).collect();
        // Delivery k finished k ms after its emit; one unknown id is ignored.
        let mut finished: Vec<(i64, u64)> = (1..=100).rev().map(|id| (id, 1_000 + id as u64 * 1_000)).collect();
        finished.push((999, 5));
        let p = percentiles(&emitted, &finished, &[0.5, 0.99, 1.0]).unwrap();
        assert_eq!(p, vec![50.0, 99.0, 100.0]);
        assert_eq!(percentiles(&emitted, &[], &[0.5]), None);
    }

    #[test]
    fn only_terminal_events_with_an_id_count() {
        use tracing_subscriber::layer::SubscriberExt;
        let finishes = Finishes::new(Instant::now());
        let subscriber = tracing_subscriber::registry().with(Watch(finishes.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(delivery = 7i64, subscriber = "s", attempt = 1u32, "delivery.succeeded");
            tracing::info!(delivery = 8i64, "delivery.retry");
            tracing::warn!(delivery = 9i64, "delivery.gave_up");
            tracing::info!("delivery.succeeded");
        });
        assert_eq!(finishes.count(), 2);
        let ids: Vec<i64> = finishes.take().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![7, 9]);
    }
}
