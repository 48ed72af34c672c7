//! The worker and the tick over a real store, with a clock the test moves.
//! No test sleeps through a backoff: time jumps.

use futures::FutureExt;
use jadpo_core::{BreakerPolicy, Budget, DeliveryState, Failure, FailureKind, Timestamp};
use jadpo_runtime::{Catalog, Engine, FnExecutor, ManualClock, RunContext, TickConfig, WorkerConfig};
use jadpo_store::{DeliveryFilter, NewEvent, Route, SharedMemoryStore, Store};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn catalog(timeout: Duration) -> Catalog {
    let mut c = Catalog::new();
    c.add(
        "sub",
        Route {
            budget: Budget::new(3, Duration::from_secs(3600)).unwrap(),
            connections: vec![],
        },
        timeout,
    );
    c
}

fn engine<E: jadpo_runtime::Executor>(
    store: &Arc<SharedMemoryStore>,
    clock: &ManualClock,
    exec: E,
    catalog: Catalog,
    config: WorkerConfig,
) -> Engine<SharedMemoryStore, E> {
    Engine::new(store.clone(), Arc::new(exec), Arc::new(clock.clone()), catalog, config)
}

fn config() -> WorkerConfig {
    WorkerConfig {
        name: "test".into(),
        concurrency: 4,
        poll: Duration::from_secs(1),
        ..WorkerConfig::default()
    }
}

fn events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"i\":{i}}}"),
            subscribers: vec!["sub".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect()
}

/// The suite's one wait: polls until it holds, fails after a minute.
use jadpo_testing::wait::until_async as eventually;

