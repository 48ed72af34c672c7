//! Jadpo inside your own program, end to end against SQLite:
//!
//! - the app declares the events, a connection and the subscribers;
//! - one action's body is Rust code, registered by name;
//! - an order and its event are written in ONE transaction of your own
//!   (the transactional outbox): the event exists if and only if the order
//!   does;
//! - the workers and the tick run in your tokio runtime until every
//!   delivery is done.
//!
//! Run it: `cargo run -p jadpo --example embedded`

use jadpo::runtime::provider::{Behaviour, TestProvider};
use jadpo::store::sqlite::{emit_in, SqliteStore};
use jadpo::store::{DeliveryFilter, Store};
use jadpo_core::{DeliveryState, Failure, FailureKind};
use std::sync::Arc;
use std::time::Duration;

const APP: &str = r#"
event OrderPlaced { order_id: string  total_cents: int }

connection fulfilment { base_url: env("FULFILMENT_URL")  timeout: 5s }

// Sent by the app file's own call statement.
action ship(order_id: string) {
    call fulfilment.post("/shipments/{order_id}", body: event, idempotency_key: order_id)
}

// Supplied by Rust code below.
action score_fraud(order_id: string, total_cents: int) uses fulfilment

subscriber ship_order { on: OrderPlaced  run: ship(event.order_id) }
subscriber fraud_check { on: OrderPlaced  run: score_fraud(event.order_id, event.total_cents) }
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A local stand-in for the fulfilment provider.
    let provider = TestProvider::start().await;
    provider.set(Behaviour::Up);
    let url = provider.url();

    let dir = std::env::temp_dir().join(format!("jadpo-embedded-{}", std::process::id()));
    let store = SqliteStore::open(&format!("sqlite:{}", dir.join("jadpo.db").display())).await?;

    let jadpo = jadpo::builder()
        .app_source("app.jadpo", APP)?
        .env(move |k| (k == "FULFILMENT_URL").then(|| url.clone()))
        .action(
            "score_fraud",
            Arc::new(|args, _connections| {
                Box::pin(async move {
                    let total = args.args["total_cents"].as_i64().unwrap_or(0);
                    if total > 1_000_000 {
                        // A declared failure: the same input fails the same way.
                        return Err(Failure::new("fraud.too_large", FailureKind::Rejected));
                    }
                    Ok(())
                })
            }),
        )
        .build(store.clone())
        .await?;

    // Your own table and your own transaction: the order and its event
    // commit together or not at all.
    let event = jadpo.prepare(
        "OrderPlaced",
        &serde_json::json!({"order_id": "o-1001", "total_cents": 4_200}),
    )?;
    let now = jadpo.clock().now();
    store
        .transaction(move |tx| -> Result<(), jadpo::store::StoreError> {
            tx.execute_batch("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total_cents INTEGER)")
                .map_err(|e| jadpo::store::StoreError::Unavailable(e.to_string()))?;
            tx.execute("INSERT INTO orders VALUES ('o-1001', 4200)", [])
                .map_err(|e| jadpo::store::StoreError::Unavailable(e.to_string()))?;
            emit_in(tx, &[event], now)?;
            Ok(())
        })
        .await?;
    // Or, without a transaction of your own:
    jadpo
        .emit(
            "OrderPlaced",
            &serde_json::json!({"order_id": "o-1002", "total_cents": 2_000_000}),
        )
        .await?;

    let running = jadpo.start();
    jadpo.wake();
    let store = jadpo.store().clone();
    for _ in 0..200 {
        let all = store.list(&DeliveryFilter::default()).await?;
        if all.iter().all(|d| d.state.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.stop().await;

    for d in store.list(&DeliveryFilter::default()).await? {
        let failure = d
            .last_failure
            .as_ref()
            .map(|f| format!("{} ({})", f.code, f.kind))
            .unwrap_or_default();
        println!("delivery {:>2}  {:<12} {:<10} {failure}", d.id, d.subscriber, d.state);
    }
    println!("the fulfilment provider received {} calls", provider.calls());
    let all = store.list(&DeliveryFilter::default()).await?;
    let ok = all.iter().filter(|d| d.state == DeliveryState::Succeeded).count();
    let _ = std::fs::remove_dir_all(&dir);
    if ok == 3 {
        Ok(())
    } else {
        Err(format!("expected 3 deliveries to succeed, {ok} did").into())
    }
}
