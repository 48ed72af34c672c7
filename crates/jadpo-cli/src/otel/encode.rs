//! A batch of ended spans as the bytes of an OTLP
//! `ExportTraceServiceRequest` (opentelemetry-proto's `trace.proto`),
//! written in one pass.
//!
//! Why not the exporter's own encoding: it first copies every span into
//! owned protobuf structs (a `String` per attribute key and value) and
//! then walks them twice, once to size each nested message and once to
//! write it. With every delivery sampled that was about a seventh of the
//! process's CPU (docs/performance.md, "what tracing costs"). Here each
//! value is written straight from the span, and a nested message's length
//! is put in front of it once its body is written: its one byte, shifted
//! to the varint's size in the rare message over 127 bytes. The test
//! decodes what this writes and compares it with the official conversion.

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;
use std::time::{SystemTime, UNIX_EPOCH};

/// The request's bytes: one resource, the spans grouped by the scope that
/// made them (in the order each scope first appears).
pub(super) fn request(resource: &Resource, spans: &[SpanData]) -> Vec<u8> {
    let mut out = Writer(Vec::with_capacity(spans.len() * 320 + 256));
    // ExportTraceServiceRequest.resource_spans = 1
    out.message(1, |w| {
        // ResourceSpans.resource = 1
        w.message(1, |w| {
            for (key, value) in resource.iter() {
                w.key_value(1, key.as_str(), value);
            }
        });
        let mut scopes: Vec<&opentelemetry::InstrumentationScope> = Vec::new();
        for span in spans {
            if !scopes.contains(&&span.instrumentation_scope) {
                scopes.push(&span.instrumentation_scope);
            }
        }
        for scope in scopes {
            // ResourceSpans.scope_spans = 2
            w.message(2, |w| {
                // ScopeSpans.scope = 1
                w.message(1, |w| {
                    w.string(1, scope.name());
                    w.string(2, scope.version().unwrap_or_default());
                    for kv in scope.attributes() {
                        w.key_value(3, kv.key.as_str(), &kv.value);
                    }
                });
                for span in spans.iter().filter(|s| &s.instrumentation_scope == scope) {
                    // ScopeSpans.spans = 2
                    w.message(2, |w| w.span(span));
                }
                w.string(3, scope.schema_url().unwrap_or_default());
            });
        }
        w.string(3, resource.schema_url().unwrap_or_default());
    });
    out.0
}

