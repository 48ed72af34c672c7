//! `GET /metrics`, in Prometheus' text format.
//!
//! Three sources:
//! - **The store**, read at each scrape (every process on one store shows
//!   the same): deliveries by state, each connection's breaker (state,
//!   consecutive unavailable attempts, pause, held deliveries, alert), and
//!   each subscriber's oldest due delivery. Never a count of a whole table:
//!   each count stops at [`COUNT_CAP`] (reported as "that many or more"),
//!   each read goes through an index (`Store::counts_up_to`,
//!   `Store::gauges`), so a scrape costs the same with a million rows.
//! - **This process's claims and attempts** on that store, timed by its
//!   engine (`jadpo_claim_seconds`, and the histograms of
//!   `jadpo_runtime::metrics::Timings`).
//! - **This process's events** on that store, counted from the runtime's
//!   log events by [`CountingLayer`] (attempts by outcome, failures by
//!   kind, holds, breaker changes, alerts, events emitted). The layer must
//!   be part of the process's `tracing` subscriber; without it these
//!   counters are left out. Each engine logs inside a span whose `store`
//!   field names its store (`cmd/process.rs`), so a process working several
//!   stores counts each store's events apart.

use super::prom::{self, label};
use jadpo_core::{BreakerState, DeliveryState, FailureKind};
use jadpo_lang::App;
use jadpo_runtime::metrics::Claims;
use jadpo_runtime::metrics::Timings;
use jadpo_store::{GaugeQuery, Store, StoreError};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One store's counters, by series (`name{labels}`). Labels come only from
/// fixed sets (outcomes, failure kinds, transitions), never from names or
/// payloads.
type Counters = BTreeMap<&'static str, BTreeMap<String, u64>>;

/// This process's counters by store: the `store` field of the span an event
/// was logged in, `""` for an event outside any.
static COUNTERS: Mutex<BTreeMap<String, Counters>> = Mutex::new(BTreeMap::new());

fn count(store: &str, name: &'static str, labels: String) {
    let mut all = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    let of_store = match all.get_mut(store) {
        Some(c) => c,
        None => all.entry(store.to_owned()).or_default(),
    };
    *of_store.entry(name).or_default().entry(labels).or_default() += 1;
}

/// The counters of the stores named, added up.
fn counters_of(stores: &[&str]) -> Counters {
    let all = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
    let mut sum = Counters::new();
    for store in stores {
        for (name, series) in all.get(*store).into_iter().flatten() {
            for (labels, n) in series {
                *sum.entry(name).or_default().entry(labels.clone()).or_default() += n;
            }
        }
    }
    sum
}

/// A span's `store` field, kept with the span for the events inside it.
struct StoreOfSpan(String);

#[derive(Default)]
struct StoreField(Option<String>);

impl Visit for StoreField {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "store" {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "store" {
            self.0 = Some(value.to_owned());
        }
    }
}

/// Counts the runtime's log events (`delivery.succeeded`,
/// `delivery.retry`, `delivery.failed`, `delivery.parked`,
/// `delivery.held`, `delivery.gave_up`, `delivery.lease_expired`,
/// `breaker.opened`, `breaker.reopened`, `breaker.closed`,
/// `delivery.alert`, `event.emitted`) into the `/metrics` counters. Add it
/// to the process's subscriber: `registry().with(filter).with(logs).with(CountingLayer)`.
/// It reads only the event's name and its `kind` field.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CountingLayer;

#[derive(Default)]
struct Seen {
    message: String,
    kind: Option<String>,
}

impl Visit for Seen {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "kind" => self.kind = Some(format!("{value:?}")),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "kind" => self.kind = Some(value.to_owned()),
            _ => {}
        }
    }
}