/// Starts `stop` on this test's (single-threaded) runtime and returns once
/// it has run as far as it can: a stop that did not wait for what is under
/// way would have ended by then, since nothing else runs in between.
async fn start_stopping(stop: impl Future<Output = ()> + Send + 'static) -> tokio::task::JoinHandle<()> {
    let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let p = polled.clone();
    let stopping = tokio::spawn(async move {
        p.store(true, std::sync::atomic::Ordering::SeqCst);
        stop.await;
    });
    eventually("the stop started", || async {
        polled.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    stopping
}

/// An event for `sub` that succeeds at once: once it has run, the worker
/// has claimed at the clock's time since it was emitted.
fn probe() -> Vec<NewEvent> {
    vec![NewEvent {
        name: "E".into(),
        payload: "{\"probe\":true}".into(),
        subscribers: vec!["sub".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    }]
}

async fn succeeded(store: &SharedMemoryStore, id: jadpo_core::DeliveryId) -> bool {
    store.delivery(id).await.unwrap().unwrap().state == DeliveryState::Succeeded
}

async fn states(store: &SharedMemoryStore) -> Vec<DeliveryState> {
    store
        .list(&DeliveryFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.state)
        .collect()
}

async fn all_in(store: &SharedMemoryStore, state: DeliveryState) -> bool {
    states(store).await.iter().all(|s| *s == state)
}

#[tokio::test]
async fn failed_attempts_retry_after_their_backoff_and_then_succeed() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let tries: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let seen = tries.clone();
    let exec = FnExecutor(move |ctx: RunContext| {
        let probe = ctx.payload["probe"] == true;
        let n = {
            let mut t = seen.lock().unwrap();
            if probe {
                return futures::future::ready(Ok(())).boxed();
            }
            let n = t.entry(ctx.delivery().unwrap().0).or_default();
            *n += 1;
            *n
        };
        async move {
            if n == 1 {
                Err(Failure::new("http.503", FailureKind::Unavailable))
            } else {
                Ok(())
            }
        }
        .boxed()
    });
    let engine = engine(&store, &clock, exec, catalog(Duration::from_secs(30)), config());
    let running = engine.start();
    engine.emit(&events(5)).await.unwrap();
    eventually("every first attempt failed", || async {
        all_in(&store, DeliveryState::Due).await && tries.lock().unwrap().len() == 5
    })
    .await;
    // Each wait is at least the 1 s floor: just short of it, a claim that
    // ran (the probe's) found none of them due.
    clock.advance(Duration::from_millis(999));
    let probe = engine.emit(&probe()).await.unwrap()[0].deliveries[0];
    eventually("the probe ran", || succeeded(&store, probe)).await;
    assert!(
        tries.lock().unwrap().values().all(|n| *n == 1),
        "retried before its backoff"
    );
    // And at most the first ceiling, 30 s.
    clock.advance(Duration::from_secs(30));
    eventually("all succeeded", || async {
        all_in(&store, DeliveryState::Succeeded).await
    })
    .await;
    assert!(tries.lock().unwrap().values().all(|n| *n == 2));
    for d in store.list(&DeliveryFilter::default()).await.unwrap() {
        if d.id == probe {
            continue;
        }
        assert_eq!(d.attempts, 2);
        assert_eq!(store.attempts(d.id).await.unwrap().len(), 2);
    }
    running.stop().await;
}

#[tokio::test]
async fn a_panic_is_a_defect_not_a_crashed_worker() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let exec = FnExecutor(|ctx: RunContext| async move {
        if ctx.payload["i"] == 0 {
            panic!("a bug in the action");
        }
        Ok(())
    });
    let engine = engine(&store, &clock, exec, catalog(Duration::from_secs(30)), config());
    let running = engine.start();
    engine.emit(&events(3)).await.unwrap();
    eventually("all finished", || async {
        states(&store).await.iter().all(|s| s.is_finished())
    })
    .await;
    let list = store.list(&DeliveryFilter::default()).await.unwrap();
    let failed: Vec<_> = list.iter().filter(|d| d.state == DeliveryState::Failed).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].last_failure.as_ref().unwrap().kind,
        FailureKind::InternalFault
    );
    assert_eq!(
        list.iter().filter(|d| d.state == DeliveryState::Succeeded).count(),
        2,
        "the worker kept going"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_run_stopped_by_its_limit_is_deadline_exceeded_counted_at_once() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let exec = FnExecutor(|_ctx: RunContext| async move {
        // Never ends on its own.
        futures::future::pending::<()>().await;
        Ok(())
    });
    let engine = engine(&store, &clock, exec, catalog(Duration::from_millis(100)), config());
    let running = engine.start();
    let ids = engine.emit(&events(1)).await.unwrap()[0].deliveries.clone();
    eventually("stopped by its limit", || async {
        store.delivery(ids[0]).await.unwrap().unwrap().last_failure.is_some()
    })
    .await;
    let d = store.delivery(ids[0]).await.unwrap().unwrap();
    assert_eq!((d.state, d.attempts), (DeliveryState::Due, 1));
    assert_eq!(d.last_failure.unwrap().kind, FailureKind::DeadlineExceeded);
    // A subscriber that never ends fails after its attempts (3 here). The
    // run limit is real time: time moves again only once the attempt
    // before is written, so none comes due after the last move.
    for attempt in 2..=3 {
        clock.advance(Duration::from_secs(3600 / 4));
        eventually("the next attempt stopped by its limit", || async {
            let d = store.delivery(ids[0]).await.unwrap().unwrap();
            d.attempts == attempt && d.state != DeliveryState::Running
        })
        .await;
    }
    assert_eq!(
        store.delivery(ids[0]).await.unwrap().unwrap().state,
        DeliveryState::Failed,
        "failed after its attempts"
    );
    let d = store.delivery(ids[0]).await.unwrap().unwrap();
    assert_eq!(d.attempts, 3);
    assert_eq!(d.last_failure.unwrap().kind, FailureKind::DeadlineExceeded);
    running.stop().await;
}

