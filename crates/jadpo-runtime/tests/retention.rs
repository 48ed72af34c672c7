//! Retention keeps up: a backlog of finished deliveries far larger than a
//! minute's old pace (ten batches of 1,000 a minute) is pruned within a few
//! ticks, before the engine's clock reaches the next minute, on every
//! store: memory, a SQLite file and PostgreSQL (skipped loudly when
//! unreachable, except under `CI=true`). Only the tick pruning again at its
//! next round while it is behind can finish the job in that time.

use jadpo_core::{BreakerPolicy, Budget, DeliveryState, Timestamp};
use jadpo_runtime::{Catalog, Engine, FnExecutor, ManualClock, RunContext, TickConfig, WorkerConfig};
use jadpo_store::{NewEvent, Route, ScheduleStore, SharedMemoryStore};
use std::sync::Arc;
use std::time::Duration;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
/// Two and a half times what one pass of the old pace deleted.
const FINISHED: usize = 25_000;
const RETENTION: Duration = Duration::from_secs(3600);

async fn a_backlog_is_pruned_within_a_few_ticks<S: ScheduleStore>(store: S) {
    let store = Arc::new(store);
    let clock = ManualClock::new(T0);
    let mut catalog = Catalog::new();
    catalog.add(
        "sub",
        Route {
            budget: Budget::new(3, Duration::from_secs(3600)).unwrap(),
            connections: vec![],
        },
        Duration::from_secs(30),
    );
    let config = WorkerConfig {
        name: "retention".into(),
        concurrency: 64,
        ..WorkerConfig::default()
    };
    let exec = FnExecutor(|_: RunContext| async { Ok(()) });
    let engine =
        Engine::new(store.clone(), Arc::new(exec), Arc::new(clock.clone()), catalog, config).tick(TickConfig {
            retention: Some(RETENTION),
        });
    let running = engine.start();
    for chunk in 0..FINISHED / 5_000 {
        let events: Vec<NewEvent> = (0..5_000)
            .map(|i| NewEvent {
                name: "E".into(),
                payload: format!("{{\"i\":{}}}", chunk * 5_000 + i),
                subscribers: vec!["sub".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect();
        engine.emit(&events).await.unwrap();
    }
    let succeeded = || async {
        let counts = store.counts().await.unwrap();
        counts.get(&DeliveryState::Succeeded).copied().unwrap_or(0) as usize
    };
    jadpo_testing::wait::until_async("every delivery to succeed", || async { succeeded().await == FINISHED }).await;

    // Past the retention; then a second of engine time at a time, each
    // after longer than a tick's prune may take (a quarter of a second, at
    // least one batch of 1,000 each), for less than the minute after which
    // the old pace pruned again.
    let past = T0.plus(RETENTION * 2);
    clock.set(past);
    let mut ticks = 0;
    while succeeded().await > 0 {
        assert!(ticks < 59, "{} left after {ticks} ticks", succeeded().await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        clock.advance(Duration::from_secs(1));
        ticks += 1;
    }
    eprintln!("{FINISHED} pruned within {ticks} ticks");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_backlog_of_finished_deliveries_is_pruned_within_a_few_ticks() {
    a_backlog_is_pruned_within_a_few_ticks(SharedMemoryStore::new(BreakerPolicy::DEFAULT)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_backlog_of_finished_deliveries_is_pruned_within_a_few_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
    let store = jadpo_store::sqlite::SqliteStore::open(&url).await.unwrap();
    a_backlog_is_pruned_within_a_few_ticks(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_backlog_of_finished_deliveries_is_pruned_within_a_few_ticks() {
    let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
        return;
    };
    a_backlog_is_pruned_within_a_few_ticks(store).await;
}