/// Set once a [`CountingLayer`] is part of the process's subscriber: until
/// then the process counters are left out rather than shown as zeros.
static INSTALLED: AtomicBool = AtomicBool::new(false);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CountingLayer {
    fn on_layer(&mut self, _subscriber: &mut S) {
        INSTALLED.store(true, Ordering::Relaxed);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut store = StoreField::default();
        attrs.record(&mut store);
        if let (Some(name), Some(span)) = (store.0, ctx.span(id)) {
            span.extensions_mut().insert(StoreOfSpan(name));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut seen = Seen::default();
        event.record(&mut seen);
        // The innermost span that names a store.
        let store = ctx
            .event_scope(event)
            .and_then(|mut scope| scope.find_map(|span| span.extensions().get::<StoreOfSpan>().map(|s| s.0.clone())));
        record(store.as_deref().unwrap_or(""), &seen.message, seen.kind.as_deref());
    }
}

/// Counts one event of `store` by its name (and failure kind).
pub(crate) fn record(store: &str, name: &str, kind: Option<&str>) {
    let outcome = match name {
        "delivery.succeeded" => Some("succeeded"),
        "delivery.retry" => Some("retry"),
        "delivery.failed" => Some("failed"),
        "delivery.parked" => Some("parked"),
        _ => None,
    };
    if let Some(outcome) = outcome {
        count(store, "jadpo_attempts_total", format!("{{outcome=\"{outcome}\"}}"));
        if let Some(kind) = kind.and_then(FailureKind::parse) {
            count(store, "jadpo_failures_total", format!("{{kind=\"{}\"}}", kind.as_str()));
        }
        return;
    }
    match name {
        "delivery.held" => count(store, "jadpo_holds_total", String::new()),
        "delivery.gave_up" => count(store, "jadpo_gave_up_total", String::new()),
        "delivery.lease_expired" => count(store, "jadpo_lease_expired_total", String::new()),
        "delivery.succeeded_at_claim" => count(store, "jadpo_handled_at_claim_total", String::new()),
        "breaker.opened" => count(
            store,
            "jadpo_breaker_transitions_total",
            "{transition=\"opened\"}".into(),
        ),
        "breaker.reopened" => count(
            store,
            "jadpo_breaker_transitions_total",
            "{transition=\"reopened\"}".into(),
        ),
        "breaker.closed" => count(
            store,
            "jadpo_breaker_transitions_total",
            "{transition=\"closed\"}".into(),
        ),
        "delivery.alert" => count(store, "jadpo_alerts_total", "{alert=\"connection_unavailable\"}".into()),
        "event.emitted" => count(store, "jadpo_events_emitted_total", String::new()),
        _ => {}
    }
}

/// Rendered only where the `CountingLayer` is installed (`serve`, `dev`).
pub(super) const PROCESS_COUNTERS: [(&str, &str); 9] = [
    (
        "jadpo_attempts_total",
        "Delivery attempts this process finished, by outcome.",
    ),
    (
        "jadpo_failures_total",
        "Failed attempts this process finished, by failure kind.",
    ),
    (
        "jadpo_holds_total",
        "Deliveries this process held behind an open breaker.",
    ),
    (
        "jadpo_gave_up_total",
        "Deliveries this process failed at the claim, their budget used up.",
    ),
    (
        "jadpo_lease_expired_total",
        "Deliveries this process took over from a lost worker.",
    ),
    (
        "jadpo_handled_at_claim_total",
        "Deliveries found already handled at the claim.",
    ),
    (
        "jadpo_breaker_transitions_total",
        "Breaker changes this process made, by transition.",
    ),
    (
        "jadpo_alerts_total",
        "connection_unavailable alerts this process raised.",
    ),
    ("jadpo_events_emitted_total", "Events this process emitted."),
];

/// The most any count `/metrics` shows reads: a value of this means "this
/// many or more". The same on every store; far above what a healthy queue
/// holds, so a count at the cap is itself worth an alert.
pub(crate) const COUNT_CAP: u64 = 10_000;

/// What `/metrics` shows of this process for one store: its engine's
/// claims, and the counters of the events logged under the names given
/// (the store's, and `""` too for the first store, whose events outside any
/// engine's span are counted there).
pub(crate) struct ProcessPart<'a> {
    pub claims: Claims,
    pub timings: Timings,
    pub counted: &'a [&'a str],
}

