//! End to end: an app file, real HTTP to a local provider, the real
//! worker and tick, and a clock the test moves. An outage (the breaker
//! opens, holds, probes, releases, one alert), a probe that no longer calls
//! the provider, a 429 with `Retry-After`.

use jadpo_core::{BreakerPolicy, BreakerState, DeliveryState, FailureKind, Timestamp};
use jadpo_runtime::connection::Connections;
use jadpo_runtime::interpreter::AppExecutor;
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_runtime::{Catalog, Engine, ManualClock, WorkerConfig};
use jadpo_store::{DeliveryFilter, ScheduleStore, Store};
use std::sync::Arc;
use std::time::Duration;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

const APP: &str = r#"
event Paid { id: string  amount: int }
event Ping { id: string }

connection payments {
    base_url: env("PAYMENTS_URL")
    timeout: 2s
}

action record(id: string) {
    call payments.post("/payments/{id}", body: event, idempotency_key: id)
}

action maybe_record(id: string) {
    call payments.get("/ping/{id}")
}

subscriber record_payment { on: Paid  run: record(event.id) }
"#;

/// The suite's one wait: polls until it holds, fails after a minute.
use jadpo_testing::wait::until_async as eventually;

struct World<S: ScheduleStore> {
    store: Arc<S>,
    clock: ManualClock,
    provider: TestProvider,
    engine: Engine<S, AppExecutor>,
}

async fn world<S: ScheduleStore>(store: S, app_text: &str) -> World<S> {
    let checked = jadpo_lang::check("app.jadpo", app_text);
    let rendered = checked.render(app_text);
    let app = Arc::new(checked.app.unwrap_or_else(|| panic!("{rendered}")));
    let provider = TestProvider::start().await;
    let url = provider.url();
    let env = move |k: &str| (k == "PAYMENTS_URL").then(|| url.clone());
    let connections = Arc::new(Connections::resolve(&app, &env).unwrap_or_else(|e| panic!("{e:?}")));
    let executor = AppExecutor::new(app.clone(), connections, &env).unwrap_or_else(|e| panic!("{e:?}"));
    let store = Arc::new(store);
    let clock = ManualClock::new(T0);
    let config = WorkerConfig {
        name: "e2e".into(),
        concurrency: 4,
        ..WorkerConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        Arc::new(executor),
        Arc::new(clock.clone()),
        Catalog::from_app(&app),
        config,
    );
    World {
        store,
        clock,
        provider,
        engine,
    }
}

/// The world with its engine's spans kept in memory.
fn traced<S: ScheduleStore>(w: World<S>) -> (World<S>, opentelemetry_sdk::trace::InMemorySpanExporter) {
    use opentelemetry::trace::TracerProvider as _;
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = opentelemetry::global::BoxedTracer::new(Box::new(provider.tracer("test")));
    let w = World {
        engine: w.engine.spans(jadpo_runtime::spans::Spans::to(tracer)),
        ..w
    };
    (w, exporter)
}

