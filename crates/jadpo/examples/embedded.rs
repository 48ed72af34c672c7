//! Jadpo inside your own program, end to end against SQLite:
//!
//! - the app declares the events, a connection and the subscribers;
//! - one action's body is Rust code, registered by name, its arguments a
//!   type of your own; the event is a type of your own too, and both are
//!   checked against the app when Jadpo is built;
//! - an order and its event are written in ONE transaction of your own
//!   connection (the transactional outbox): the event exists if and only
//!   if the order does;
//! - the workers and the tick run in your tokio runtime until every
//!   delivery is done.
//!
//! Run it: `cargo run -p jadpo --example embedded`

use jadpo::runtime::provider::{Behaviour, TestProvider};
use jadpo::store::sqlite::SqliteStore;
use jadpo::store::{DeliveryFilter, Store};
use jadpo_core::{DeliveryState, Failure, FailureKind};
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

/// The event, as a type of your own: checked against the app at `build()`.
#[derive(serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
}

impl jadpo::Event for OrderPlaced {
    const NAME: &'static str = "OrderPlaced";
}

/// The arguments `score_fraud` declares, as a type of your own.
#[derive(serde::Deserialize)]
struct ScoreArgs {
    total_cents: i64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A local stand-in for the fulfilment provider.
    let provider = TestProvider::start().await;
    provider.set(Behaviour::Up);
    let url = provider.url();

    let dir = std::env::temp_dir().join(format!("jadpo-embedded-{}", std::process::id()));
    let path = dir.join("jadpo.db");
    let store = SqliteStore::open(&format!("sqlite:{}", path.display())).await?;

    let jadpo = jadpo::builder()
        .app_source("app.jadpo", APP)?
        .env(move |k| (k == "FULFILMENT_URL").then(|| url.clone()))
        .event::<OrderPlaced>()
        .typed_action("score_fraud", |args: ScoreArgs, _connections| async move {
            if args.total_cents > 1_000_000 {
                // A declared failure: the same input fails the same way.
                return Err(Failure::new("fraud.too_large", FailureKind::Rejected));
            }
            Ok(())
        })
        .build(store)
        .await?;

    // Your own connection, table and transaction: the order and its event
    // commit together or not at all, and the commit wakes the workers.
    let mut db = rusqlite::Connection::open(&path)?;
    db.busy_timeout(Duration::from_secs(5))?;
    db.execute_batch("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total_cents INTEGER)")?;
    let mut tx = db.transaction()?;
    tx.execute("INSERT INTO orders VALUES ('o-1001', 4200)", [])?;
    let order = OrderPlaced {
        order_id: "o-1001".into(),
        total_cents: 4_200,
    };
    jadpo.emit_event_in(&mut tx, &order)?;
    tx.commit()?;
    // Or, without a transaction of your own:
    jadpo
        .emit_event(&OrderPlaced {
            order_id: "o-1002".into(),
            total_cents: 2_000_000,
        })
        .await?;

    let running = jadpo.start();
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

/// `cargo test` runs the example to its end (`test = true` in Cargo.toml),
/// so it is kept working.
#[test]
fn the_example_runs() {
    main().expect("the example runs to its end");
}
