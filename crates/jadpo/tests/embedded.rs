//! The embedded API end to end on a real SQLite file: emit in your own
//! transaction (commit and rollback), Rust actions, start-up checks.

mod common;
use common::{builder, store, APP};

#[allow(deprecated)]
use jadpo::store::sqlite::{emit_in, SqliteStore};
use jadpo::store::{DeliveryFilter, Store, StoreError};
use jadpo::StartError;
use jadpo_core::{DeliveryState, Failure, FailureKind};
use std::sync::Arc;
use std::time::Duration;

fn score() -> jadpo::runtime::interpreter::RustAction {
    Arc::new(|args, _c| {
        Box::pin(async move {
            if args.args["total_cents"].as_i64() > Some(100) {
                Err(Failure::new("fraud.too_large", FailureKind::Rejected))
            } else {
                Ok(())
            }
        })
    })
}

/// The four steps `Jadpo::emit_in` replaced (prepare, the store's own
/// transaction, the store's `emit_in`, `wake`), kept working while they are
/// deprecated.
#[tokio::test]
#[allow(deprecated)]
async fn an_event_exists_if_and_only_if_your_transaction_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let jadpo = builder().action("score", score()).build(store.clone()).await.unwrap();
    let now = jadpo.clock().now();
    let committed = jadpo
        .prepare("OrderPlaced", &serde_json::json!({"order_id": "a", "total_cents": 50}))
        .unwrap();
    let rolled_back = jadpo
        .prepare("OrderPlaced", &serde_json::json!({"order_id": "b", "total_cents": 500}))
        .unwrap();
    store
        .transaction(move |tx| -> Result<(), StoreError> {
            tx.execute_batch("CREATE TABLE orders (id TEXT PRIMARY KEY)")
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            tx.execute("INSERT INTO orders VALUES ('a')", [])
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            emit_in(tx, &[committed], now)?;
            Ok(())
        })
        .await
        .unwrap();
    let failed: Result<(), StoreError> = store
        .transaction(move |tx| {
            tx.execute("INSERT INTO orders VALUES ('b')", [])
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            emit_in(tx, &[rolled_back], now)?;
            Err(StoreError::Unavailable("the caller's own write failed".into()))
        })
        .await;
    assert!(failed.is_err());
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.len(), 1, "the rolled-back event has no delivery");

    let running = jadpo.start();
    jadpo.wake();
    for _ in 0..300 {
        if store.list(&DeliveryFilter::default()).await.unwrap()[0]
            .state
            .is_finished()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await;
    assert_eq!(
        store.list(&DeliveryFilter::default()).await.unwrap()[0].state,
        DeliveryState::Succeeded
    );
}

#[tokio::test]
async fn a_rust_actions_declared_failure_fails_the_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let jadpo = scoring(&dir).await;
    let id = jadpo
        .emit(
            "OrderPlaced",
            &serde_json::json!({"order_id": "c", "total_cents": 5000}),
        )
        .await
        .unwrap()
        .deliveries[0];
    let running = jadpo.start();
    for _ in 0..300 {
        if jadpo.store().delivery(id).await.unwrap().unwrap().state.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await;
    let d = jadpo.store().delivery(id).await.unwrap().unwrap();
    assert_eq!(d.state, DeliveryState::Failed);
    assert_eq!(d.last_failure.unwrap().code, "fraud.too_large");
}

#[tokio::test]
async fn start_up_refuses_what_would_fail_later() {
    let dir = tempfile::tempdir().unwrap();
    // A `uses` action nobody supplies.
    let err = builder().build(store(&dir).await).await.err().unwrap();
    assert_eq!(err.code(), "action.unregistered");
    assert!(err.to_string().contains("score"), "{err}");
    // A missing environment variable, named.
    let err = jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .env(|_| None)
        .action("score", score());
    let err = err.build(store(&dir).await).await.err().unwrap();
    assert_eq!(err.code(), "connection.env_missing");
    assert!(err.to_string().contains("FULFILMENT_URL"), "{err}");
    // An invalid app file, with its diagnostics.
    let err = jadpo::builder().app_source("app.jadpo", "event {").err().unwrap();
    assert!(matches!(err, StartError::Invalid { .. }));
    // A payload that does not match its event.
    let jadpo = scoring(&dir).await;
    let err = jadpo
        .emit("OrderPlaced", &serde_json::json!({"order_id": 7, "total_cents": 1}))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), "event.invalid", "{err}");
    assert!(err.to_string().contains("order_id"), "{err}");
}

