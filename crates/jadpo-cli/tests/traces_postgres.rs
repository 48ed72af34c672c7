//! One delivery's trace across real processes: an event emitted over HTTP
//! in a caller's trace, answered 503, 503 and 200, each attempt run by
//! another `jadpo serve` on one PostgreSQL schema, every process exporting
//! to a real OTLP/HTTP collector. And a collector that never answers:
//! deliveries go on, and the spans dropped are counted. Fails, rather than
//! skips, under `CI=true` when PostgreSQL is unreachable.

#[path = "support/otlp.rs"]
mod otlp;
#[path = "support/serve.rs"]
mod serve;

use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::Store;
use otlp::{attr, hex, Collector};
use serve::{Serve, TOKEN};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string  amount: int }
connection pay { base_url: "PAY_URL"  retry: { attempts: 1 } }
action charge(id: string) { call pay.post("/charges/{id}", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;

const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

/// POST /events/Paid with a `traceparent`; the delivery's id.
fn emit_in_trace(port: u16, body: &str) -> i64 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(jadpo_testing::wait::CEILING)).unwrap();
    write!(
        s,
        "POST /events/Paid HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {TOKEN}\r\ntraceparent: {CALLER}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, json) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 202"), "{out}");
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["delivery_ids"][0].as_i64().unwrap()
}

fn wait(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < jadpo_testing::wait::CEILING,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_trace_from_the_emit_through_attempts_in_three_processes_to_the_provider() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let collector = rt.block_on(Collector::start());
    let pay = rt.block_on(TestProvider::start());
    pay.script([Behaviour::Down, Behaviour::Down, Behaviour::Up]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = serve::url(&schema);
    let store = rt.block_on(schema.store(Default::default()));
    let client = rt.block_on(schema.client());
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
        ("OTEL_SERVICE_NAME", "payments-worker"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let attempts = |n: usize| {
        let store = &store;
        let rt = &rt;
        move |id: i64| rt.block_on(store.attempts(jadpo_core::DeliveryId(id))).unwrap().len() >= n
    };

    let mut id = 0;
    for n in 1..=3 {
        let process = Serve::start_env(dir.path(), &url, &[], &env);
        if n == 1 {
            id = emit_in_trace(process.port, r#"{"id":"pay_SECRET9","amount":987654}"#);
        }
        wait("the attempt written", || attempts(n)(id));
        let (status, log) = process.terminate();
        assert!(status.success(), "{log}");
        // The backoff runs on the system clock here: the next process
        // finds the retry due at once rather than in up to a minute.
        rt.block_on(client.execute(
            "UPDATE jadpo_deliveries SET due_at = 0 WHERE id = $1 AND state = 'due'",
            &[&id],
        ))
        .unwrap();
    }
    let delivery = rt
        .block_on(store.delivery(jadpo_core::DeliveryId(id)))
        .unwrap()
        .unwrap();
    assert_eq!(delivery.state, jadpo_core::DeliveryState::Succeeded);

    // Each process flushed its spans as it stopped.
    let spans = collector.spans();
    for s in &spans {
        assert_eq!(hex(&s.trace_id), TRACE_ID, "{} is in the caller's trace", s.name);
        for kv in &s.attributes {
            let v = format!("{:?}", kv.value);
            assert!(
                !v.contains("SECRET9") && !v.contains("987654"),
                "{}: {} carries the payload",
                s.name,
                kv.key
            );
        }
    }
    let emits: Vec<_> = spans.iter().filter(|s| s.kind == otlp::PRODUCER).collect();
    assert_eq!(emits.len(), 1, "{spans:#?}");
    let emit = emits[0];
    assert_eq!(emit.name, "send Paid");
    assert_eq!(
        hex(&emit.parent_span_id),
        &CALLER[36..52],
        "the emit is in the caller's span"
    );

    let mut runs: Vec<_> = spans.iter().filter(|s| s.kind == otlp::CONSUMER).collect();
    runs.sort_by_key(|s| attr(&s.attributes, "jadpo.attempt"));
    let numbers: Vec<_> = runs
        .iter()
        .filter_map(|s| attr(&s.attributes, "jadpo.attempt"))
        .collect();
    assert_eq!(numbers, ["1", "2", "3"]);
    let workers: std::collections::BTreeSet<_> = runs
        .iter()
        .filter_map(|s| attr(&s.attributes, "messaging.client.id"))
        .collect();
    assert_eq!(workers.len(), 3, "each attempt by another process: {workers:?}");
    for run in &runs {
        assert_eq!(run.parent_span_id, emit.span_id, "each attempt under the emit");
        assert_eq!(run.links.len(), 1);
        assert_eq!(run.links[0].span_id, emit.span_id, "and linked to it");
        assert_eq!(attr(&run.attributes, "jadpo.delivery.id"), Some(id.to_string()));
    }
    let outcomes: Vec<_> = runs
        .iter()
        .filter_map(|s| attr(&s.attributes, "jadpo.outcome"))
        .collect();
    assert_eq!(outcomes, ["retry", "retry", "succeeded"]);

    let calls: Vec<_> = spans.iter().filter(|s| s.kind == otlp::CLIENT).collect();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    let sent = pay.requests();
    assert_eq!(sent.len(), 3);
    for request in &sent {
        let seen = request.header("traceparent").expect("every call carries the trace");
        assert_eq!(&seen[3..35], TRACE_ID);
        let call = calls
            .iter()
            .find(|c| hex(&c.span_id) == seen[36..52])
            .unwrap_or_else(|| panic!("{seen}: the provider's parent is a call span"));
        assert_eq!(call.name, "POST /charges/{id}");
        assert!(
            runs.iter().any(|r| r.span_id == call.parent_span_id),
            "each call under an attempt"
        );
    }
}

/// A collector that takes the connection and never answers: every
/// delivery still ends, and the spans that could not wait are counted.
#[test]
fn a_dead_collector_costs_deliveries_nothing_and_its_drops_are_counted() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", dead.local_addr().unwrap());
    let pay = rt.block_on(TestProvider::start());
    pay.set(Behaviour::Up);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = serve::url(&schema);
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "600000"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "600000"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
        ("OTEL_BSP_SCHEDULE_DELAY", "10"),
    ];
    let process = Serve::start_env(dir.path(), &url, &["--workers", "8"], &env);
    const EVENTS: usize = 200;
    for i in 0..EVENTS {
        let body = format!(r#"{{"id":"p{i}","amount":{i}}}"#);
        assert_eq!(process.http("POST", "/events/Paid", Some(&body)).0, 202);
    }
    let store = rt.block_on(schema.store(Default::default()));
    wait("every delivery to succeed", || {
        let counts = rt.block_on(store.counts_up_to(10_000)).unwrap();
        counts.get(&jadpo_core::DeliveryState::Succeeded).copied() == Some(EVENTS as u64)
    });
    let (_, metrics) = process.http("GET", "/metrics", None);
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("jadpo_trace_spans_dropped_total "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    // Each delivery makes an emit, an attempt and a call span: with the
    // first export hanging, all but the queue and one batch are dropped.
    assert!(dropped >= (3 * EVENTS - 8 - 4) as u64, "dropped {dropped}:\n{metrics}");
    let (status, log) = process.terminate();
    assert!(status.success(), "{log}");
    drop(dead);
}
