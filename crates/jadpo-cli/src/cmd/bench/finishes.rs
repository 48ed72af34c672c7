//! How the bench knows deliveries finished, without asking the store: the
//! runtime's own log events. The worker logs `delivery.succeeded`
//! (`failed`, `parked`) after the store acknowledged the outcome, and the
//! claim logs `delivery.succeeded_at_claim` and `delivery.gave_up`; each
//! carries the delivery's id. A `tracing` layer of its own, with a filter
//! of its own, sees them whatever `RUST_LOG` prints, and notes when each
//! arrived. The store's counts confirm the total at the end.
//!
//! Its memory does not grow with the events: emit times are kept per
//! emitted chunk as id ranges, and each finish's latency is folded at once
//! into a fixed-size histogram (`histogram.rs`). Only a finish seen before
//! its emit was noted (the emit committed, the engine ran it, and the
//! bench had not yet read the clock) waits, until that emit is noted. A
//! soak (`--duration`) forgets emits older than it needs, so its memory
//! stays flat over hours too: a finish of a forgotten emit is counted
//! without a latency.

use super::histogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// Where the runtime's delivery events come from.
pub(super) const TARGET: &str = "jadpo_runtime::log";

/// The events that end a delivery for good.
const TERMINAL: [&str; 5] = [
    "delivery.succeeded",
    "delivery.failed",
    "delivery.parked",
    "delivery.succeeded_at_claim",
    "delivery.gave_up",
];

/// Deliveries `first..=last`, emitted at `at` (microseconds since the start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    first: i64,
    last: i64,
    at: u64,
}

#[derive(Debug, Default)]
struct Timing {
    /// Sorted by id, not overlapping.
    spans: Vec<Span>,
    /// Finishes whose emit time is not known yet: id, finish time.
    early: Vec<(i64, u64)>,
    latencies: Histogram,
    /// The latencies since the last [`Finishes::take_window`].
    window: Histogram,
    /// Emits up to this id were forgotten.
    forgotten: Option<i64>,
}

impl Timing {
    fn emitted_at(&self, id: i64) -> Option<u64> {
        let i = self.spans.partition_point(|s| s.last < id);
        self.spans.get(i).filter(|s| s.first <= id).map(|s| s.at)
    }

    fn add(&mut self, span: Span) {
        let i = self.spans.partition_point(|s| s.last < span.first);
        // Consecutive ids noted at the same time extend the span before.
        if let Some(prev) = i.checked_sub(1).and_then(|p| self.spans.get_mut(p)) {
            if prev.last + 1 == span.first && prev.at == span.at {
                prev.last = span.last;
                return;
            }
        }
        self.spans.insert(i, span);
    }

    fn record(&mut self, latency: u64) {
        self.latencies.record(latency);
        self.window.record(latency);
    }

    /// Notes a finish at `done`: its latency if its emit is known, else
    /// kept until it is (unless that emit was forgotten).
    fn finish(&mut self, id: i64, done: u64) {
        match self.emitted_at(id) {
            Some(at) => self.record(done.saturating_sub(at)),
            None if self.forgotten.is_some_and(|f| id <= f) => {}
            None => self.early.push((id, done)),
        }
    }
}

/// Finished deliveries as they are seen: how many, when the last one was,
/// and the latency of each whose emit time is known.
#[derive(Debug)]
pub(super) struct Finishes {
    start: Instant,
    count: AtomicU64,
    emitted: AtomicU64,
    /// The latest finish seen, in microseconds since the start, plus one (0: none).
    last: AtomicU64,
    timing: Mutex<Timing>,
}

impl Finishes {
    pub(super) fn new(start: Instant) -> Arc<Finishes> {
        Arc::new(Finishes {
            start,
            count: AtomicU64::new(0),
            emitted: AtomicU64::new(0),
            last: AtomicU64::new(0),
            timing: Mutex::new(Timing::default()),
        })
    }