/// The whole `/metrics` text.
pub(crate) async fn render<S: Store>(
    store: &S,
    app: &App,
    now: jadpo_core::Timestamp,
    process: &ProcessPart<'_>,
) -> Result<String, StoreError> {
    let mut out = String::new();
    let counts = store.counts_up_to(COUNT_CAP).await?;
    deliveries_and_claims(&mut out, &counts, process.claims);
    let subscribers: Vec<String> = app.subscribers.keys().cloned().collect();
    let connections: Vec<String> = app.connections.keys().cloned().collect();
    let gauges = store
        .gauges(&GaugeQuery {
            subscribers: &subscribers,
            connections: &connections,
            now,
            cap: COUNT_CAP,
        })
        .await?;
    let breakers = crate::views::with_app_connections(gauges.breakers, Some(app));
    breaker_gauges(&mut out, &breakers);
    let limits = crate::views::limits_with(store, Some(app), now, &gauges.waiting).await?;
    limit_gauges(&mut out, &limits);
    let w = &mut out;
    let held: u64 = breakers.iter().map(|b| b.held).sum();
    let _ = writeln!(
        w,
        "# HELP jadpo_held Deliveries held behind any breaker (each breaker's counted up to {COUNT_CAP})."
    );
    let _ = writeln!(w, "# TYPE jadpo_held gauge");
    let _ = writeln!(w, "jadpo_held {held}");
    oldest_due(w, &subscribers, &gauges.oldest_due, now);
    timings(w, &process.timings);
    span_export(w);

    if INSTALLED.load(Ordering::Relaxed) {
        process_counters(&mut out, &counters_of(process.counted));
    }
    Ok(out)
}

/// The process's span export (`otel/`): zeros while it exports nothing.
fn span_export(w: &mut String) {
    let counters = [
        (
            "jadpo_trace_spans_exported_total",
            "Spans this process's OTLP collector accepted.",
            &crate::otel::EXPORTED,
        ),
        (
            "jadpo_trace_spans_dropped_total",
            "Spans this process dropped: its export queue was full, or an export failed or timed out.",
            &crate::otel::DROPPED,
        ),
    ];
    for (name, help, n) in counters {
        let _ = writeln!(w, "# HELP {name} {help}");
        let _ = writeln!(w, "# TYPE {name} counter");
        let _ = writeln!(w, "{name} {}", n.load(Ordering::Relaxed));
    }
}

/// Deliveries by state, and this process's claims on the store.
fn deliveries_and_claims(w: &mut String, counts: &BTreeMap<DeliveryState, u64>, claims: Claims) {
    let _ = writeln!(
        w,
        "# HELP jadpo_deliveries Deliveries in the store by state, each counted up to {COUNT_CAP}: \
         {COUNT_CAP} means {COUNT_CAP} or more."
    );
    let _ = writeln!(w, "# TYPE jadpo_deliveries gauge");
    for state in DeliveryState::ALL {
        let n = counts.get(&state).copied().unwrap_or(0);
        let _ = writeln!(w, "jadpo_deliveries{{state=\"{state}\"}} {n}");
    }
    let _ = writeln!(w, "# HELP jadpo_claim_seconds How long the worker's claims took.");
    let _ = writeln!(w, "# TYPE jadpo_claim_seconds summary");
    let _ = writeln!(w, "jadpo_claim_seconds_sum {:.6}", claims.total.as_secs_f64());
    let _ = writeln!(w, "jadpo_claim_seconds_count {}", claims.count);
    let _ = writeln!(
        w,
        "# HELP jadpo_claim_seconds_max The longest claim since the process started."
    );
    let _ = writeln!(w, "# TYPE jadpo_claim_seconds_max gauge");
    let _ = writeln!(w, "jadpo_claim_seconds_max {:.6}", claims.max.as_secs_f64());
}

/// How late each subscriber's queue runs: the age of its oldest delivery
/// due at `now` (engine time), 0 when none is, so an alert's series never
/// vanishes.
fn oldest_due(
    w: &mut String,
    subscribers: &[String],
    found: &BTreeMap<String, jadpo_core::Timestamp>,
    now: jadpo_core::Timestamp,
) {
    let name = "jadpo_oldest_due_age_seconds";
    let _ = writeln!(
        w,
        "# HELP {name} Seconds since each subscriber's oldest due delivery became due (0 when none is due)."
    );
    let _ = writeln!(w, "# TYPE {name} gauge");
    for s in subscribers {
        let age = found.get(s).map_or(0.0, |at| now.since(*at).as_secs_f64());
        let _ = writeln!(w, "{name}{{subscriber=\"{}\"}} {age}", label(s));
    }
}