fn paid(n: usize) -> Vec<jadpo_store::NewEvent> {
    (0..n)
        .map(|i| jadpo_store::NewEvent {
            name: "Paid".into(),
            payload: format!(r#"{{"id":"p{i}","amount":{i}}}"#),
            subscribers: vec!["record_payment".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect()
}

async fn count<S: Store>(store: &S, state: DeliveryState) -> usize {
    store
        .list(&DeliveryFilter {
            state: Some(state),
            ..Default::default()
        })
        .await
        .unwrap()
        .len()
}

async fn breaker<S: Store>(store: &S) -> Option<jadpo_store::BreakerView> {
    store
        .breakers()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.breaker.connection == "payments")
}

async fn the_outage_through_real_http<S: ScheduleStore>(store: S) {
    let (w, spans) = traced(world(store, APP).await);
    w.provider.set(Behaviour::Down);
    let running = w.engine.start();
    w.engine.emit(&paid(40)).await.unwrap();

    // Five unavailable attempts open the breaker; the rest are held at their
    // claim or just before their run. Only runs already under way called.
    eventually("breaker open, all 40 held or waiting", || async {
        breaker(&*w.store)
            .await
            .is_some_and(|b| b.breaker.state == BreakerState::Open)
            && count(&*w.store, DeliveryState::Held).await + count(&*w.store, DeliveryState::Due).await == 40
    })
    .await;
    let b = breaker(&*w.store).await.unwrap();
    assert_eq!(b.breaker.state, BreakerState::Open);
    let opened_with = w.provider.calls();
    assert!((5..=5 + 4).contains(&opened_with), "{opened_with} calls opened it");

    // The tick raises one alert.
    w.clock.advance(Duration::from_secs(1));
    eventually("alert raised", || async {
        breaker(&*w.store).await.unwrap().breaker.alert_raised
    })
    .await;

    // After the pause a probe goes, finds it down, and the pause doubles.
    w.clock.advance(Duration::from_secs(60));
    eventually("probe reopened it", || async {
        breaker(&*w.store).await.unwrap().breaker.pause == Duration::from_secs(120)
    })
    .await;
    assert_eq!(w.provider.calls(), opened_with + 1, "one probe, nothing else");

    // The provider recovers; the next probe closes the breaker and releases
    // every held delivery, due at once.
    w.provider.set(Behaviour::Up);
    w.clock.advance(Duration::from_secs(120));
    for i in 0..3000 {
        if count(&*w.store, DeliveryState::Succeeded).await == 40 {
            break;
        }
        // The tick sweeps every second of real time; under the manual clock
        // it runs when time moves, so move it a second now and then, as the
        // real clock would (its sweep is the safety net for a hold that
        // raced a release).
        if i % 50 == 49 {
            w.clock.advance(Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if count(&*w.store, DeliveryState::Succeeded).await != 40 {
        // Everything needed to see why, should it ever happen again.
        let all = w.store.list(&DeliveryFilter::default()).await.unwrap();
        let rows: Vec<_> = all
            .iter()
            .map(|d| {
                (
                    d.id.0,
                    d.state,
                    d.attempts,
                    d.due_at.since(T0).as_secs(),
                    d.lease.clone(),
                )
            })
            .collect();
        panic!(
            "not all succeeded after recovery: {:?}\nnow +{}s\n{rows:?}\nprovider calls {}",
            breaker(&*w.store).await,
            jadpo_runtime::Clock::now(&w.clock).since(T0).as_secs(),
            w.provider.calls()
        );
    }
    assert_eq!(breaker(&*w.store).await.unwrap().breaker.state, BreakerState::Closed);
    assert!(w.provider.calls() <= opened_with + 1 + 40);
    // Every attempt made exactly one call, so the attempts recorded are the
    // calls the provider saw: a hold that spent an attempt (it makes no
    // call) would make them more.
    let all = w.store.list(&DeliveryFilter::default()).await.unwrap();
    let attempts: u64 = all.iter().map(|d| u64::from(d.attempts)).sum();
    let per: Vec<(i64, u32)> = all.iter().map(|d| (d.id.0, d.attempts)).collect();
    assert_eq!(
        attempts,
        w.provider.calls(),
        "held deliveries spend no attempts: {per:?}"
    );
    for d in &all {
        assert!(d.attempts <= 3, "{d:?}");
    }
    running.stop().await;

    // In each held delivery's trace (its emit's, one per event): the hold,
    // then an attempt that shows the release with the time held.
    use std::collections::BTreeSet;
    let spans = spans.get_finished_spans().unwrap();
    let trace_of = |s: &opentelemetry_sdk::trace::SpanData| s.span_context.trace_id().to_string();
    let holds: BTreeSet<_> = spans.iter().filter(|s| s.name == "hold Paid").map(trace_of).collect();
    let released: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "process Paid")
        .filter_map(|s| s.events.iter().find(|e| e.name == "jadpo.released").map(|e| (s, e)))
        .collect();
    assert!(holds.len() >= 30, "most of the 40 were held: {}", holds.len());
    assert_eq!(
        holds,
        released.iter().map(|(s, _)| trace_of(s)).collect::<BTreeSet<_>>(),
        "every hold has its release in its trace, and only a hold"
    );
    for (attempt, event) in &released {
        let held_for = event
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "jadpo.delivery.held_for_ms");
        assert!(
            held_for.is_some_and(|kv| matches!(kv.value, opentelemetry::Value::I64(ms) if ms > 0)),
            "{attempt:?}"
        );
        let hold = spans
            .iter()
            .find(|s| s.name == "hold Paid" && trace_of(s) == trace_of(attempt))
            .unwrap();
        assert!(hold.end_time <= attempt.start_time, "the hold comes first");
    }
}

async fn a_429_with_retry_after_is_not_retried_before_it<S: ScheduleStore>(store: S) {
    // `noter` calls no connection: the 429's pause does not hold it.
    let app = format!(
        "{APP}\nevent Noted {{ id: string }}\naction note(id: string) {{ emit Noted(id: id) }}\n\
         subscriber noter {{ on: Ping  run: note(event.id) }}\n"
    );
    let w = world(store, &app).await;
    w.provider.set(Behaviour::RateLimited { retry_after_s: 120 });
    let running = w.engine.start();
    let id = w.engine.emit(&paid(1)).await.unwrap()[0].deliveries[0];
    eventually("first attempt failed", || async {
        w.store.delivery(id).await.unwrap().unwrap().last_failure.is_some()
    })
    .await;
    let d = w.store.delivery(id).await.unwrap().unwrap();
    assert_eq!(d.last_failure.as_ref().unwrap().kind, FailureKind::RateLimited);
    assert!(
        d.due_at >= T0.plus(Duration::from_secs(120)),
        "due {:?}",
        d.due_at.since(T0)
    );
    w.provider.set(Behaviour::Up);
    w.clock.advance(Duration::from_secs(119));
    // A delivery due now has run: the worker has claimed since time moved.
    let ping = jadpo_store::NewEvent {
        name: "Ping".into(),
        payload: r#"{"id":"n"}"#.into(),
        subscribers: vec!["noter".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    let other = w.engine.emit(&[ping]).await.unwrap()[0].deliveries[0];
    eventually("another delivery ran", || async {
        w.store.delivery(other).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    let d = w.store.delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (d.state, d.attempts),
        (DeliveryState::Due, 1),
        "not retried before 120 s"
    );
    assert_eq!(w.provider.calls(), 1, "not retried before 120 s");
    w.clock
        .advance(Duration::from_secs(1) + d.due_at.since(T0.plus(Duration::from_secs(120))));
    eventually("succeeded", || async {
        w.store.delivery(id).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    assert_eq!(w.provider.calls(), 2);
    running.stop().await;
}

async fn a_probe_whose_run_no_longer_calls_the_provider_gives_it_back<S: ScheduleStore>(store: S) {
    // `skip` calls nothing unless asked: the probe runs without calling.
    // `once` opens the breaker and is not retried, so when the pause ends
    // the held skipper is the only candidate probe.
    let app = format!(
        "{APP}\naction skip(id: string) uses payments\nsubscriber skipper {{ on: Ping  run: skip(event.id) }}\n\
         subscriber once {{ on: Paid  run: record(event.id)  retry: {{ attempts: 1 }} }}\n"
    );
    let mut w = world(store, &app).await;
    // Replace the engine's executor with one that supplies `skip` as a Rust
    // action that returns at once.
    let checked = jadpo_lang::check("app.jadpo", &app);
    let app = Arc::new(checked.app.unwrap());
    let url = w.provider.url();
    let env = move |k: &str| (k == "PAYMENTS_URL").then(|| url.clone());
    let connections = Arc::new(Connections::resolve(&app, &env).unwrap());
    let mut executor = AppExecutor::new(app.clone(), connections, &env).unwrap();
    executor
        .register("skip", Arc::new(|_args, _conns| Box::pin(async { Ok(()) })))
        .unwrap();
    assert!(executor.unregistered().is_empty());
    let config = WorkerConfig {
        name: "e2e".into(),
        concurrency: 4,
        ..WorkerConfig::default()
    };
    w.engine = Engine::new(
        w.store.clone(),
        Arc::new(executor),
        Arc::new(w.clock.clone()),
        Catalog::from_app(&app),
        config,
    );

    w.provider.set(Behaviour::Down);
    let running = w.engine.start();
    let once: Vec<_> = paid(5)
        .into_iter()
        .map(|e| jadpo_store::NewEvent {
            subscribers: vec!["once".into()],
            idempotency_key: None,
            ..e
        })
        .collect();
    w.engine.emit(&once).await.unwrap();
    eventually("breaker open", || async {
        breaker(&*w.store)
            .await
            .is_some_and(|b| b.breaker.state == BreakerState::Open)
    })
    .await;
    let ping = jadpo_store::NewEvent {
        name: "Ping".into(),
        payload: r#"{"id":"x"}"#.into(),
        subscribers: vec!["skipper".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    let skip_id = w.engine.emit(&[ping]).await.unwrap()[0].deliveries[0];
    eventually("skip held", || async {
        w.store.delivery(skip_id).await.unwrap().unwrap().state == DeliveryState::Held
    })
    .await;
    // The skipper was held first among those due at t0+0: it is woken as the
    // probe, runs without calling, and gives the probe back.
    let calls = w.provider.calls();
    w.clock.advance(Duration::from_secs(61));
    eventually("skip succeeded", || async {
        w.store.delivery(skip_id).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    let b = breaker(&*w.store).await.unwrap().breaker;
    assert_eq!(
        (b.state, b.probe),
        (BreakerState::Open, None),
        "a run that did not call proves nothing"
    );
    assert_eq!(w.provider.calls(), calls);
    // The probe's place is free: the next delivery claimed for the
    // connection probes it.
    w.engine.emit(&paid(1)).await.unwrap();
    eventually("the next delivery probed", || async { w.provider.calls() == calls + 1 }).await;
    eventually("the probe found it down", || async {
        breaker(&*w.store).await.unwrap().breaker.pause == Duration::from_secs(120)
    })
    .await;
    running.stop().await;
}

async fn a_worker_killed_mid_run_is_taken_over_after_its_lease<S: ScheduleStore>(store: S) {
    let w = world(store, APP).await;
    w.provider.set(Behaviour::Slow(Duration::from_secs(20)));
    let running = w.engine.start();
    let id = w.engine.emit(&paid(1)).await.unwrap()[0].deliveries[0];
    eventually("the call is under way", || async { w.provider.calls() == 1 }).await;
    // The process is killed mid-run: nothing is written.
    running.abort();
    let d = w.store.delivery(id).await.unwrap().unwrap();
    assert_eq!((d.state, d.attempts), (DeliveryState::Running, 1));
    w.provider.set(Behaviour::Up);
    // Another process starts; once the lease ends it takes the delivery over.
    let config = WorkerConfig {
        name: "e2e-2".into(),
        concurrency: 4,
        ..WorkerConfig::default()
    };
    let again = Engine::new(
        w.store.clone(),
        Arc::new(executor(&w.provider, APP)),
        Arc::new(w.clock.clone()),
        w.engine.catalog().clone(),
        config,
    );
    let running = again.start();
    // A delivery due now has run: the new worker has claimed, and left the
    // one still under its lease.
    let other = again.emit(&paid(2)[1..]).await.unwrap()[0].deliveries[0];
    eventually("another delivery ran", || async {
        w.store.delivery(other).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    let d = w.store.delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (d.state, d.attempts),
        (DeliveryState::Running, 1),
        "not before its lease ends"
    );
    assert_eq!(w.provider.calls(), 2, "not before its lease ends");
    w.clock.advance(Duration::from_secs(61));
    eventually("taken over and delivered", || async {
        w.store.delivery(id).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    let d = w.store.delivery(id).await.unwrap().unwrap();
    assert_eq!(d.attempts, 2, "the lost run counted");
    assert_eq!(d.last_failure.map(|f| f.kind), Some(FailureKind::LeaseExpired));
    assert_eq!(w.provider.calls(), 3);
    running.stop().await;
}

/// Records a payment through a capability `payments` fills: the breaker of
/// the filler holds the delivery, whether its subscriber runs the
/// capability or an action that runs it. Records then emit `Recorded`, whose
/// subscriber audits through `payments` too.
const CAPABILITY_APP: &str = r#"
event Paid { id: string  amount: int }
event Recorded { id: string }
event Loop { n: int }

capability record_payment(id: string)

connection payments {
    base_url: env("PAYMENTS_URL")
    timeout: 2s
    fills record_payment {
        call payments.post("/payments/{id}", idempotency_key: id)
    }
}

action record_and_tell(id: string) {
    run record_payment(id)
    emit Recorded(id: id)
}

action audit(id: string) {
    call payments.get("/audit/{id}")
}

action again(n: int) {
    emit Loop(n: n)
}

subscriber direct { on: Paid  run: record_payment(event.id) }
subscriber through_action { on: Paid  run: record_and_tell(event.id) }
subscriber auditor { on: Recorded  run: audit(event.id) }
subscriber looper { on: Loop  run: again(event.n) }
"#;

fn paid_to(subscribers: &[&str], n: usize) -> Vec<jadpo_store::NewEvent> {
    paid(n)
        .into_iter()
        .map(|mut e| {
            e.subscribers = subscribers.iter().map(|s| s.to_string()).collect();
            e
        })
        .collect()
}

async fn events_named<S: Store>(store: &S, name: &str) -> usize {
    let mut n = 0;
    for d in store.list(&DeliveryFilter::default()).await.unwrap() {
        if store.event(d.event_id).await.unwrap().is_some_and(|e| e.name == name) {
            n += 1;
        }
    }
    n
}

async fn a_capabilitys_filler_breaker_holds_its_deliveries<S: ScheduleStore>(store: S) {
    let w = world(store, CAPABILITY_APP).await;
    let routes = &w.engine.catalog().routes;
    for s in ["direct", "through_action"] {
        assert_eq!(routes.get(s).unwrap().connections, vec!["payments".to_string()], "{s}");
    }
    w.provider.set(Behaviour::Down);
    let running = w.engine.start();
    w.engine
        .emit(&paid_to(&["direct", "through_action"], 10))
        .await
        .unwrap();
    eventually("the filler's breaker open, the rest held", || async {
        breaker(&*w.store)
            .await
            .is_some_and(|b| b.breaker.state == BreakerState::Open)
            && count(&*w.store, DeliveryState::Held).await > 0
            && count(&*w.store, DeliveryState::Running).await == 0
    })
    .await;
    for d in w.store.list(&DeliveryFilter::default()).await.unwrap() {
        if d.state == DeliveryState::Held {
            assert_eq!(d.held.unwrap().connection, "payments");
        }
    }
    assert_eq!(
        events_named(&*w.store, "Recorded").await,
        0,
        "no run succeeded: nothing emitted"
    );
    w.provider.set(Behaviour::Up);
    w.clock.advance(Duration::from_secs(61));
    for i in 0..3000 {
        if count(&*w.store, DeliveryState::Succeeded).await == 30 {
            break;
        }
        if i % 50 == 49 {
            w.clock.advance(Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        count(&*w.store, DeliveryState::Succeeded).await,
        30,
        "20 payments and the 10 audits their records emitted"
    );
    assert_eq!(breaker(&*w.store).await.unwrap().breaker.state, BreakerState::Closed);
    assert_eq!(
        events_named(&*w.store, "Recorded").await,
        10,
        "one per successful record"
    );
    running.stop().await;
}

/// The run is killed after its provider call and before its commit: it
/// emitted nothing. Its rerun, once the lease ends, emits exactly once.
async fn a_killed_runs_emit_is_written_once_by_its_rerun<S: ScheduleStore>(store: S) {
    let w = world(store, CAPABILITY_APP).await;
    w.provider.set(Behaviour::Slow(Duration::from_secs(20)));
    let running = w.engine.start();
    let id = w.engine.emit(&paid_to(&["through_action"], 1)).await.unwrap()[0].deliveries[0];
    eventually("the call is under way", || async { w.provider.calls() == 1 }).await;
    running.abort();
    assert_eq!(events_named(&*w.store, "Recorded").await, 0);
    w.provider.set(Behaviour::Up);
    let again = Engine::new(
        w.store.clone(),
        Arc::new(executor(&w.provider, CAPABILITY_APP)),
        Arc::new(w.clock.clone()),
        w.engine.catalog().clone(),
        WorkerConfig {
            name: "e2e-2".into(),
            concurrency: 4,
            ..WorkerConfig::default()
        },
    );
    let running = again.start();
    w.clock.advance(Duration::from_secs(61));
    eventually("rerun, emitted, audited", || async {
        w.store.delivery(id).await.unwrap().unwrap().state == DeliveryState::Succeeded
            && count(&*w.store, DeliveryState::Succeeded).await == 2
    })
    .await;
    assert_eq!(events_named(&*w.store, "Recorded").await, 1, "exactly once");
    running.stop().await;
}

/// An action that emits the event it runs for: the chain stops at the
/// depth limit, as a defect of the run that would go deeper.
async fn an_emit_chain_deeper_than_the_limit_is_a_defect<S: ScheduleStore>(store: S) {
    let w = world(store, CAPABILITY_APP).await;
    let running = w.engine.start();
    w.engine
        .emit(&[jadpo_store::NewEvent {
            name: "Loop".into(),
            payload: r#"{"n":1}"#.into(),
            subscribers: vec!["looper".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        }])
        .await
        .unwrap();
    eventually("the chain ended", || async {
        count(&*w.store, DeliveryState::Failed).await == 1
            && count(&*w.store, DeliveryState::Due).await == 0
            && count(&*w.store, DeliveryState::Running).await == 0
    })
    .await;
    let depth = jadpo_runtime::run::MAX_EMIT_DEPTH as usize;
    assert_eq!(count(&*w.store, DeliveryState::Succeeded).await, depth);
    let failed = w
        .store
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Failed),
            ..Default::default()
        })
        .await
        .unwrap()
        .remove(0);
    assert_eq!(failed.last_failure.unwrap().code, "emit.depth_exceeded");
    assert_eq!(events_named(&*w.store, "Loop").await, depth + 1);
    running.stop().await;
}

/// A schedule's run emits: the event is written after its success, and
/// its subscriber's delivery runs.
async fn a_schedules_emits_are_delivered<S: ScheduleStore>(store: S) {
    const APP: &str = r#"
event Tick { n: int }
connection payments { base_url: env("PAYMENTS_URL") }
action tick() { emit Tick(n: 1) }
action noted(n: int) { call payments.get("/noted") }
schedule hourly { every: 1h  run: tick() }
subscriber noter { on: Tick  run: noted(event.n) }
"#;
    let w = world(store, APP).await;
    let running = w.engine.start();
    eventually("the schedule has a row", || async {
        !w.store.schedules().await.unwrap().is_empty()
    })
    .await;
    w.clock.advance(Duration::from_secs(3600));
    eventually("the tick emitted and was noted", || async {
        count(&*w.store, DeliveryState::Succeeded).await == 1
    })
    .await;
    assert_eq!(w.provider.calls(), 1);
    assert_eq!(events_named(&*w.store, "Tick").await, 1);
    running.stop().await;
}

/// A delivery's calls carry its event's trace on: each send its own span id
/// under the event's trace id, with the `tracestate`; an event in no trace
/// sends none.
async fn a_runs_calls_carry_its_events_trace_on<S: ScheduleStore>(store: S) {
    let w = world(store, APP).await;
    w.provider.script([Behaviour::Down, Behaviour::Up]);
    let trace = jadpo_core::TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=1"),
    )
    .unwrap();
    let traced = jadpo_store::NewEvent {
        trace: Some(trace.clone()),
        ..paid(1).remove(0)
    };
    let running = w.engine.start();
    let id = w.engine.emit(&[traced]).await.unwrap()[0].deliveries[0];
    // The 503 is retried, by the connection or after the delivery's
    // backoff: time moves on to the retry, and only while nothing runs,
    // never past a run's lease (an hour at a time, it once expired the
    // lease of the run under way, which then ran a second time).
    eventually("succeeded", || async {
        let d = w.store.delivery(id).await.unwrap().unwrap();
        let now = jadpo_runtime::clock::Clock::now(&w.clock);
        if d.state == DeliveryState::Due && d.due_at > now {
            w.clock.advance(d.due_at.since(now));
        }
        d.state == DeliveryState::Succeeded
    })
    .await;
    let sent = w.provider.requests();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let parents: Vec<jadpo_core::TraceContext> = sent
        .iter()
        .map(|r| {
            jadpo_core::TraceContext::parse(r.header("traceparent").expect("sent"), r.header("tracestate")).unwrap()
        })
        .collect();
    for p in &parents {
        assert_eq!(p.trace_id(), trace.trace_id());
        assert_ne!(p.parent_id(), trace.parent_id(), "a span of its own");
        assert_eq!(p.tracestate(), Some("rojo=1"));
        assert!(p.sampled());
    }
    assert_ne!(parents[0].parent_id(), parents[1].parent_id(), "one span per send");
    w.provider.clear();
    let plain = w.engine.emit(&paid(1)).await.unwrap()[0].deliveries[0];
    eventually("the plain one succeeded", || async {
        w.store.delivery(plain).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    assert_eq!(w.provider.requests()[0].header("traceparent"), None);
    running.stop().await;
}

/// With spans on: the emit is a producer span in the caller's trace; each
/// attempt a consumer span under it and linked to it, numbered, with its
/// outcome; each send a client span under its attempt, whose id the
/// provider sees in `traceparent`. No payload value in any attribute.
async fn an_events_emit_attempts_and_calls_are_spans_of_its_trace<S: ScheduleStore>(store: S) {
    use opentelemetry::trace::SpanKind;
    let (w, exporter) = traced(world(store, APP).await);
    w.provider.script([Behaviour::Down, Behaviour::Down, Behaviour::Up]);
    let caller =
        jadpo_core::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
    let event = jadpo_store::NewEvent {
        name: "Paid".into(),
        payload: r#"{"id":"pay_SECRET7","amount":4242}"#.into(),
        subscribers: vec!["record_payment".into()],
        idempotency_key: None,
        trace: Some(caller.clone()),
        keys: Default::default(),
    };
    let running = w.engine.start();
    let id = w.engine.emit(&[event]).await.unwrap()[0].deliveries[0];
    // Time moves past each backoff only once the attempt before is written:
    // moved sooner, it would end a claim's lease before its run started.
    for written in 1..=2 {
        eventually("the attempt written", || async {
            w.store.attempts(id).await.unwrap().len() == written
        })
        .await;
        w.clock.advance(Duration::from_secs(3600));
    }
    eventually("succeeded", || async {
        w.store.delivery(id).await.unwrap().unwrap().state == DeliveryState::Succeeded
    })
    .await;
    running.stop().await;
    let spans = exporter.get_finished_spans().unwrap();
    let attr = |s: &opentelemetry_sdk::trace::SpanData, key: &str| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    for s in &spans {
        assert_eq!(
            format!("{:032x}", s.span_context.trace_id()),
            caller.trace_id(),
            "{}",
            s.name
        );
        for kv in &s.attributes {
            let v = kv.value.to_string();
            assert!(
                !v.contains("SECRET7") && !v.contains("4242"),
                "{}: {} = {v}",
                s.name,
                kv.key
            );
        }
    }
    let emit: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Producer).collect();
    assert_eq!(emit.len(), 1, "{spans:#?}");
    let emit = emit[0];
    assert_eq!(emit.name, "send Paid");
    assert_eq!(format!("{:016x}", emit.parent_span_id), caller.parent_id());
    let mut attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Consumer).collect();
    attempts.sort_by_key(|s| attr(s, "jadpo.attempt"));
    let numbers: Vec<_> = attempts.iter().map(|s| attr(s, "jadpo.attempt").unwrap()).collect();
    assert_eq!(numbers, ["1", "2", "3"]);
    let outcomes: Vec<_> = attempts.iter().map(|s| attr(s, "jadpo.outcome").unwrap()).collect();
    assert_eq!(outcomes, ["retry", "retry", "succeeded"]);
    for a in &attempts {
        assert_eq!(a.name, "process Paid");
        assert_eq!(
            a.parent_span_id,
            emit.span_context.span_id(),
            "every attempt under the emit"
        );
        assert_eq!(a.links.links.len(), 1);
        assert_eq!(a.links.links[0].span_context.span_id(), emit.span_context.span_id());
        assert_eq!(attr(a, "jadpo.delivery.id"), Some(id.0.to_string()));
        assert_eq!(
            attr(a, "messaging.consumer.group.name").as_deref(),
            Some("record_payment")
        );
    }
    assert_eq!(attr(attempts[0], "jadpo.failure.kind").as_deref(), Some("unavailable"));
    assert!(attr(attempts[0], "error.type").is_some());
    assert_eq!(attr(attempts[2], "error.type"), None);
    let calls: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    assert_eq!(calls.len(), 3, "one per send");
    let sent = w.provider.requests();
    assert_eq!(sent.len(), 3);
    for (call, (attempt, request)) in calls.iter().zip(attempts.iter().zip(&sent)) {
        assert_eq!(
            call.parent_span_id,
            attempt.span_context.span_id(),
            "each send under its attempt"
        );
        assert_eq!(call.name, "POST /payments/{id}");
        assert_eq!(attr(call, "url.template").as_deref(), Some("/payments/{id}"));
        assert_eq!(attr(call, "http.request.method").as_deref(), Some("POST"));
        assert_eq!(attr(call, "server.address").as_deref(), Some("127.0.0.1"));
        let seen = jadpo_core::TraceContext::parse(request.header("traceparent").unwrap(), None).unwrap();
        assert_eq!(seen.trace_id(), caller.trace_id());
        assert_eq!(
            seen.parent_id(),
            format!("{:016x}", call.span_context.span_id()),
            "the provider sees the call span"
        );
    }
    let statuses: Vec<_> = calls
        .iter()
        .map(|c| attr(c, "http.response.status_code").unwrap())
        .collect();
    assert_eq!(statuses, ["503", "503", "200"]);
}

/// `order: fifo` end to end, from the app file to the provider: a key's
/// deliveries reach it one at a time, in emit order, the second waiting
/// `queued` through the first's 503 and backoff, while another key's
/// delivery goes ahead.
async fn a_fifo_keys_deliveries_reach_the_provider_in_emit_order<S: ScheduleStore>(store: S) {
    let app_text = format!(
        "{APP}\nevent Charged {{ id: string  customer: string }}\n\
         subscriber charge {{ on: Charged  run: record(event.id)  key: event.customer  order: fifo }}\n"
    );
    let app = jadpo_lang::check("app.jadpo", &app_text).app.unwrap();
    let w = world(store, &app_text).await;
    // Its Retry-After keeps the retry off the clock the test holds still.
    w.provider.script([Behaviour::Unavailable { retry_after_s: 10 }]);
    let events: Vec<_> = [("a1", "c-1"), ("a2", "c-1"), ("a3", "c-1"), ("b1", "c-2")]
        .iter()
        .map(|(id, customer)| {
            let payload = serde_json::json!({"id": id, "customer": customer});
            jadpo_runtime::emit::prepare(&app, "Charged", &payload).unwrap()
        })
        .collect();
    let ids: Vec<_> = w
        .engine
        .emit(&events)
        .await
        .unwrap()
        .iter()
        .map(|e| e.deliveries[0])
        .collect();
    let state = |i: usize| {
        let store = w.store.clone();
        let id = ids[i];
        async move { store.delivery(id).await.unwrap().unwrap().state }
    };
    assert_eq!(state(1).await, DeliveryState::Queued);
    let running = w.engine.start();
    eventually("the other key's delivery went ahead", || async {
        state(3).await == DeliveryState::Succeeded && state(0).await == DeliveryState::Due
    })
    .await;
    assert_eq!(
        (state(1).await, state(2).await),
        (DeliveryState::Queued, DeliveryState::Queued),
        "waiting for a1's retry"
    );
    w.clock.advance(Duration::from_secs(3600));
    eventually("all delivered", || async {
        count(&*w.store, DeliveryState::Succeeded).await == 4
    })
    .await;
    running.stop().await;
    let paths: Vec<String> = w
        .provider
        .requests()
        .into_iter()
        .filter(|r| r.path != "/payments/b1")
        .map(|r| format!("{} {}", r.path, r.status))
        .collect();
    assert_eq!(
        paths,
        [
            "/payments/a1 503",
            "/payments/a1 200",
            "/payments/a2 200",
            "/payments/a3 200"
        ]
    );
    let waited = w.store.delivery(ids[2]).await.unwrap().unwrap();
    assert_eq!(waited.attempts, 1, "waiting was no attempt");
}

fn executor(provider: &TestProvider, app_text: &str) -> AppExecutor {
    let app = Arc::new(jadpo_lang::check("app.jadpo", app_text).app.unwrap());
    let url = provider.url();
    let env = move |k: &str| (k == "PAYMENTS_URL").then(|| url.clone());
    let connections = Arc::new(Connections::resolve(&app, &env).unwrap());
    AppExecutor::new(app, connections, &env).unwrap()
}

/// Every scenario against every store: in memory, a real SQLite file, and
/// the real PostgreSQL (a fresh schema each).
macro_rules! on_every_store {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(jadpo_store::SharedMemoryStore::new(super::BreakerPolicy::DEFAULT)).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    let dir = tempfile::tempdir().unwrap();
                    let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
                    super::$test(jadpo_store::sqlite::SqliteStore::open(&url).await.unwrap()).await;
                    drop(dir);
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let Some(store) = jadpo_store::postgres::testing::fresh_store().await else { return };
                    super::$test(store).await;
                }
            )*
        }
    };
}

on_every_store!(
    the_outage_through_real_http,
    a_429_with_retry_after_is_not_retried_before_it,
    a_probe_whose_run_no_longer_calls_the_provider_gives_it_back,
    a_worker_killed_mid_run_is_taken_over_after_its_lease,
    a_capabilitys_filler_breaker_holds_its_deliveries,
    a_killed_runs_emit_is_written_once_by_its_rerun,
    an_emit_chain_deeper_than_the_limit_is_a_defect,
    a_schedules_emits_are_delivered,
    a_runs_calls_carry_its_events_trace_on,
    an_events_emit_attempts_and_calls_are_spans_of_its_trace,
    a_fifo_keys_deliveries_reach_the_provider_in_emit_order,
);
