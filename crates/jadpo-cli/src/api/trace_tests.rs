//! `POST /events/NAME` takes the caller's W3C trace context, over real HTTP.

use super::tests::Server;
use jadpo_core::EventId;
use jadpo_store::Store;
use reqwest::StatusCode;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const BODY: &str = r#"{"payment_id": "p1", "amount_cents": 100}"#;

async fn trace_of_emitted(s: &Server, headers: &[(&str, &str)]) -> Option<jadpo_core::TraceContext> {
    let (status, body) = s.post_with("/events/PaymentReceived", BODY, headers).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = EventId(body["event_id"].as_i64().unwrap());
    s.store.event(id).await.unwrap().unwrap().trace
}

#[tokio::test]
async fn an_event_keeps_the_callers_traceparent_and_tracestate() {
    let s = Server::start(None).await;
    let trace = trace_of_emitted(
        &s,
        &[
            ("traceparent", TRACEPARENT),
            ("tracestate", "rojo=1"),
            ("tracestate", "congo=2"),
        ],
    )
    .await
    .expect("kept");
    assert_eq!(trace.traceparent(), TRACEPARENT);
    assert_eq!(trace.tracestate(), Some("rojo=1,congo=2"), "both headers, joined");
    assert_eq!(trace_of_emitted(&s, &[]).await, None, "none sent, none kept");
}

/// A receiver ignores a trace context it cannot read: the event is taken,
/// in no trace. A bad `tracestate` alone costs only itself.
#[tokio::test]
async fn a_malformed_traceparent_is_ignored_and_the_event_taken() {
    let s = Server::start(None).await;
    let upper = TRACEPARENT.to_uppercase();
    for bad in [
        "nonsense",
        upper.as_str(),
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    ] {
        assert_eq!(trace_of_emitted(&s, &[("traceparent", bad)]).await, None, "{bad}");
    }
    let twice = trace_of_emitted(&s, &[("traceparent", TRACEPARENT), ("traceparent", TRACEPARENT)]).await;
    assert_eq!(twice, None, "two traceparents are no trace");
    let kept = trace_of_emitted(&s, &[("traceparent", TRACEPARENT), ("tracestate", "not a list")])
        .await
        .expect("the trace is kept");
    assert_eq!(kept.tracestate(), None);
}