/// This engine's histograms.
fn timings(w: &mut String, t: &Timings) {
    let claim = "jadpo_claim_duration_seconds";
    prom::histogram_header(w, claim, "How long the worker's claims took (a histogram).");
    prom::histogram(w, claim, "", &t.claim);
    let first = "jadpo_emit_to_start_seconds";
    prom::histogram_header(
        w,
        first,
        "From a delivery's creation (its event's emit) to the start of its first attempt, engine time.",
    );
    prom::histogram(w, first, "", &t.emit_to_start);
    let attempt = "jadpo_attempt_duration_seconds";
    prom::histogram_header(
        w,
        attempt,
        "How long attempts ran, under each connection they called (\"none\": no call).",
    );
    for (connection, h) in &t.attempts {
        prom::histogram(w, attempt, &format!("connection=\"{}\"", label(connection)), h);
    }
}

/// Each connection's breaker: its state, held deliveries, unavailable
/// attempts in a row, pause and alert.
fn breaker_gauges(w: &mut String, breakers: &[jadpo_store::BreakerView]) {
    let _ = writeln!(
        w,
        "# HELP jadpo_breaker_state Each connection's circuit breaker: 1 for its current state."
    );
    let _ = writeln!(w, "# TYPE jadpo_breaker_state gauge");
    for b in breakers {
        for s in [BreakerState::Closed, BreakerState::Open, BreakerState::Probing] {
            let on = u8::from(b.breaker.state == s);
            let _ = writeln!(
                w,
                "jadpo_breaker_state{{connection=\"{}\",state=\"{s}\"}} {on}",
                label(&b.breaker.connection)
            );
        }
    }
    let per_breaker: [(&str, &str, &str); 4] = [
        (
            "jadpo_breaker_held",
            "gauge",
            "Deliveries held behind each connection's breaker, counted up to 10000: 10000 means 10000 or more.",
        ),
        (
            "jadpo_breaker_consecutive_unavailable",
            "gauge",
            "Unavailable attempts in a row through each connection.",
        ),
        (
            "jadpo_breaker_pause_seconds",
            "gauge",
            "The breaker's current pause before a probe.",
        ),
        (
            "jadpo_breaker_alert_raised",
            "gauge",
            "1 when this outage's connection_unavailable alert has been raised.",
        ),
    ];
    for (name, ty, help) in per_breaker {
        let _ = writeln!(w, "# HELP {name} {help}");
        let _ = writeln!(w, "# TYPE {name} {ty}");
        for b in breakers {
            let value = match name {
                "jadpo_breaker_held" => b.held as f64,
                "jadpo_breaker_consecutive_unavailable" => f64::from(b.breaker.consecutive_unavailable),
                "jadpo_breaker_pause_seconds" => b.breaker.pause.as_secs_f64(),
                _ => f64::from(u8::from(b.breaker.alert_raised)),
            };
            let _ = writeln!(w, "{name}{{connection=\"{}\"}} {value}", label(&b.breaker.connection));
        }
    }
}

/// Each connection's limits: tokens, slots in use, waiting, paused.
fn limit_gauges(w: &mut String, limits: &BTreeMap<String, serde_json::Value>) {
    let per_limit: [(&str, &str, &str); 4] = [
        (
            "jadpo_connection_tokens",
            "tokens",
            "Tokens in each rate-limited connection's bucket.",
        ),
        (
            "jadpo_connection_slots_in_use",
            "slots_in_use",
            "Calls in flight on each connection with limits, every process.",
        ),
        (
            "jadpo_connection_waiting",
            "waiting",
            "Due deliveries waiting for room on each connection with limits, counted up to 10000.",
        ),
        (
            "jadpo_connection_paused",
            "paused_until",
            "1 while a 429's Retry-After pauses the connection.",
        ),
    ];
    for (name, field, help) in per_limit {
        let _ = writeln!(w, "# HELP {name} {help}");
        let _ = writeln!(w, "# TYPE {name} gauge");
        for (connection, v) in limits {
            let value = match field {
                "paused_until" => u64::from(!v[field].is_null()),
                _ => match v[field].as_u64() {
                    Some(n) => n,
                    None => continue,
                },
            };
            let _ = writeln!(w, "{name}{{connection=\"{}\"}} {value}", label(connection));
        }
    }
}

