//! The embedded API end to end on a real SQLite file: emit in your own
//! transaction (commit and rollback), Rust actions, start-up checks.

use jadpo::store::sqlite::{emit_in, SqliteStore};
use jadpo::store::{DeliveryFilter, Store, StoreError};
use jadpo::StartError;
use jadpo_core::{DeliveryState, Failure, FailureKind};
use std::sync::Arc;
use std::time::Duration;

const APP: &str = r#"
event OrderPlaced { order_id: string  total_cents: int }
connection fulfilment { base_url: env("FULFILMENT_URL") }
action score(order_id: string, total_cents: int) uses fulfilment
subscriber fraud_check { on: OrderPlaced  run: score(event.order_id, event.total_cents) }
"#;

async fn store(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display()))
        .await
        .unwrap()
}

fn builder() -> jadpo::Builder {
    jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .env(|k| (k == "FULFILMENT_URL").then(|| "http://127.0.0.1:9".to_string()))
}

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

#[tokio::test]
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
    let jadpo = builder()
        .action("score", score())
        .build(store(&dir).await)
        .await
        .unwrap();
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
    let jadpo = builder()
        .action("score", score())
        .build(store(&dir).await)
        .await
        .unwrap();
    let err = jadpo
        .emit("OrderPlaced", &serde_json::json!({"order_id": 7, "total_cents": 1}))
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("event.invalid"), "{err}");
}