    fn timing(&self) -> MutexGuard<'_, Timing> {
        self.timing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Deliveries seen finishing so far.
    pub(super) fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Deliveries whose emit was noted so far.
    pub(super) fn emitted_count(&self) -> u64 {
        self.emitted.load(Ordering::Acquire)
    }

    /// Microseconds since the start, on the same scale as the finishes.
    pub(super) fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_micros()).unwrap_or(u64::MAX)
    }

    /// When the last finish seen arrived, in microseconds since the start.
    pub(super) fn last_finish(&self) -> Option<u64> {
        self.last.load(Ordering::Acquire).checked_sub(1)
    }

    /// Notes the emit time of deliveries `ids` (as one emit returned them).
    pub(super) fn emitted(&self, ids: impl IntoIterator<Item = i64>, at: Instant) {
        let at = self.micros(at);
        let mut t = self.timing();
        let mut run: Option<Span> = None;
        let mut n = 0;
        for id in ids {
            n += 1;
            match &mut run {
                Some(s) if s.last.checked_add(1) == Some(id) => s.last = id,
                _ => {
                    if let Some(s) = run.replace(Span {
                        first: id,
                        last: id,
                        at,
                    }) {
                        t.add(s);
                    }
                }
            }
        }
        if let Some(s) = run {
            t.add(s);
        }
        self.emitted.fetch_add(n, Ordering::AcqRel);
        if !t.early.is_empty() {
            let early = std::mem::take(&mut t.early);
            for (id, done) in early {
                t.finish(id, done);
            }
        }
    }

    /// Latency percentiles in milliseconds (nearest rank, within 1%), emit
    /// to finish. Deliveries seen on one side only are left out.
    pub(super) fn percentiles(&self, ps: &[f64]) -> Option<Vec<f64>> {
        let t = self.timing();
        if t.latencies.count() == 0 {
            return None;
        }
        Some(ps.iter().map(|p| t.latencies.quantile(*p) as f64 / 1000.0).collect())
    }

    /// The latencies recorded since the last call, and a fresh window.
    pub(super) fn take_window(&self) -> Histogram {
        std::mem::take(&mut self.timing().window)
    }

    /// Forgets the emits noted before `before`, oldest first, and the
    /// early finishes they leave unmatched.
    pub(super) fn forget_emits_before(&self, before: Instant) {
        let before = self.micros(before);
        let mut t = self.timing();
        let old = t.spans.partition_point(|s| s.at < before);
        if old == 0 {
            return;
        }
        let last = t.spans[old - 1].last;
        t.spans.drain(..old);
        t.forgotten = Some(t.forgotten.map_or(last, |f| f.max(last)));
        t.early.retain(|(id, _)| *id > last);
    }

    fn finished(&self, delivery: i64, at: Instant) {
        let micros = self.micros(at);
        self.timing().finish(delivery, micros);
        self.last.fetch_max(micros.saturating_add(1), Ordering::AcqRel);
        self.count.fetch_add(1, Ordering::Release);
    }
}

/// The layer that feeds [`Finishes`]; give it a filter on [`TARGET`].
pub(super) struct Watch(pub Arc<Finishes>);

#[derive(Default)]
struct Seen {
    terminal: bool,
    delivery: Option<i64>,
}

/// A message written through `Debug`, kept only while it is short enough
/// to be one of [`TERMINAL`]: no allocation per event.
#[derive(Default)]
struct Short {
    buf: [u8; 32],
    len: usize,
}