/// This process's counters of the stores named, zeros where a series has
/// none yet.
fn process_counters(w: &mut String, counters: &Counters) {
    for (name, help) in PROCESS_COUNTERS {
        let _ = writeln!(w, "# HELP {name} {help}");
        let _ = writeln!(w, "# TYPE {name} counter");
        match counters.get(name) {
            Some(series) => {
                for (labels, n) in series {
                    let _ = writeln!(w, "{name}{labels} {n}");
                }
            }
            None if name == "jadpo_attempts_total" => {
                for outcome in ["succeeded", "retry", "failed", "parked"] {
                    let _ = writeln!(w, "{name}{{outcome=\"{outcome}\"}} 0");
                }
            }
            None if name == "jadpo_failures_total" || name == "jadpo_breaker_transitions_total" => {}
            None => {
                let labels = if name == "jadpo_alerts_total" {
                    "{alert=\"connection_unavailable\"}"
                } else {
                    ""
                };
                let _ = writeln!(w, "{name}{labels} 0");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn the_layer_counts_the_runtime_events() {
        let subscriber = tracing_subscriber::registry().with(CountingLayer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(delivery = 1, code = "http.404", kind = %FailureKind::NotFound, "delivery.failed");
            tracing::info!(connection = "c", "breaker.opened");
        });
        assert!(INSTALLED.load(Ordering::Relaxed));
        let all = counters_of(&[""]);
        assert!(all["jadpo_attempts_total"]["{outcome=\"failed\"}"] >= 1);
        assert!(all["jadpo_failures_total"]["{kind=\"not_found\"}"] >= 1);
        assert!(all["jadpo_breaker_transitions_total"]["{transition=\"opened\"}"] >= 1);
    }

    #[test]
    fn only_known_kinds_become_labels() {
        record("", "delivery.failed", Some("rejected"));
        record("", "delivery.failed", Some("a made-up kind\"}"));
        let all = counters_of(&[""]);
        let failures = &all["jadpo_failures_total"];
        assert!(failures.contains_key("{kind=\"rejected\"}"));
        assert!(failures.keys().all(|k| !k.contains("made-up")));
    }

    #[test]
    fn each_store_counts_the_events_logged_in_its_engines_span() {
        let subscriber = tracing_subscriber::registry().with(CountingLayer);
        tracing::subscriber::with_default(subscriber, || {
            let main = tracing::info_span!("engine", store = "metrics-main");
            let audit = tracing::info_span!("engine", store = "metrics-audit");
            main.in_scope(|| {
                tracing::info!(delivery = 1, "delivery.succeeded");
                tracing::info!(delivery = 2, "delivery.succeeded");
                // A span inside the engine's keeps its store.
                tracing::info_span!("run").in_scope(|| tracing::info!(delivery = 3, "delivery.held"));
            });
            audit.in_scope(|| tracing::info!(delivery = 4, "delivery.succeeded"));
        });
        let main = counters_of(&["metrics-main"]);
        assert_eq!(main["jadpo_attempts_total"]["{outcome=\"succeeded\"}"], 2);
        assert_eq!(main["jadpo_holds_total"][""], 1);
        let audit = counters_of(&["metrics-audit"]);
        assert_eq!(audit["jadpo_attempts_total"]["{outcome=\"succeeded\"}"], 1);
        assert!(!audit.contains_key("jadpo_holds_total"));
        let both = counters_of(&["metrics-main", "metrics-audit"]);
        assert_eq!(both["jadpo_attempts_total"]["{outcome=\"succeeded\"}"], 3);
    }
}
