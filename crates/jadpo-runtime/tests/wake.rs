//! An idle worker with a poll of minutes still starts work on time: an emit
//! wakes it at once, and a retry scheduled by backoff starts at its due
//! time, not at the next poll. On every store: memory, a SQLite file and
//! PostgreSQL (skipped loudly when unreachable, except under `CI=true`).
//!
//! Time is a manual clock whose real-time fallback is as long as the engine
//! wait (a plain `ManualClock` also looks again every 5 ms of real time,
//! which would hide a worker sleeping until its poll): only the clock
//! reaching the due time, or a wake-up, can start anything.

use futures::future::BoxFuture;
use jadpo_core::{BreakerPolicy, Budget, DeliveryState, Failure, FailureKind, Timestamp};
use jadpo_runtime::{Catalog, Clock, Engine, FnExecutor, ManualClock, RunContext, WorkerConfig};
use jadpo_store::{NewEvent, Route, ScheduleStore, SharedMemoryStore};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
const POLL: Duration = Duration::from_secs(600);

/// A [`ManualClock`] whose real waits are as long as its engine waits.
#[derive(Clone)]
struct StrictClock(ManualClock);

impl Clock for StrictClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFuture<'static, ()> {
        self.0.sleep_until(t)
    }

    fn engine_span(&self, real: Duration) -> Duration {
        real
    }

    fn real_span(&self, engine: Duration) -> Duration {
        engine
    }
}

/// Polls `check` in real time for at most ten seconds: waiting for tasks to
/// do their work, never for a backoff or a poll.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..1000 {
        if let Some(t) = check().await {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn retry_starts_at_its_due_time<S: ScheduleStore>(store: S) {
    let store = Arc::new(store);
    let clock = ManualClock::new(T0);
    let starts: Arc<Mutex<Vec<Timestamp>>> = Arc::default();
    let seen = starts.clone();
    let exec = FnExecutor(move |ctx: RunContext| {
        let first = {
            let mut s = seen.lock().unwrap();
            s.push(ctx.started_at);
            s.len() == 1
        };
        async move {
            if first {
                Err(Failure::new("http.503", FailureKind::Unavailable))
            } else {
                Ok(())
            }
        }
    });
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
        name: "test".into(),
        poll: POLL,
        ..WorkerConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        Arc::new(exec),
        Arc::new(StrictClock(clock.clone())),
        catalog,
        config,
    );
    let running = engine.start();
    let emitted = engine
        .emit(&[NewEvent {
            name: "E".into(),
            payload: "{}".into(),
            subscribers: vec!["sub".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        }])
        .await
        .unwrap();
    let id = emitted[0].deliveries[0];
    let due_at = eventually("the emit woke the worker and the first attempt failed", async || {
        let d = store.delivery(id).await.unwrap()?;
        (d.state == DeliveryState::Due && d.attempts == 1).then_some(d.due_at)
    })
    .await;
    assert_eq!(starts.lock().unwrap().clone(), vec![T0], "started at once");
    assert!(
        due_at > T0 && due_at <= T0.plus(Duration::from_secs(30)),
        "a backoff within the first ceiling: {due_at}"
    );
    clock.set(due_at);
    eventually("the retry ran at its due time", async || {
        let d = store.delivery(id).await.unwrap()?;
        (d.state == DeliveryState::Succeeded).then_some(())
    })
    .await;
    assert_eq!(
        starts.lock().unwrap().clone(),
        vec![T0, due_at],
        "the second attempt started at its due time, long before the poll"
    );
    running.stop().await;
}

#[tokio::test]
async fn memory_a_retry_starts_at_its_due_time_not_at_the_poll() {
    retry_starts_at_its_due_time(SharedMemoryStore::new(BreakerPolicy::DEFAULT)).await;
}

#[tokio::test]
async fn sqlite_a_retry_starts_at_its_due_time_not_at_the_poll() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
    let store = jadpo_store::sqlite::SqliteStore::open(&url).await.unwrap();
    retry_starts_at_its_due_time(store).await;
}

#[tokio::test]
async fn postgres_a_retry_starts_at_its_due_time_not_at_the_poll() {
    let Some(store) = jadpo_store::postgres::testing::fresh_store().await else {
        return;
    };
    retry_starts_at_its_due_time(store).await;
}