#[tokio::test]
async fn stop_lets_running_deliveries_finish_and_claims_nothing_more() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let gate = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (g, n) = (gate.clone(), started.clone());
    let exec = FnExecutor(move |_ctx: RunContext| {
        let g = g.clone();
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            g.notified().await;
            Ok(())
        }
    });
    let engine = engine(&store, &clock, exec, catalog(Duration::from_secs(30)), config());
    let running = engine.start();
    engine.emit(&events(6)).await.unwrap();
    eventually("four running", || async {
        started.load(std::sync::atomic::Ordering::SeqCst) == 4
    })
    .await;
    let stopping = start_stopping(running.stop()).await;
    assert!(!stopping.is_finished(), "stop waits for running deliveries");
    gate.notify_waiters();
    stopping.await.unwrap();
    assert_eq!(
        started.load(std::sync::atomic::Ordering::SeqCst),
        4,
        "nothing started after stop"
    );
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.iter().filter(|d| d.state == DeliveryState::Succeeded).count(), 4);
    let back: Vec<_> = all.iter().filter(|d| d.state == DeliveryState::Due).collect();
    assert_eq!(back.len(), 2, "the other two are due, unclaimed or given back at stop");
    assert!(back.iter().all(|d| d.attempts == 0 && d.lease.is_none()), "{back:?}");
}

#[tokio::test]
async fn schedules_run_when_due_and_their_next_time_is_their_retry() {
    use jadpo_runtime::{RunKind, ScheduleSpec};
    use jadpo_store::ScheduleStore;
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let seen = runs.clone();
    let exec = FnExecutor(move |ctx: RunContext| {
        seen.lock().unwrap().push((ctx.kind, ctx.subscriber.clone()));
        async { Err(Failure::new("http.503", FailureKind::Unavailable)) }
    });
    let mut cat = catalog(Duration::from_secs(30));
    cat.schedules.push(ScheduleSpec {
        name: "hourly".into(),
        trigger: jadpo_lang::Trigger::Every(Duration::from_secs(3600)),
        timeout: Duration::from_secs(60),
    });
    let engine = engine(&store, &clock, exec, cat, config());
    let running = engine.start();
    eventually("the schedule has a row", || async {
        !store.schedules().await.unwrap().is_empty()
    })
    .await;
    assert!(runs.lock().unwrap().is_empty(), "not due before its first hour");
    for hour in 1..=3u32 {
        clock.advance(Duration::from_secs(3600));
        eventually("the run finished", || async {
            store.schedules().await.unwrap()[0].consecutive_failures == hour
        })
        .await;
    }
    assert_eq!(runs.lock().unwrap().len(), 3, "once per hour, never retried in between");
    assert!(runs
        .lock()
        .unwrap()
        .iter()
        .all(|(k, n)| *k == RunKind::Schedule && n == "hourly"));
    let state = store.schedules().await.unwrap().remove(0);
    assert!(state.alert_raised, "three failures in a row raise the schedule's alert");
    assert_eq!(state.next_due, T0.plus(Duration::from_secs(4 * 3600)));
    running.stop().await;
}

