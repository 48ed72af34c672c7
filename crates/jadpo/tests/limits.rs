//! A connection's `rate:` and `concurrency:` end to end through the
//! embedded API, on a real SQLite file and real HTTP, in real time: the
//! provider records when each call came, and no one-second window holds
//! more than the rate and a tenth, none more calls at once than allowed,
//! and every delivery succeeds on its first attempt (waiting spends none).

use jadpo::runtime::provider::{Behaviour, TestProvider};
use jadpo::store::sqlite::SqliteStore;
use jadpo::store::{DeliveryFilter, Store};
use jadpo_core::DeliveryState;
use serde_json::json;
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string }
connection pay {
    base_url: env("PAY_URL")
    rate: 10/s
    concurrency: 2
}
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_connection_gets_no_more_than_its_rate_and_concurrency() {
    let pay = TestProvider::start().await;
    // Each call takes a while, so calls overlap when they can.
    pay.set(Behaviour::Slow(Duration::from_millis(450)));
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display()))
        .await
        .unwrap();
    let url = pay.url();
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .env(move |k| (k == "PAY_URL").then(|| url.clone()))
        .build(store.clone())
        .await
        .unwrap();
    let running = jadpo.start();
    let n = 16;
    for i in 0..n {
        jadpo.emit("Paid", &json!({"id": format!("p{i}")})).await.unwrap();
    }
    let started = Instant::now();
    loop {
        let done = store
            .list(&DeliveryFilter {
                state: Some(DeliveryState::Succeeded),
                ..Default::default()
            })
            .await
            .unwrap();
        if done.len() == n {
            assert!(done.iter().all(|d| d.attempts == 1), "waiting spends no attempt");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "only {} of {n} succeeded",
            done.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.stop().await;
    let calls = pay.requests();
    assert_eq!(calls.len(), n);
    let arrivals: Vec<Instant> = calls.iter().map(|r| r.at).collect();
    for (i, first) in arrivals.iter().enumerate() {
        let in_a_second = arrivals[i..]
            .iter()
            .take_while(|t| t.duration_since(*first) < Duration::from_secs(1))
            .count();
        assert!(in_a_second <= 11, "{in_a_second} calls within a second of call {i}");
    }
    // At most two in flight: each call takes 450 ms, so a third call
    // arriving within 450 ms of the one two before it overlapped both (the
    // rate alone would let calls come 100 ms apart).
    for w in arrivals.windows(3) {
        assert!(
            w[2].duration_since(w[0]) >= Duration::from_millis(430),
            "three calls at once: {:?}",
            w.iter().map(|t| t.duration_since(arrivals[0])).collect::<Vec<_>>()
        );
    }
    let span = arrivals[n - 1].duration_since(arrivals[0]);
    assert!(span >= Duration::from_millis(1_500), "16 calls at 10/s: {span:?}");
}

/// A provider's 429 with `Retry-After` pauses its connection for every
/// delivery, not only the one that got it. Time is a manual clock.
#[tokio::test]
async fn a_429_with_retry_after_pauses_the_whole_connection() {
    use jadpo::runtime::ManualClock;
    use jadpo_core::Timestamp;
    const FREE: &str = r#"
event Paid { id: string }
connection pay { base_url: env("PAY_URL") }
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;
    let pay = TestProvider::start().await;
    pay.script([Behaviour::RateLimited { retry_after_s: 30 }]);
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display()))
        .await
        .unwrap();
    let url = pay.url();
    let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", FREE)
        .unwrap()
        .env(move |k| (k == "PAY_URL").then(|| url.clone()))
        .clock(std::sync::Arc::new(clock.clone()))
        .build(store.clone())
        .await
        .unwrap();
    let running = jadpo.start();
    jadpo.emit("Paid", &json!({"id": "first"})).await.unwrap();
    let started = Instant::now();
    while pay.calls() < 1 || store.list(&DeliveryFilter::default()).await.unwrap()[0].state != DeliveryState::Due {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the first call and its retry"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Another delivery to the same provider waits out the pause.
    jadpo.emit("Paid", &json!({"id": "second"})).await.unwrap();
    for _ in 0..20 {
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pay.calls(), 1, "nothing sent to a provider that asked to wait 30 s");
    let started = Instant::now();
    while store
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Succeeded),
            ..Default::default()
        })
        .await
        .unwrap()
        .len()
        < 2
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "both through after the pause"
        );
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let calls = pay.requests();
    assert_eq!(calls.len(), 3, "the first, its retry, the second");
    running.stop().await;
}
