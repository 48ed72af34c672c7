//! The spans the engine records (docs/observability.md), made with the
//! OpenTelemetry API: an emit, each attempt, each provider call, a hold,
//! a schedule's run and a route's request.
//!
//! Off by default, and then nothing here allocates: every span is an
//! `Option`, so a process that exports nothing pays one branch per span.
//! The tracer is the engine's, not a process-wide one, so two engines in
//! one process (or two tests) may trace to different places.
//!
//! The context that crosses the store is the event's [`TraceContext`],
//! the core's own type: converted to OpenTelemetry's here, at the edge.

use jadpo_core::TraceContext;
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use std::borrow::Cow;
use std::str::FromStr as _;
use std::sync::Arc;

/// The value of `messaging.system` on every messaging span.
const SYSTEM: &str = "jadpo";

/// The most attributes an attempt's span has: the four it starts with,
/// five or six it gets once recording, and the outcome's three or four.
const ATTEMPT_ATTRIBUTES: usize = 16;

/// Where the engine's spans go: nowhere, or to a tracer.
#[derive(Clone, Default)]
pub struct Spans(Option<Arc<Tracer>>);

struct Tracer {
    tracer: BoxedTracer,
    /// Event, subscriber, worker and connection names, which every span
    /// repeats.
    names: Interned,
    /// `process EVENT`, an attempt's span name, by event.
    process: Interned,
    /// `send EVENT`, an emit's, by event.
    send: Interned,
}

/// Most distinct strings a process keeps for good: beyond them (an app
/// with that many names), a span allocates its own, as it would without.
const MAX_INTERNED: usize = 10_000;

/// Strings kept for the process's life, so that each span that repeats
/// one shares it rather than allocating a copy (and its export dropping
/// it): a fifth of what tracing cost an attempt was such allocations.
/// They are the app's names, a bounded set.
#[derive(Default)]
struct Interned(std::sync::RwLock<std::collections::HashMap<Box<str>, &'static str>>);

impl Interned {
    fn get(&self, key: &str, make: impl FnOnce() -> String) -> Cow<'static, str> {
        if let Some(s) = self.0.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Cow::Borrowed(s);
        }
        let value = make();
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_INTERNED {
            return Cow::Owned(value);
        }
        let kept: &'static str = map
            .entry(key.into())
            .or_insert_with(|| Box::leak(value.into_boxed_str()));
        Cow::Borrowed(kept)
    }

    fn name(&self, name: &str) -> Cow<'static, str> {
        self.get(name, || name.to_owned())
    }
}

impl std::fmt::Debug for Spans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Spans(on)" } else { "Spans(off)" })
    }
}

impl Spans {
    /// No spans: the default.
    pub fn off() -> Spans {
        Spans(None)
    }

    /// Spans recorded by `tracer`.
    pub fn to(tracer: BoxedTracer) -> Spans {
        Spans(Some(Arc::new(Tracer {
            tracer,
            names: Interned::default(),
            process: Interned::default(),
            send: Interned::default(),
        })))
    }

    /// Spans recorded by the process's global tracer provider, under the
    /// instrumentation scope `jadpo`.
    pub fn global() -> Spans {
        Spans::to(opentelemetry::global::tracer("jadpo"))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&TraceContext>,
        build: impl FnOnce(Builder) -> Builder,
    ) -> Recording {
        if self.0.is_none() {
            return Recording(None);
        }
        self.start_under(name, kind, parent.and_then(remote), build)
    }

    fn start_under(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<SpanContext>,
        build: impl FnOnce(Builder) -> Builder,
    ) -> Recording {
        let Some(t) = &self.0 else {
            return Recording(None);
        };
        let cx = parent.map_or_else(Context::new, |sc| Context::new().with_remote_span_context(sc));
        let builder = build(t.tracer.span_builder(name).with_kind(kind));
        Recording(Some(t.tracer.build_with_context(builder, &cx)))
    }