impl std::fmt::Write for Short {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
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
            let mut text = Short::default();
            self.terminal = std::fmt::write(&mut text, format_args!("{value:?}")).is_ok()
                && std::str::from_utf8(&text.buf[..text.len]).is_ok_and(|t| TERMINAL.contains(&t));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_pair_emits_with_finishes_by_id() {
        let start = Instant::now();
        let f = Finishes::new(start);
        // Delivery 1 finishes before its emit is noted: it waits for it.
        f.finished(1, start + ms(1));
        f.emitted(1..=100, start + ms(1));
        // Delivery k finished k ms after its emit; one unknown id is ignored.
        for id in (2..=100).rev() {
            f.finished(id, start + ms(1 + id as u64));
        }
        f.finished(999, start + ms(5));
        let p = f.percentiles(&[0.5, 0.99, 1.0]).unwrap();
        for (got, want) in p.iter().zip([50.0, 99.0, 100.0]) {
            assert!((got - want).abs() <= want * 0.01, "{got} vs {want}");
        }
        assert_eq!(f.count(), 101);
        assert_eq!(f.last_finish(), Some(101_000));
        assert_eq!(Finishes::new(start).percentiles(&[0.5]), None);
    }

    #[test]
    fn a_window_holds_the_latencies_since_it_was_taken_and_old_emits_are_forgotten() {
        let start = Instant::now();
        let f = Finishes::new(start);
        f.emitted(1..=10, start);
        f.finished(1, start + ms(10));
        assert_eq!(f.take_window().count(), 1);
        f.finished(2, start + ms(20));
        f.finished(3, start + ms(30));
        let w = f.take_window();
        assert_eq!(w.count(), 2);
        assert!(w.quantile(1.0).abs_diff(30_000) <= 300, "{}", w.quantile(1.0));
        assert_eq!(f.take_window().count(), 0);
        // Emits of 11..=20 are noted later; 1..=10 are forgotten.
        f.emitted(11..=20, start + ms(100));
        f.finished(25, start + ms(101));
        f.forget_emits_before(start + ms(50));
        f.finished(4, start + ms(200));
        f.finished(12, start + ms(110));
        assert_eq!(f.count(), 6, "every finish is counted");
        let t = f.timing();
        assert_eq!(t.window.count(), 1, "a forgotten emit's finish has no latency");
        assert_eq!(t.early, vec![(25, 101_000)], "an unknown later id still waits");
        assert_eq!(t.latencies.count(), 4);
    }

    #[test]
    fn emits_are_kept_as_id_ranges() {
        let mut t = Timing::default();
        t.add(Span {
            first: 1,
            last: 10,
            at: 5,
        });
        t.add(Span {
            first: 11,
            last: 20,
            at: 5,
        });
        t.add(Span {
            first: 21,
            last: 30,
            at: 7,
        });
        // Out of order and with a gap, as another store might give them.
        t.add(Span {
            first: 40,
            last: 40,
            at: 9,
        });
        t.add(Span {
            first: 35,
            last: 36,
            at: 8,
        });
        assert_eq!(t.spans.len(), 4);
        assert_eq!(t.emitted_at(15), Some(5));
        assert_eq!(t.emitted_at(21), Some(7));
        assert_eq!(t.emitted_at(36), Some(8));
        assert_eq!(t.emitted_at(40), Some(9));
        assert_eq!(t.emitted_at(33), None);
        assert_eq!(t.emitted_at(0), None);
        assert_eq!(t.emitted_at(41), None);
    }

    #[test]
    fn one_emit_of_consecutive_ids_is_one_span() {
        let start = Instant::now();
        let f = Finishes::new(start);
        f.emitted(1..=1_000, start);
        f.emitted(1_001..=2_000, start + ms(1));
        f.emitted([2_005, 2_001, 2_002], start + ms(2));
        let t = f.timing();
        assert_eq!(t.spans.len(), 4, "{:?}", t.spans);
        assert_eq!(t.emitted_at(2_002), Some(2_000));
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
            tracing::info!(delivery = 10i64, "{}", "delivery.parked");
            tracing::info!(
                delivery = 11i64,
                "delivery.succeeded, and a much longer message than any"
            );
            tracing::info!("delivery.succeeded");
        });
        assert_eq!(finishes.count(), 3);
        let t = finishes.timing();
        let mut ids: Vec<i64> = t.early.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![7, 9, 10]);
    }
}