/// A stop waits for a schedule's run under way, as for a delivery's: its
/// outcome is written before the engine has stopped.
#[tokio::test]
async fn stop_waits_for_a_schedules_run_under_way() {
    use jadpo_runtime::ScheduleSpec;
    use jadpo_store::ScheduleStore;
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let gate = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (g, s) = (gate.clone(), started.clone());
    let exec = FnExecutor(move |_ctx: RunContext| {
        let (g, s) = (g.clone(), s.clone());
        async move {
            s.store(true, std::sync::atomic::Ordering::SeqCst);
            g.notified().await;
            Ok(())
        }
    });
    let mut cat = catalog(Duration::from_secs(30));
    cat.schedules.push(ScheduleSpec {
        name: "hourly".into(),
        trigger: jadpo_lang::Trigger::Every(Duration::from_secs(3600)),
        timeout: Duration::from_secs(60),
    });
    let engine = engine(&store, &clock, exec, cat, config());
    let running = engine.start();
    eventually("the schedule has a row", || async {
        !store.schedules().await.unwrap().is_empty()
    })
    .await;
    clock.advance(Duration::from_secs(3600));
    eventually("the run started", || async {
        started.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    let stopping = start_stopping(running.stop()).await;
    assert!(!stopping.is_finished(), "stopped with a schedule's run under way");
    gate.notify_one();
    stopping.await.unwrap();
    let state = store.schedules().await.unwrap().remove(0);
    assert!(
        state.lease.is_none(),
        "its outcome was written before the stop ended: {state:?}"
    );
}

#[tokio::test]
async fn finished_deliveries_older_than_the_retention_are_pruned_and_nothing_else() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let exec = FnExecutor(|ctx: RunContext| async move {
        if ctx.payload["i"] == 0 {
            // Not due again within the few seconds the schedule moves time on.
            Err(Failure::new("http.503", FailureKind::Unavailable).with_retry_after(Duration::from_secs(600)))
        } else {
            Ok(())
        }
    });
    use jadpo_store::ScheduleStore;
    // Its runs show where the tick is: each of its rounds prunes before it
    // starts what is due. The tick's rounds are a second apart.
    let every = Duration::from_secs(1);
    let mut cat = catalog(Duration::from_secs(30));
    cat.schedules.push(jadpo_runtime::ScheduleSpec {
        name: "marker".into(),
        trigger: jadpo_lang::Trigger::Every(every),
        timeout: Duration::from_secs(60),
    });
    let engine = engine(&store, &clock, exec, cat, config()).tick(TickConfig {
        retention: Some(Duration::from_secs(3600)),
    });
    let running = engine.start();
    let next_due = || async { store.schedules().await.unwrap().first().map(|s| s.next_due) };
    eventually("the schedule has a row", || async { next_due().await.is_some() }).await;
    engine.emit(&events(3)).await.unwrap();
    eventually("two succeeded, one waiting to retry", || async {
        states(&store)
            .await
            .iter()
            .filter(|s| **s == DeliveryState::Succeeded)
            .count()
            == 2
            && states(&store).await.contains(&DeliveryState::Due)
    })
    .await;
    let half_hour = T0.plus(Duration::from_secs(30 * 60));
    clock.set(half_hour);
    // The first run shows a round of the tick read the new time; its prune
    // at that time comes at the latest in the next round, before that round
    // starts the second run.
    eventually("the schedule ran at the new time", || async {
        next_due().await > Some(half_hour)
    })
    .await;
    clock.advance(every);
    eventually("the schedule ran in a later round", || async {
        next_due().await > Some(half_hour.plus(every))
    })
    .await;
    assert_eq!(
        store.list(&DeliveryFilter::default()).await.unwrap().len(),
        3,
        "nothing is older than an hour yet"
    );
    clock.advance(Duration::from_secs(2 * 3600));
    eventually("the two old finished deliveries are pruned", || async {
        store.list(&DeliveryFilter::default()).await.unwrap().len() == 1
    })
    .await;
    let left = store.list(&DeliveryFilter::default()).await.unwrap();
    assert!(
        !left[0].state.is_finished() || left[0].finished_at > Some(T0.plus(Duration::from_secs(3600))),
        "{left:?}"
    );
    running.stop().await;
}

/// The local queue: with one slot busy, a delivery claimed ahead whose
/// lease would run out before the slot frees is given back (due, its
/// attempt unspent), never started late; stopping gives back what is still
/// queued; and every delivery runs exactly once in the end.
#[tokio::test]
async fn a_delivery_claimed_ahead_that_cannot_start_in_time_is_given_back() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    // The first run passes at once, so the worker learns its runs are short
    // and claims ahead; the next one holds its slot until the test says.
    let gate = Arc::new(tokio::sync::Semaphore::new(1));
    let runs = Arc::new(Mutex::new(Vec::new()));
    let (g, seen) = (gate.clone(), runs.clone());
    let exec = move |ctx: RunContext| {
        seen.lock().unwrap().push(ctx.delivery().unwrap());
        let g = g.clone();
        async move {
            g.acquire().await.unwrap().forget();
            Ok(())
        }
    };
    // A 30 s run limit and a 30 s margin: a lease of 60 s, and a delivery
    // must start within 15 s of its claim to leave room for its run and
    // the write of its outcome.
    let config = WorkerConfig {
        concurrency: 1,
        local_queue: 1,
        lease_margin: Duration::from_secs(30),
        ..config()
    };
    let make = |config: WorkerConfig| {
        engine(
            &store,
            &clock,
            FnExecutor(exec.clone()),
            catalog(Duration::from_secs(30)),
            config,
        )
    };
    let first = make(config.clone());
    let running = first.start();
    first.emit(&events(1)).await.unwrap();
    eventually("the first succeeded", || async {
        states(&store).await == [DeliveryState::Succeeded]
    })
    .await;
    first.emit(&events(3)).await.unwrap();
    let running_count = || async {
        states(&store)
            .await
            .iter()
            .filter(|s| **s == DeliveryState::Running)
            .count()
    };
    eventually("one running, one claimed ahead", || async {
        runs.lock().unwrap().len() == 2 && running_count().await == 2
    })
    .await;
    let blocked = runs.lock().unwrap()[1];

    clock.advance(Duration::from_secs(16));
    let given_back_at = T0.plus(Duration::from_secs(16));
    eventually("the one claimed ahead given back", || async {
        store
            .list(&DeliveryFilter::default())
            .await
            .unwrap()
            .iter()
            .any(|d| d.state == DeliveryState::Due && d.due_at == given_back_at && d.attempts == 0)
    })
    .await;
    assert_eq!(runs.lock().unwrap().len(), 2, "nothing started late");
    // It claims ahead again; stopping gives that one back at once.
    eventually("one claimed ahead again", || async { running_count().await == 2 }).await;
    let stopping = tokio::spawn(running.stop());
    eventually("the queued one given back at stop", || async {
        running_count().await == 1
    })
    .await;
    assert!(!stopping.is_finished(), "stop waits for the run under way");
    gate.add_permits(100);
    stopping.await.unwrap();
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.iter().filter(|d| d.state == DeliveryState::Succeeded).count(), 2);
    assert!(all
        .iter()
        .any(|d| d.id == blocked && d.state == DeliveryState::Succeeded));
    assert!(
        all.iter()
            .filter(|d| d.state == DeliveryState::Due)
            .all(|d| d.attempts == 0),
        "{all:?}"
    );

    let second = make(config);
    let running = second.start();
    second.wake();
    eventually("all four succeeded", || async {
        states(&store).await.iter().all(|s| *s == DeliveryState::Succeeded)
    })
    .await;
    running.stop().await;
    let mut ran = runs.lock().unwrap().clone();
    assert_eq!(ran.len(), 4, "each ran exactly once: {ran:?}");
    ran.sort();
    ran.dedup();
    assert_eq!(ran.len(), 4);
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert!(all.iter().all(|d| d.attempts == 1), "{all:?}");
}