    /// `name`, shared by every span that says it.
    fn name(&self, name: &str) -> Cow<'static, str> {
        match &self.0 {
            Some(t) => t.names.name(name),
            None => Cow::Owned(name.to_owned()),
        }
    }

    /// An emit of `event`, a producer span in the caller's trace (`parent`),
    /// or the first of a new one. The event keeps the emit span's context,
    /// so its attempts link to the emit; with spans off, the caller's.
    pub fn emit(&self, event: &str, parent: Option<&TraceContext>) -> (Recording, Option<TraceContext>) {
        let name = match &self.0 {
            Some(t) => t.send.get(event, || format!("send {event}")),
            None => Cow::Borrowed(""),
        };
        let span = self.start(name, SpanKind::Producer, parent, |b| {
            b.with_attributes([
                KeyValue::new("messaging.system", SYSTEM),
                KeyValue::new("messaging.operation.name", "send"),
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.destination.name", self.name(event)),
            ])
        });
        let kept = span.context().or_else(|| parent.cloned());
        (span, kept)
    }

    /// An attempt: a consumer span whose parent is its event's emit, and
    /// which links to it, as the messaging conventions advise for a
    /// message processed long after it was sent; every attempt of a
    /// delivery is a sibling, none the parent of the next.
    pub fn attempt(&self, a: &Attempt<'_>) -> Recording {
        let Some(t) = &self.0 else {
            return Recording(None);
        };
        let emit = a.event_trace.and_then(remote);
        let link = emit.clone().map(Link::with_context);
        let name = t.process.get(a.event, || format!("process {}", a.event));
        // What a sampler may decide by goes in at the start; the rest only
        // into a span that records, in the same vector, sized for all.
        let mut attributes = Vec::with_capacity(ATTEMPT_ATTRIBUTES);
        attributes.extend([
            KeyValue::new("messaging.system", SYSTEM),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", t.names.name(a.event)),
        ]);
        let mut span = self.start_under(name, SpanKind::Consumer, emit, |b| {
            b.with_attributes(attributes).with_links(link.into_iter().collect())
        });
        if !span.is_recording() {
            return span;
        }
        span.set("messaging.consumer.group.name", t.names.name(a.subscriber));
        span.set("messaging.message.id", a.event_id.to_owned());
        span.set("messaging.client.id", t.names.name(a.worker));
        span.set("jadpo.delivery.id", a.delivery);
        span.set("jadpo.attempt", i64::from(a.attempt));
        if a.held_for_ms > 0 {
            span.set("jadpo.delivery.held_for_ms", a.held_for_ms);
        }
        for connection in a.probe_for {
            span.event(
                "jadpo.probe",
                vec![KeyValue::new("jadpo.connection", t.names.name(connection))],
            );
        }
        if a.lease_expired {
            span.event("jadpo.lease_expired", Vec::new());
        }
        if a.released {
            span.event(
                "jadpo.released",
                vec![KeyValue::new("jadpo.delivery.held_for_ms", a.held_for_ms)],
            );
        }
        span
    }

    /// A delivery held just before its run, behind an open breaker: a
    /// short span of its own in its event's trace, since no attempt ran.
    pub fn hold(&self, event: &str, event_trace: Option<&TraceContext>, delivery: i64, connection: &str) -> Recording {
        self.start(format!("hold {event}"), SpanKind::Internal, event_trace, |b| {
            b.with_attributes([
                KeyValue::new("jadpo.delivery.id", delivery),
                KeyValue::new("jadpo.connection", self.name(connection)),
            ])
        })
    }

    /// One send of a call: an HTTP client span under its run, named by
    /// the method and the path as the app file writes it (its template:
    /// a filled path may carry personal data). `resend` counts the sends
    /// of the same call before this one.
    pub fn call(&self, run: Option<&TraceContext>, c: &Call<'_>) -> Recording {
        self.start(format!("{} {}", c.method, c.template), SpanKind::Client, run, |b| {
            let mut attributes = vec![
                KeyValue::new("http.request.method", self.name(c.method)),
                KeyValue::new("url.template", self.name(c.template)),
                KeyValue::new("jadpo.connection", self.name(c.connection)),
            ];
            if let Some(host) = c.host {
                attributes.push(KeyValue::new("server.address", self.name(host)));
            }
            if let Some(port) = c.port {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
            if c.resend > 0 {
                attributes.push(KeyValue::new("http.request.resend_count", i64::from(c.resend)));
            }
            b.with_attributes(attributes)
        })
    }

    /// One publish to a broker: a producer span in the run's trace, named
    /// by the OpenTelemetry messaging conventions (`publish TARGET`, the
    /// target as written, never as rendered).
    pub fn publish(&self, run: Option<&TraceContext>, p: &Publish<'_>) -> Recording {
        self.start(format!("publish {}", p.template), SpanKind::Producer, run, |b| {
            let mut attributes = vec![
                KeyValue::new("messaging.system", self.name(p.system)),
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.operation.name", "publish"),
                KeyValue::new("messaging.destination.template", self.name(p.template)),
                KeyValue::new("jadpo.connection", self.name(p.connection)),
            ];
            if p.resend > 0 {
                attributes.push(KeyValue::new("jadpo.resend_count", i64::from(p.resend)));
            }
            b.with_attributes(attributes)
        })
    }

    /// A schedule's run: the first span of a trace of its own.
    pub fn schedule(&self, name: &str) -> Recording {
        self.start(format!("schedule {name}"), SpanKind::Internal, None, |b| {
            b.with_attributes([KeyValue::new("jadpo.schedule", name.to_owned())])
        })
    }

    /// A route's request: a server span in the caller's trace.
    pub fn route(&self, method: &str, template: &str, caller: Option<&TraceContext>) -> Recording {
        self.start(format!("{method} {template}"), SpanKind::Server, caller, |b| {
            b.with_attributes([
                KeyValue::new("http.request.method", method.to_owned()),
                KeyValue::new("http.route", template.to_owned()),
            ])
        })
    }
}

type Builder = opentelemetry::trace::SpanBuilder;