/// Protobuf's wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `flags` of a span or a link: the W3C trace flags, and whether the
/// parent (or the linked span) is remote, which OTLP says it knows.
fn flags(trace_flags: u8, remote: bool) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    u32::from(trace_flags) | HAS_IS_REMOTE | if remote { IS_REMOTE } else { 0 }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn kind(k: &SpanKind) -> u64 {
    match k {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn tag(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field << 3 | u32::from(wire)));
    }

    /// A nested message, always present (proto3 writes a set message even
    /// when empty): its body, then its length put in front of it.
    fn message(&mut self, field: u32, body: impl FnOnce(&mut Writer)) {
        self.tag(field, LEN);
        let at = self.0.len();
        self.0.push(0);
        body(self);
        let len = self.0.len() - at - 1;
        if len < 0x80 {
            self.0[at] = len as u8;
        } else {
            let mut prefix = Writer(Vec::with_capacity(10));
            prefix.varint(len as u64);
            self.0.splice(at..at + 1, prefix.0);
        }
    }

    /// Bytes and strings: left out when empty, as proto3 does.
    fn bytes(&mut self, field: u32, b: &[u8]) {
        if !b.is_empty() {
            self.tag(field, LEN);
            self.varint(b.len() as u64);
            self.0.extend_from_slice(b);
        }
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.tag(field, VARINT);
            self.varint(v);
        }
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.tag(field, FIXED64);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn fixed32(&mut self, field: u32, v: u32) {
        if v != 0 {
            self.tag(field, FIXED32);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// A `KeyValue` (key = 1, value = 2) as field `field`.
    fn key_value(&mut self, field: u32, key: &str, value: &Value) {
        self.message(field, |w| {
            w.string(1, key);
            w.message(2, |w| w.any_value(value));
        });
    }

    fn attributes(&mut self, field: u32, kvs: &[KeyValue]) {
        for kv in kvs {
            self.key_value(field, kv.key.as_str(), &kv.value);
        }
    }

    /// An `AnyValue`'s body: a oneof, so written even when it is the
    /// default (`false`, 0, "").
    fn any_value(&mut self, value: &Value) {
        match value {
            Value::String(s) => self.oneof_bytes(1, s.as_str().as_bytes()),
            Value::Bool(b) => {
                self.tag(2, VARINT);
                self.varint(u64::from(*b));
            }
            Value::I64(i) => {
                self.tag(3, VARINT);
                self.varint(*i as u64);
            }
            Value::F64(f) => {
                self.tag(4, FIXED64);
                self.0.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            // ArrayValue.values = 1, each an AnyValue.
            Value::Array(array) => self.message(5, |w| match array {
                Array::Bool(v) => v.iter().for_each(|b| w.message(1, |w| w.any_value(&Value::Bool(*b)))),
                Array::I64(v) => v.iter().for_each(|i| w.message(1, |w| w.any_value(&Value::I64(*i)))),
                Array::F64(v) => v.iter().for_each(|f| w.message(1, |w| w.any_value(&Value::F64(*f)))),
                Array::String(v) => v
                    .iter()
                    .for_each(|s| w.message(1, |w| w.oneof_bytes(1, s.as_str().as_bytes()))),
                // A kind of array a later API adds: written as a string, as
                // the API itself prints it, rather than lost.
                other => w.message(1, |w| w.oneof_bytes(1, other.to_string().as_bytes())),
            }),
            other => self.oneof_bytes(1, other.to_string().as_bytes()),
        }
    }

    fn oneof_bytes(&mut self, field: u32, b: &[u8]) {
        self.tag(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn context(&mut self, cx: &SpanContext) {
        self.bytes(1, &cx.trace_id().to_bytes());
        self.bytes(2, &cx.span_id().to_bytes());
        self.string(3, &cx.trace_state().header());
    }

    /// A `Span`'s body, fields in the order `trace.proto` numbers them.
    fn span(&mut self, s: &SpanData) {
        self.context(&s.span_context);
        if s.parent_span_id != SpanId::INVALID {
            self.bytes(4, &s.parent_span_id.to_bytes());
        }
        self.string(5, &s.name);
        self.uint(6, kind(&s.span_kind));
        self.fixed64(7, nanos(s.start_time));
        self.fixed64(8, nanos(s.end_time));
        self.attributes(9, &s.attributes);
        self.uint(10, u64::from(s.dropped_attributes_count));
        for event in s.events.iter() {
            self.message(11, |w| {
                w.fixed64(1, nanos(event.timestamp));
                w.string(2, &event.name);
                w.attributes(3, &event.attributes);
                w.uint(4, u64::from(event.dropped_attributes_count));
            });
        }
        self.uint(12, u64::from(s.events.dropped_count));
        for link in s.links.iter() {
            self.message(13, |w| {
                w.context(&link.span_context);
                w.attributes(4, &link.attributes);
                w.uint(5, u64::from(link.dropped_attributes_count));
                w.fixed32(
                    6,
                    flags(link.span_context.trace_flags().to_u8(), link.span_context.is_remote()),
                );
            });
        }
        self.uint(14, u64::from(s.links.dropped_count));
        // Status: message = 2, code = 3 (unset 0, ok 1, error 2).
        self.message(15, |w| match &s.status {
            Status::Unset => {}
            Status::Ok => w.uint(3, 1),
            Status::Error { description } => {
                w.string(2, description);
                w.uint(3, 2);
            }
        });
        self.fixed32(16, flags(s.span_context.trace_flags().to_u8(), s.parent_span_is_remote));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Event, Link, SpanContext, TraceFlags, TraceId, TraceState};
    use opentelemetry::InstrumentationScope;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use proptest::prelude::*;
    use prost::Message as _;
    use std::borrow::Cow;
    use std::time::Duration;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::I64),
            any::<f64>()
                .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
                .prop_map(Value::F64),
            ".{0,150}".prop_map(Value::from),
            prop::collection::vec(any::<i64>(), 0..4).prop_map(|v| Value::Array(Array::I64(v))),
            prop::collection::vec("[a-z]{0,5}", 0..4)
                .prop_map(|v| Value::Array(Array::String(v.into_iter().map(Into::into).collect()))),
        ]
    }

    fn attributes() -> impl Strategy<Value = Vec<KeyValue>> {
        prop::collection::vec(("[a-z.]{0,20}", value()).prop_map(|(k, v)| KeyValue::new(k, v)), 0..6)
    }

    fn context() -> impl Strategy<Value = SpanContext> {
        (any::<u128>(), any::<u64>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(t, s, sampled, remote, state)| {
                let state = if state {
                    TraceState::from_key_value([("vendor", "v1")]).unwrap()
                } else {
                    TraceState::default()
                };
                let flags = if sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                };
                SpanContext::new(TraceId::from(t), SpanId::from(s), flags, remote, state)
            },
        )
    }

    fn span() -> impl Strategy<Value = SpanData> {
        let scope = prop_oneof![
            Just(InstrumentationScope::builder("jadpo").build()),
            Just(
                InstrumentationScope::builder("other")
                    .with_version("1.2")
                    .with_schema_url("https://opentelemetry.io/schemas/1.45.0")
                    .with_attributes([KeyValue::new("a", 1)])
                    .build()
            ),
        ];
        let status = prop_oneof![
            Just(Status::Unset),
            Just(Status::Ok),
            ".{0,200}".prop_map(Status::error),
        ];
        let kind = prop_oneof![
            Just(SpanKind::Internal),
            Just(SpanKind::Server),
            Just(SpanKind::Client),
            Just(SpanKind::Producer),
            Just(SpanKind::Consumer),
        ];
        (
            (
                context(),
                any::<u64>(),
                any::<bool>(),
                kind,
                ".{0,40}",
                any::<u32>(),
                any::<u32>(),
            ),
            (attributes(), 0u32..3, status, scope),
            prop::collection::vec(("[a-z._]{0,12}", attributes(), any::<u32>()), 0..3),
            prop::collection::vec((context(), attributes()), 0..3),
        )
            .prop_map(
                |((cx, parent, remote, kind, name, start, took), (attrs, dropped, status, scope), events, links)| {
                    let start_time =
                        UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(start.into());
                    let mut ev = SpanEvents::default();
                    for (name, attrs, at) in events {
                        ev.events
                            .push(Event::new(name, start_time + Duration::from_nanos(at.into()), attrs, 0));
                    }
                    let mut ln = SpanLinks::default();
                    for (cx, attrs) in links {
                        ln.links.push(Link::new(cx, attrs, 1));
                    }
                    ln.dropped_count = dropped;
                    SpanData {
                        span_context: cx,
                        parent_span_id: SpanId::from(parent),
                        parent_span_is_remote: remote,
                        span_kind: kind,
                        name: Cow::Owned(name),
                        start_time,
                        end_time: start_time + Duration::from_nanos(took.into()),
                        attributes: attrs,
                        dropped_attributes_count: dropped,
                        events: ev,
                        links: ln,
                        status,
                        instrumentation_scope: scope,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// What we write decodes to exactly what the official conversion
        /// makes of the same spans.
        #[test]
        fn the_request_is_what_the_official_conversion_makes(spans in prop::collection::vec(span(), 0..12)) {
            let resource = Resource::builder()
                .with_service_name("payments-worker")
                .with_attribute(KeyValue::new("deployment.environment.name", "prod"))
                .build();
            let ours = ExportTraceServiceRequest::decode(request(&resource, &spans).as_slice()).unwrap();
            let official = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(spans, &ResourceAttributesWithSchema::from(&resource)),
            };
            prop_assert_eq!(ours, official);
        }
    }

    #[test]
    fn a_length_over_127_bytes_is_a_longer_varint_before_its_message() {
        let mut w = Writer(Vec::new());
        w.message(2, |w| w.string(1, &"x".repeat(300)));
        // tag 2/LEN, length 303 as a two-byte varint, then the body.
        assert_eq!(&w.0[..3], &[0x12, 0xaf, 0x02]);
        assert_eq!(w.0.len(), 3 + 303);
    }
}