/// One subscriber, `sub`, whose action calls `pay`, limited to `n` calls
/// `per` its time.
fn behind_a_rate(n: u32, per: Duration) -> Catalog {
    let mut c = Catalog::new();
    c.add(
        "sub",
        Route {
            budget: Budget::DEFAULT,
            connections: vec!["pay".into()],
        },
        Duration::from_secs(30),
    );
    c.routes.limit(
        "pay",
        jadpo_core::limit::Limits {
            rate: Some(jadpo_core::limit::Rate::new(n, per).unwrap()),
            concurrency: None,
        },
    );
    c
}

/// A claim whose whole batch was told to wait for a token is followed by
/// another at once, not after the busy wait: on a paused runtime, where
/// neither clock moves while this test keeps the runtime busy, the whole
/// backlog is given its turns. Counting only the deliveries a claim
/// started or ended, the worker would sleep its busy wait after the first
/// full batch of waits, and the backlog would stop there.
#[tokio::test(start_paused = true)]
async fn a_claim_all_told_to_wait_is_followed_by_another_at_once() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let exec = FnExecutor(|_ctx: RunContext| futures::future::ready(Ok(())).boxed());
    let engine = engine(
        &store,
        &clock,
        exec,
        behind_a_rate(1, Duration::from_secs(60)),
        config(),
    );
    let running = engine.start();
    let n = 1_000;
    engine.emit(&events(n)).await.unwrap();
    let started = tokio::time::Instant::now();
    let mut waiting = 0;
    for _ in 0..5_000 {
        let all = store
            .list(&DeliveryFilter {
                limit: Some(n),
                ..Default::default()
            })
            .await
            .unwrap();
        waiting = all.iter().filter(|d| d.waiting.is_some()).count();
        if waiting == n - 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(waiting, n - 1, "every delivery but the first given its turn");
    assert_eq!(started.elapsed(), Duration::ZERO, "with no time passed");
    running.stop().await;
}

