//! `jadpo::Client`: Jadpo without workers, on the real PostgreSQL. It
//! starts where the app's environment and Rust actions are missing, its
//! emits are delivered by a separate engine on the same store (woken by the
//! commit's notification), and it retries, skips and reads breakers as an
//! operator's tools do.

mod common;
use common::APP;

use jadpo::store::DeliveryFilter;
use jadpo_core::{DeliveryState, Failure, FailureKind};
use jadpo_store::postgres::testing::TestSchema;
use std::time::Duration;

#[derive(serde::Deserialize)]
struct ScoreArgs {
    total_cents: i64,
}

#[tokio::test]
async fn a_client_emits_and_operates_while_a_separate_engine_delivers() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    // The engine: the environment and the Rust action, its poll an hour,
    // so only a wake-up makes it claim soon.
    let engine = jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .env(|k| (k == "FULFILMENT_URL").then(|| "http://127.0.0.1:9".to_string()))
        .typed_action("score", |args: ScoreArgs, _| async move {
            if args.total_cents > 100 {
                return Err(Failure::new("fraud.too_large", FailureKind::Rejected));
            }
            Ok(())
        })
        .worker(jadpo::runtime::WorkerConfig {
            poll: Duration::from_secs(3600),
            ..Default::default()
        })
        .build(schema.store(Default::default()).await)
        .await
        .unwrap();
    let running = engine.start();

    // The client: no environment, no Rust code, its own store handle.
    let app = jadpo::check_app("app.jadpo", APP).unwrap();
    let client = jadpo::Client::new(app, schema.store(Default::default()).await)
        .await
        .unwrap();
    let ok = client
        .emit("OrderPlaced", &serde_json::json!({"order_id": "o-1", "total_cents": 5}))
        .await
        .unwrap();
    let large = client
        .emit(
            "OrderPlaced",
            &serde_json::json!({"order_id": "o-2", "total_cents": 500}),
        )
        .await
        .unwrap();
    let e = client
        .emit("OrderPlaced", &serde_json::json!({"order_id": "o-3"}))
        .await
        .unwrap_err();
    assert_eq!((e.code(), e.field()), ("event.invalid", Some("total_cents")));

    let (ok_id, large_id) = (ok.deliveries[0], large.deliveries[0]);
    let ended = |id| {
        let client = client.clone();
        async move {
            jadpo_testing::wait::eventually("the delivery ends", async || {
                let d = client.delivery(id).await.unwrap().unwrap();
                d.state.is_finished().then_some(d.state)
            })
            .await
        }
    };
    assert_eq!(ended(ok_id).await, DeliveryState::Succeeded);
    assert_eq!(ended(large_id).await, DeliveryState::Failed);

    let failed = client
        .deliveries(&DeliveryFilter {
            state: Some(DeliveryState::Failed),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(failed.iter().map(|d| d.id).collect::<Vec<_>>(), [large_id]);
    assert_eq!(client.skip(&[large_id], "ana").await.unwrap(), [large_id]);
    assert_eq!(client.retry(&[large_id], Duration::ZERO).await.unwrap(), [large_id]);
    // The retry's commit wakes the engine, which fails it again.
    jadpo_testing::wait::eventually("the retried delivery runs again", async || {
        let d = client.delivery(large_id).await.unwrap().unwrap();
        (d.state == DeliveryState::Failed && d.attempts == 1 && d.skipped.is_none()).then_some(())
    })
    .await;
    assert!(client
        .breakers()
        .await
        .unwrap()
        .iter()
        .all(|b| b.breaker.connection == "fulfilment"));
    running.stop().await;
}
