//! A connection's limits across three `jadpo serve` processes on one
//! PostgreSQL store, through the real binary, in real time: 1,000
//! deliveries to a provider limited to `rate: 100/s` and `concurrency: 5`,
//! whose calls take 60 ms, and one process SIGKILLed midway. The provider
//! records when every call arrived: no one-second window holds more than
//! 110 calls, no six calls are in flight at once, every delivery succeeds,
//! and only those the killed process was running spend a second attempt.

#[path = "support/serve.rs"]
mod serve;

use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::{DeliveryFilter, NewEvent, Store};
use serve::Serve;
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string }
connection pay {
    base_url: "PAY_URL"
    rate: 100/s
    concurrency: 5
}
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id)  timeout: 2s }
"#;

// At most 83 calls a second get through five slots of 60 ms: 1,000 take
// 12 s or more, enough seconds to show the rate and the slots hold, and
// short enough that a loaded machine finishes well inside the ceiling
// (3,000 once took more than its 150 s there).
const N: usize = 1_000;
const CALL: Duration = Duration::from_millis(60);

#[test]
fn three_processes_keep_one_rate_and_one_concurrency_and_survive_a_kill() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let pay = rt.block_on(TestProvider::start());
    pay.set(Behaviour::Slow(CALL));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = serve::url(&schema);
    let store = rt.block_on(schema.store(Default::default()));
    // Migrated by the first process, which the others wait for.
    let mut processes: Vec<Serve> = (0..3).map(|_| Serve::start(dir.path(), &url, &[])).collect();
    rt.block_on(async {
        let now = jadpo_core::Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
        let events: Vec<NewEvent> = (0..N)
            .map(|i| NewEvent {
                name: "Paid".into(),
                payload: format!(r#"{{"id":"p{i}"}}"#),
                subscribers: vec!["charge".into()],
                idempotency_key: None,
            })
            .collect();
        store.emit(&events, now).await.unwrap();
    });
    let started = Instant::now();
    let succeeded = |store: &jadpo_store::postgres::PgStore| {
        rt.block_on(store.list(&DeliveryFilter {
            state: Some(jadpo_core::DeliveryState::Succeeded),
            limit: Some(N),
            ..Default::default()
        }))
        .unwrap()
    };
    // A third of the way, one process is killed with its calls in flight.
    while pay.calls() < (N / 3) as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} calls",
            pay.calls()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    processes.remove(0).kill();
    let done = loop {
        let done = succeeded(&store);
        if done.len() == N {
            break done;
        }
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "only {} of {N} succeeded",
            done.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for p in processes {
        assert!(p.terminate().0.success());
    }
    let retried = done.iter().filter(|d| d.attempts > 1).count();
    assert!(retried <= 5, "{retried} deliveries spent a second attempt");
    assert!(done.iter().all(|d| d.attempts <= 2));

    let arrivals: Vec<Instant> = pay.requests().iter().map(|r| r.at).collect();
    assert!(
        arrivals.len() >= N && arrivals.len() <= N + 5,
        "{} calls",
        arrivals.len()
    );
    for (i, first) in arrivals.iter().enumerate() {
        let in_a_second = arrivals[i..]
            .iter()
            .take_while(|t| t.duration_since(*first) < Duration::from_secs(1))
            .count();
        assert!(in_a_second <= 110, "{in_a_second} calls within a second of call {i}");
    }
    // The sixth call after any call came after that one's had ended: never
    // six in flight. (At 100/s without the slots, calls 10 ms apart
    // would have six within 50 ms.)
    let overlaps = arrivals
        .windows(6)
        .filter(|w| w[5].duration_since(w[0]) < CALL - Duration::from_millis(5))
        .count();
    assert_eq!(overlaps, 0, "six calls in flight at once");
}