/// What an attempt's span says of it. Never the payload.
pub struct Attempt<'a> {
    pub event: &'a str,
    pub event_id: &'a str,
    pub event_trace: Option<&'a TraceContext>,
    pub subscriber: &'a str,
    /// The worker that claimed it: its lease's owner.
    pub worker: &'a str,
    pub delivery: i64,
    pub attempt: u32,
    pub probe_for: &'a [String],
    /// The worker of its last attempt was lost: its lease ended.
    pub lease_expired: bool,
    /// Time held behind open breakers so far.
    pub held_for_ms: i64,
    /// Released from a hold since its last run.
    pub released: bool,
}

/// What a call's span says of it.
pub struct Call<'a> {
    pub connection: &'a str,
    pub method: &'a str,
    pub template: &'a str,
    pub host: Option<&'a str>,
    pub port: Option<u16>,
    pub resend: u32,
}

/// What a publish's span says of it.
pub struct Publish<'a> {
    pub connection: &'a str,
    /// `messaging.system`: `rabbitmq`, `nats`, `redis` or `mqtt`.
    pub system: &'a str,
    pub template: &'a str,
    pub resend: u32,
}

/// A span under way, or nothing when spans are off. It ends when dropped.
#[derive(Debug, Default)]
pub struct Recording(Option<BoxedSpan>);

impl Recording {
    /// The context a span under this one, or a call's `traceparent`,
    /// carries on.
    pub fn context(&self) -> Option<TraceContext> {
        self.0.as_ref().and_then(|s| carried(s.span_context()))
    }

    pub fn is_recording(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_recording())
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(s) = &mut self.0 {
            s.set_attribute(KeyValue::new(key, value));
        }
    }

    pub fn event(&mut self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(s) = &mut self.0 {
            s.add_event(name, attributes);
        }
    }

    /// Ends it as failed: `error.type` is the failure's code (never its
    /// fields), as the conventions ask, and the status an error.
    pub fn failed(&mut self, code: &str) {
        if let Some(s) = &mut self.0 {
            s.set_attribute(KeyValue::new("error.type", code.to_owned()));
            s.set_status(Status::error(code.to_owned()));
        }
    }
}

/// How an attempt ended, on its span: `jadpo.outcome` as the delivery's
/// record says it, and for a failure its code (`error.type`) and kind,
/// never its fields. A give-up is an event too, the moment an operator
/// looks for.
pub(crate) fn outcome(span: &mut Recording, outcome: &jadpo_core::Outcome) {
    use jadpo_core::Outcome;
    let (name, failure) = match outcome {
        Outcome::Succeeded => ("succeeded", None),
        Outcome::Retry { failure, .. } => ("retry", Some(failure)),
        Outcome::Failed(failure) => ("failed", Some(failure)),
        Outcome::Parked(failure) => ("parked", Some(failure)),
    };
    span.set("jadpo.outcome", name);
    if let Outcome::Retry { at, .. } = outcome {
        span.set("jadpo.retry_at", crate::log::rfc3339(*at));
    }
    if let Some(f) = failure {
        span.set("jadpo.failure.kind", f.kind.as_str());
        span.failed(&f.code);
        if matches!(outcome, Outcome::Failed(_) | Outcome::Parked(_)) {
            span.event(
                if name == "failed" {
                    "jadpo.gave_up"
                } else {
                    "jadpo.parked"
                },
                vec![KeyValue::new("jadpo.failure.code", f.code.clone())],
            );
        }
    }
}

/// The context of `cx`'s span, as an event keeps it: `None` when it has
/// no valid span.
pub fn trace_of(cx: &Context) -> Option<TraceContext> {
    carried(cx.span().span_context())
}

/// The OpenTelemetry form of a kept context: remote, as it came from
/// another process (or this one, through the store).
fn remote(t: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(t.trace_id()).ok()?;
    let span_id = SpanId::from_hex(t.parent_id()).ok()?;
    let flags = if t.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = t
        .tracestate()
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// The context a span passes on, as the core keeps it.
fn carried(sc: &SpanContext) -> Option<TraceContext> {
    if !sc.is_valid() {
        return None;
    }
    let state = sc.trace_state().header();
    TraceContext::from_ids(
        u128::from_be_bytes(sc.trace_id().to_bytes()),
        u64::from_be_bytes(sc.span_id().to_bytes()),
        sc.trace_flags().to_u8(),
        Some(state.as_str()).filter(|s| !s.is_empty()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_context_survives_the_round_trip_through_opentelemetry() {
        let t = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap();
        assert_eq!(carried(&remote(&t).unwrap()), Some(t.clone()));
        let unsampled = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None).unwrap();
        let back = carried(&remote(&unsampled).unwrap()).unwrap();
        assert!(!back.sampled());
        assert_eq!(back, unsampled);
    }

    #[test]
    fn with_spans_off_an_emit_keeps_its_callers_context_and_records_nothing() {
        let t = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
        let (span, kept) = Spans::off().emit("order.paid", Some(&t));
        assert!(span.0.is_none());
        assert_eq!(kept, Some(t));
        assert_eq!(Spans::off().emit("order.paid", None).1, None);
    }
}
