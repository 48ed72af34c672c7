//! One probe at a time across real processes: two `jadpo dev` on one
//! PostgreSQL store, a provider that is down, then up. Whichever process
//! claims it, each probe is alone: the store shows no probe starting before
//! the one before it ended and its pause passed. The processes run 120
//! times faster (`--time-scale 120`), so a minute's pause is half a second.
//!
//! Every fact checked is engine time written by the processes into the
//! store (one anchor for both), so a slow machine makes the gaps longer,
//! never a test that fails.

#[path = "support/process.rs"]
mod process;

use jadpo_core::{DeliveryState, Timestamp};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::{AttemptRecord, DeliveryFilter, Store};
use jadpo_testing::process::Logged;
use process::{jadpo, post, wait_until};
use std::time::Duration;

/// One attempt per delivery: a failed probe is its delivery's end, so no
/// retry can run beside the probes, and every attempt after the opening
/// that is not a release's run is a probe.
const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "PAY_URL" }
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id)  retry: { attempts: 1 } }
"#;

const PAUSE: Duration = Duration::from_secs(60);
const MAX_PAUSE: Duration = Duration::from_secs(600);

#[test]
fn two_processes_send_one_probe_at_a_time_each_after_its_pause() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let pay = rt.block_on(TestProvider::start());
    pay.set(Behaviour::Down);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = schema.url_with_search_path();
    let mut children: Vec<Logged> = (0..2)
        .map(|_| Logged::spawn(jadpo(dir.path()).args(["dev", "--store", &url, "--port", "0", "--time-scale", "120"])))
        .collect();
    let ports: Vec<u16> = children.iter_mut().map(|c| c.port("api.listening")).collect();
    let store = rt.block_on(schema.store(Default::default()));
    let payments = || {
        rt.block_on(store.breakers())
            .unwrap()
            .into_iter()
            .find(|b| b.breaker.connection == "pay")
    };
    let emit = |from: usize, to: usize| {
        for i in from..to {
            let body = format!(r#"{{"id":"p{i}"}}"#);
            assert_eq!(post(ports[i % 2], "/events/Paid", &body), 202);
        }
    };
    // Five unavailable answers open the breaker; with one attempt each,
    // nothing else runs.
    emit(0, 5);
    let mut opened = None;
    wait_until("the breaker to open", || {
        opened = payments().and_then(|b| b.breaker.outage_since);
        opened.is_some()
    });
    let opened: Timestamp = opened.unwrap();
    // Five more are held behind it, for the probes to come from.
    emit(5, 10);
    wait_until("two probes after the opening", || pay.calls() >= 7);
    // The next probe finds it up but slow: while it is out, both processes
    // tick hundreds of times, each a chance for a second probe.
    pay.set(Behaviour::Slow(Duration::from_millis(1500)));
    // The first probe after it came back closes the breaker and releases
    // the rest, which then run.
    wait_until("every delivery to end", || {
        let counts = rt.block_on(store.counts()).unwrap();
        let ended = |s| counts.get(&s).copied().unwrap_or(0);
        ended(DeliveryState::Succeeded) + ended(DeliveryState::Failed) == 10
    });
    for child in children {
        let (status, logs) = child.terminate();
        assert!(status.success(), "{logs}");
    }

    let mut attempts: Vec<AttemptRecord> = Vec::new();
    let deliveries = rt
        .block_on(store.list(&DeliveryFilter {
            limit: Some(100),
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(deliveries.len(), 10);
    for d in &deliveries {
        attempts.extend(rt.block_on(store.attempts(d.id)).unwrap());
    }
    assert_eq!(
        attempts.len() as u64,
        pay.calls(),
        "each attempt made one call, each call was an attempt"
    );
    attempts.sort_by_key(|a| (a.started_at, a.ended_at));
    // The five emitted first (ids 1 to 5) opened it: the breaker opened at
    // the end of whichever of their attempts the store counted fifth. The
    // five emitted after it opened were held, and ran only as probes or
    // once released.
    let (openers, after): (Vec<&AttemptRecord>, Vec<&AttemptRecord>) = attempts.iter().partition(|a| a.delivery.0 <= 5);
    assert_eq!(openers.len(), 5, "{attempts:#?}");
    assert!(
        openers.iter().any(|a| a.ended_at == opened),
        "opened at the end of one of the first five: {opened}, {attempts:#?}"
    );
    // The probes: up to and including the first that succeeded, which
    // closed the breaker.
    let closing = after
        .iter()
        .position(|a| a.state == DeliveryState::Succeeded)
        .expect("a probe succeeded");
    let probes = &after[..=closing];
    assert!(
        probes.len() >= 3,
        "at least two probes that failed, one that closed it: {probes:#?}"
    );
    let failed = deliveries.iter().filter(|d| d.state == DeliveryState::Failed).count();
    assert_eq!(failed, 5 + probes.len() - 1, "the opening five and the failed probes");
    assert!(
        probes[0].started_at >= opened.plus(PAUSE),
        "the first probe waits out the first pause: opened {opened}, {probes:#?}"
    );
    // Each probe starts after the one before ended and its pause (doubled
    // each time it reopened) passed: never two at once, whichever process.
    for (i, w) in probes.windows(2).enumerate() {
        let pause = (PAUSE * 2u32.pow(i as u32 + 1)).min(MAX_PAUSE);
        assert!(
            w[1].started_at >= w[0].ended_at.plus(pause),
            "probe {} started {} after probe {} ended {}, within its {pause:?} pause",
            i + 1,
            w[1].started_at,
            i,
            w[0].ended_at
        );
    }
    // The rest were released by the closing probe, not before.
    let closed_at = after[closing].ended_at;
    for a in &after[closing + 1..] {
        assert!(a.started_at >= closed_at, "{a:?} ran before the release at {closed_at}");
    }
}
