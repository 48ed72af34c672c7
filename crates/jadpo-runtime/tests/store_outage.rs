//! A store outage under a running worker: claims fail while PostgreSQL
//! cannot be reached, the worker backs off and reconnects, and when the
//! store returns it keeps going. Nothing is lost, nothing runs twice.
//! The outage is real: a TCP proxy between the worker and the server is cut.

use jadpo_core::{Budget, DeliveryState, Timestamp};
use jadpo_runtime::{Catalog, Engine, FnExecutor, ManualClock, RunContext, WorkerConfig};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::{DeliveryFilter, NewEvent, Route, Store};
use jadpo_testing::proxy::{Mode, Proxy};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

#[tokio::test]
async fn the_worker_reconnects_and_keeps_going_when_the_store_returns() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let direct = schema.store(Options::default()).await;
    let url = url::Url::parse(schema.url()).unwrap();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = Proxy::start(upstream).await;
    let url = proxy.url_through(schema.url());
    let options = Options {
        connect_timeout: Duration::from_millis(500),
        op_timeout: Duration::from_secs(2),
        schema: Some(schema.name().to_owned()),
        ..Options::default()
    };
    let store = Arc::new(PgStore::connect(&url, options).await.unwrap());

    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let seen = runs.clone();
    let exec = FnExecutor(move |ctx: RunContext| {
        *seen.lock().unwrap().entry(ctx.delivery().unwrap().0).or_default() += 1;
        async { Ok(()) }
    });
    let mut catalog = Catalog::new();
    catalog.add(
        "sub",
        Route {
            budget: Budget::DEFAULT,
            connections: vec![],
        },
        Duration::from_secs(30),
    );
    let config = WorkerConfig {
        name: "outage".into(),
        concurrency: 4,
        ..WorkerConfig::default()
    };
    let clock = ManualClock::new(T0);
    let engine = Engine::new(store.clone(), Arc::new(exec), Arc::new(clock.clone()), catalog, config);
    let running = engine.start();

    // The store goes away under the running worker; events keep arriving
    // (written by another process that can still reach it).
    let _ = proxy.cut();
    let events: Vec<NewEvent> = (0..20)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"i\":{i}}}"),
            subscribers: vec!["sub".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    direct.emit(&events, T0).await.unwrap();
    // The engine has come back for the store more than once while it was
    // gone (each of its connections lost, then at least one more try): it
    // has looked for the new events and could not claim them.
    let tried_before = proxy.refused();
    let ceiling = std::time::Instant::now() + Duration::from_secs(60);
    while proxy.refused() < tried_before + 3 {
        assert!(
            std::time::Instant::now() < ceiling,
            "the engine never tried the store again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        runs.lock().unwrap().is_empty(),
        "nothing can be claimed while the store is unreachable"
    );

    proxy.set(Mode::Up);
    let mut done = 0;
    // Returns as soon as all are done; the ceiling is for a machine far too loaded.
    for _ in 0..1200 {
        let list = direct.list(&DeliveryFilter::default()).await.unwrap();
        done = list.iter().filter(|d| d.state == DeliveryState::Succeeded).count();
        if done == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done, 20, "the worker came back and delivered everything");
    assert!(
        runs.lock().unwrap().values().all(|n| *n == 1),
        "nothing ran twice: {:?}",
        runs.lock().unwrap()
    );
    running.stop().await;
}
