//! A real OTLP/HTTP collector for the tracing tests: it decodes each
//! `POST /v1/traces` with the official protobuf definitions and keeps the
//! spans, each with the `service.name` of the resource that sent it.

#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::sync::{Arc, Mutex};

pub(crate) const PRODUCER: i32 = 4;
pub(crate) const CONSUMER: i32 = 5;
pub(crate) const CLIENT: i32 = 3;

#[derive(Clone, Default)]
pub(crate) struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    pub url: String,
}

impl Collector {
    /// Listens on a free port of 127.0.0.1, on the current runtime.
    pub(crate) async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let collector = Collector {
            url,
            ..Default::default()
        };
        let kept = collector.spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
                    let mut spans = kept.lock().unwrap();
                    for scope in request.resource_spans.into_iter().flat_map(|r| r.scope_spans) {
                        spans.extend(scope.spans);
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        collector
    }

    pub(crate) fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

/// An attribute's value as text.
pub(crate) fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    let kv = attributes.iter().find(|kv| kv.key == key)?;
    Some(match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(n) => n.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