/// Behind a `rate:`, a backlog is given its turns in emit order, a token
/// apart, across as many claims as it takes, before the clock moves: the
/// engine claims again at once after a batch that was all told to wait.
#[tokio::test]
async fn a_backlog_behind_a_rate_is_given_its_turns_in_emit_order() {
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let exec = FnExecutor(|_ctx: RunContext| futures::future::ready(Ok(())).boxed());
    let engine = engine(
        &store,
        &clock,
        exec,
        behind_a_rate(10, Duration::from_secs(1)),
        config(),
    );
    let running = engine.start();
    let ids: Vec<_> = engine
        .emit(&events(100))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.deliveries[0])
        .collect();
    eventually("one ran and 99 were given turns", || async {
        let all = store.list(&DeliveryFilter::default()).await.unwrap();
        all.iter().filter(|d| d.waiting.is_some()).count() == 99
    })
    .await;
    assert!(succeeded(&store, ids[0]).await, "the bucket's one token went first");
    for (k, id) in ids[1..].iter().enumerate() {
        let d = store.delivery(*id).await.unwrap().unwrap();
        assert_eq!(
            d.due_at,
            T0.plus(Duration::from_millis(100 * (k as u64 + 1))),
            "delivery {k} of the backlog waits for the {k}th token after the first"
        );
    }
    running.stop().await;
}

/// A finish that frees a `fifo` key's slot wakes the worker: the key's
/// next delivery, queued until then, is due at once, and the claim that
/// came before the finish found nothing due. On a paused runtime where
/// neither clock moves, the poll never comes, so without the wake-up the
/// key stops after its first delivery (a store without notifications,
/// such as SQLite, waited its poll, a second by default, per delivery).
#[tokio::test(start_paused = true)]
async fn a_finish_that_frees_a_keys_slot_wakes_the_worker_for_the_next() {
    use jadpo_core::key::{Key, KeyValue, Keyed};
    use jadpo_core::key_rule::KeyRule;
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let exec = FnExecutor(|_ctx: RunContext| futures::future::ready(Ok(())).boxed());
    let engine = engine(&store, &clock, exec, catalog(Duration::from_secs(30)), config());
    let running = engine.start();
    let n = 5;
    let keyed: Vec<NewEvent> = events(n)
        .into_iter()
        .map(|mut e| {
            let key = Keyed {
                key: Key::new(KeyValue::Str("customer-1")).unwrap(),
                rule: Some(KeyRule::Fifo),
            };
            e.keys = [("sub".to_string(), key)].into();
            e
        })
        .collect();
    engine.emit(&keyed).await.unwrap();
    let started = tokio::time::Instant::now();
    let mut done = 0;
    for _ in 0..5_000 {
        done = states(&store)
            .await
            .iter()
            .filter(|s| **s == DeliveryState::Succeeded)
            .count();
        if done == n {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(done, n, "each of the key's deliveries ran after the one before");
    assert_eq!(started.elapsed(), Duration::ZERO, "with no time passed");
    running.stop().await;
}