/// A fake of a capability's filler answers the filler's calls, as for any
/// connection: it needs no environment and never moves the breaker, even
/// when it answers 503 every time.
#[tokio::test]
async fn a_fake_of_a_capabilitys_filler_answers_its_calls_and_touches_no_breaker() {
    use jadpo::runtime::connection::{Answer, Fake};
    const CAPS: &str = r#"
event PaymentReceived { email: string }
capability send_receipt(email: string)
connection postmark {
    base_url: env("POSTMARK_URL")
    fills send_receipt { call postmark.post("/email", body: { "To": email }) }
}
subscriber receipts { on: PaymentReceived  run: send_receipt(event.email) }
"#;
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(Answer::status(503));
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", CAPS)
        .unwrap()
        .double("postmark", fake.clone())
        .build(store(&dir).await)
        .await
        .unwrap();
    let running = jadpo.start();
    for i in 0..8 {
        jadpo
            .emit("PaymentReceived", &serde_json::json!({"email": format!("p{i}@x")}))
            .await
            .unwrap();
    }
    for _ in 0..500 {
        if fake.received().len() >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.stop().await;
    let received = fake.received();
    assert!(received.len() >= 8, "{} calls", received.len());
    assert!(received.iter().all(|r| r.path == "/email"));
    assert!(received
        .iter()
        .any(|r| r.body == Some(serde_json::json!({"To": "p0@x"}))));
    let breakers = jadpo.store().breakers().await.unwrap();
    assert!(
        breakers
            .iter()
            .all(|b| b.breaker.is_closed() && b.breaker.consecutive_unavailable == 0),
        "{breakers:?}"
    );
    let held = jadpo
        .store()
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Held),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(held.is_empty(), "eight 503s from a fake hold nothing");
}

/// The embedded API runs on its store's clock: `time_scale` keeps a scaled
/// clock in the store at the first start; a later build without a clock
/// follows it; another scale, or `real_time`, is refused with its code,
/// before anything runs.
#[tokio::test]
async fn a_time_scale_is_kept_by_the_store_and_followed_by_later_starts() {
    let dir = tempfile::tempdir().unwrap();
    let plain = scoring(&dir).await;
    assert_eq!(plain.clock().anchor(), None, "a new store runs on real time");
    let scaled = builder()
        .action("score", score())
        .time_scale(600)
        .build(store(&dir).await)
        .await
        .unwrap();
    let anchor = scaled.clock().anchor().expect("scaled");
    assert_eq!(anchor.scale, 600);
    let later = scoring(&dir).await;
    assert_eq!(later.clock().anchor(), Some(anchor), "follows the store's clock");
    for b in [builder().time_scale(60), builder().real_time()] {
        let e = b.action("score", score()).build(store(&dir).await).await.err().unwrap();
        assert!(matches!(e, StartError::Clock(_)), "{e}");
        assert!(e.to_string().contains("600x"), "{e}");
    }
    let e = builder()
        .time_scale(60)
        .action("score", score())
        .build(store(&dir).await)
        .await
        .err()
        .unwrap();
    assert_eq!(e.code(), "clock.scale_mismatch");
    let e = builder()
        .real_time()
        .action("score", score())
        .build(store(&dir).await)
        .await
        .err()
        .unwrap();
    assert_eq!(e.code(), "clock.store_scaled");
}

#[tokio::test]
async fn emit_idempotent_takes_the_keys_the_cli_and_http_take() {
    let dir = tempfile::tempdir().unwrap();
    let jadpo = scoring(&dir).await;
    let order = serde_json::json!({"order_id": "k", "total_cents": 5});
    for key in ["c d", "order-1001", "!~"] {
        assert!(
            jadpo.emit_idempotent("OrderPlaced", &order, key).await.is_ok(),
            "{key:?}"
        );
    }
    for key in ["é", "c\td", "", &"k".repeat(256)] {
        match jadpo.emit_idempotent("OrderPlaced", &order, key).await {
            Err(jadpo::EmitError::Event(e)) => assert_eq!(e.code(), "event.idempotency_key_invalid"),
            other => panic!("{key:?}: {other:?}"),
        }
    }
}

/// An event emitted in a trace keeps it, and what its deliveries' actions
/// emit joins that trace too.
#[tokio::test]
async fn emit_with_a_trace_and_a_runs_emits_join_it() {
    let dir = tempfile::tempdir().unwrap();
    let app = r#"
event OrderPlaced { order_id: string }
event Noted { order_id: string }
action note(order_id: string) { emit Noted(order_id: order_id) }
subscriber noter { on: OrderPlaced  run: note(event.order_id) }
"#;
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", app)
        .unwrap()
        .build(store(&dir).await)
        .await
        .unwrap();
    let trace =
        jadpo::core::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
    let emitted = jadpo
        .emit_with(
            "OrderPlaced",
            &serde_json::json!({"order_id": "t"}),
            &jadpo::EmitOptions::default().trace(trace.clone()),
        )
        .await
        .unwrap();
    let event = jadpo.store().event(emitted.event_id).await.unwrap().unwrap();
    assert_eq!(event.trace.as_ref(), Some(&trace));
    let running = jadpo.start();
    let ran = emitted.deliveries[0];
    for _ in 0..300 {
        if jadpo.store().delivery(ran).await.unwrap().unwrap().state.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await;
    assert_eq!(
        jadpo.store().delivery(ran).await.unwrap().unwrap().state,
        DeliveryState::Succeeded
    );
    // `Noted` has no subscriber: its event is the next one made.
    let next = jadpo::core::EventId(emitted.event_id.0 + 1);
    let noted = jadpo.store().event(next).await.unwrap().expect("the action emitted");
    assert_eq!(noted.name, "Noted");
    assert_eq!(noted.trace, Some(trace));
}

/// With no trace given, an emit joins the caller's: the current `tracing`
/// span's OpenTelemetry context through tracing-opentelemetry's layer.
/// Outside any span, none.
#[tokio::test]
async fn an_emit_joins_the_current_tracing_spans_trace() {
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let dir = tempfile::tempdir().unwrap();
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", "event OrderPlaced { order_id: string }")
        .unwrap()
        .build(store(&dir).await)
        .await
        .unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
    let _default = tracing::subscriber::set_default(subscriber);
    let payload = serde_json::json!({"order_id": "o1"});

    let outside = jadpo.emit("OrderPlaced", &payload).await.unwrap();
    let event = jadpo.store().event(outside.event_id).await.unwrap().unwrap();
    assert_eq!(event.trace, None, "no span, no trace");

    let span = tracing::info_span!("checkout");
    let (emitted, caller) = {
        let _entered = span.enter();
        let caller = tracing::Span::current().context().span().span_context().clone();
        (jadpo.emit("OrderPlaced", &payload).await.unwrap(), caller)
    };
    let event = jadpo.store().event(emitted.event_id).await.unwrap().unwrap();
    let kept = event.trace.expect("the span's trace");
    assert_eq!(kept.trace_id(), format!("{:032x}", caller.trace_id()));
    assert_eq!(kept.parent_id(), format!("{:016x}", caller.span_id()));
}

/// Every error the embedded API returns gives its stable code (the one
/// its message shows), and the error it wraps as its source.
#[tokio::test]
async fn errors_give_their_codes_and_what_they_wrap() {
    use std::error::Error;
    let dir = tempfile::tempdir().unwrap();
    let jadpo = scoring(&dir).await;
    let order = serde_json::json!({"order_id": "o-1", "total_cents": 5});
    let cases = [
        (jadpo.emit("Nope", &order).await.unwrap_err(), "event.unknown"),
        (
            jadpo
                .emit("OrderPlaced", &serde_json::json!({"order_id": 5, "total_cents": 5}))
                .await
                .unwrap_err(),
            "event.invalid",
        ),
    ];
    assert_eq!(cases[1].0.field(), Some("order_id"), "event.invalid names the field");
    assert_eq!(cases[0].0.field(), None);
    for (e, code) in &cases {
        assert_eq!(e.code(), *code, "{e}");
        assert!(
            !e.to_string().contains(code),
            "the code is code()'s, not the text's: {e}"
        );
        assert!(e.source().is_some(), "{e}");
    }
    jadpo.emit_idempotent("OrderPlaced", &order, "k-1").await.unwrap();
    let other = serde_json::json!({"order_id": "o-2", "total_cents": 5});
    let e = jadpo.emit_idempotent("OrderPlaced", &other, "k-1").await.unwrap_err();
    assert_eq!(e.code(), "event.idempotency_conflict", "{e}");
    assert!(!e.to_string().contains("event.idempotency_conflict"), "{e}");
    assert!(e.source().is_some_and(|s| s.is::<jadpo::store::StoreError>()), "{e}");

    let e = jadpo.skip(&[jadpo::core::DeliveryId(1)], "").await.unwrap_err();
    assert_eq!(e.code(), "skip.by_invalid", "{e}");
    assert!(!e.to_string().contains("skip.by_invalid"), "{e}");

    let e = jadpo
        .run_route("nope", Default::default(), serde_json::Value::Null)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "route.unknown", "{e}");
    assert!(!e.to_string().contains("route.unknown"), "{e}");
    assert!(e.source().is_none());

    let other = tempfile::tempdir().unwrap();
    let e = builder().build(store(&other).await).await.err().unwrap();
    assert_eq!(e.code(), "action.unregistered", "{e}");
    assert!(!e.to_string().contains("action.unregistered"), "{e}");
}

/// The app above on a fresh store in `dir`, `score` supplied, not started.
async fn scoring(dir: &tempfile::TempDir) -> jadpo::Jadpo<SqliteStore> {
    builder()
        .action("score", score())
        .build(store(dir).await)
        .await
        .unwrap()
}
