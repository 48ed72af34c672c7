//! Failover to a synchronous standby under load, through the real binary:
//! a primary and its synchronous standby of the test's own
//! (`jadpo_testing::pg_server`), two `jadpo serve` processes on the
//! multi-host URL with `target_session_attrs=read-write`, 3,000 events
//! emitted under idempotency keys. After the first 1,000 are acknowledged
//! the primary dies (`pg_ctl stop -m immediate`) and the standby is
//! promoted; the emitters carry on, sending a refused or failed emit again
//! under its key until some answer acknowledges it, as a client would.
//!
//! Afterwards: the store (the promoted standby) holds exactly 3,000 events,
//! one per key: no acknowledged emit was lost, none made twice. Every
//! delivery succeeded through exactly one committed run, and the provider
//! saw every event. A run in flight when the primary died can run again
//! once its lease ends (its claim or its finish lost with the primary):
//! the provider's repeated calls are counted, printed, and bounded by the
//! two processes' concurrency. Both processes are the ones started at the
//! beginning, alive and answering at the end, stopped by SIGTERM.
//!
//! It prints what the failover cost (`failover summary: ...`), the numbers
//! docs/deploy.md quotes.

#[path = "support/crash.rs"]
mod crash;
#[path = "support/serve.rs"]
mod serve;

use crash::Client;
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::postgres::{Options, PgStore};
use jadpo_testing::pg_server::{PgServer, SYNCHRONOUS_PRIMARY};
use jadpo_testing::wait;
use serve::Serve;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const APP: &str = r#"
event Order { id: string }
connection shop { base_url: "SHOP_URL" }
action ship(id: string) { call shop.post("/ship", body: event, idempotency_key: id) }
subscriber ship_order { on: Order  run: ship(event.id)  timeout: 2s }
"#;

const EVENTS: usize = 3_000;
/// The primary dies once this many events are acknowledged.
const FAIL_AFTER: usize = 1_000;
/// Workers of each of the two processes: at most this many runs each are
/// in flight when the primary dies.
const WORKERS: usize = 8;
/// A call takes this long, so calls are in flight when the primary dies
/// (a few: events come at about 100 a second).
const CALL: Duration = Duration::from_millis(50);

#[test]
fn two_processes_deliver_every_acknowledged_event_once_through_a_failover_to_a_synchronous_standby() {
    let began = Instant::now();
    let Some(primary) = PgServer::start(SYNCHRONOUS_PRIMARY, &[]) else {
        return;
    };
    let standby = PgServer::standby_of(&primary);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = rt.block_on(TestProvider::start());
    provider.set(Behaviour::Slow(CALL));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("SHOP_URL", &provider.url())).unwrap();
    let workers = WORKERS.to_string();
    let serves = [
        Serve::start(dir.path(), &url, &["--workers", &workers]),
        Serve::start(dir.path(), &url, &["--workers", &workers]),
    ];
    eprintln!(
        "primary :{}, standby :{}, processes :{} and :{}, started in {:.1}s",
        primary.port(),
        standby.port(),
        serves[0].port,
        serves[1].port,
        began.elapsed().as_secs_f64()
    );

    // One emitter per process, each sending half the events to it.
    let acked = Arc::new(AtomicUsize::new(0));
    let emitters: Vec<_> = serves
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let (port, acked) = (s.port, acked.clone());
            std::thread::spawn(move || emit_share(k, port, &acked))
        })
        .collect();

    wait::until("the first events acknowledged", || {
        assert!(!emitters.iter().any(|e| e.is_finished()), "an emitter ended early");
        acked.load(Ordering::SeqCst) >= FAIL_AFTER
    });
    let listened_before: Vec<usize> = serves.iter().map(|s| s.logged("store.listening")).collect();
    let died = Instant::now();
    let failed_after = acked.load(Ordering::SeqCst);
    primary.stop_immediate();
    standby.promote();
    let promoted = died.elapsed();

    // Each process's listener listens again, on the new primary.
    let mut listening_again: [Option<Duration>; 2] = [None, None];
    wait::until("both listeners to listen again", || {
        for (i, s) in serves.iter().enumerate() {
            if listening_again[i].is_none() && s.logged("store.listening") > listened_before[i] {
                listening_again[i] = Some(died.elapsed());
            }
        }
        listening_again.iter().all(Option::is_some)
    });
    let emitted: Vec<Share> = emitters
        .into_iter()
        .map(|e| e.join().expect("an emitter failed"))
        .collect();
    assert_eq!(acked.load(Ordering::SeqCst), EVENTS);
    let all_acked = Instant::now();

    // Every acknowledged event is on the new primary: none was sent again
    // once acknowledged, so one lost with the old primary would be missing.
    let store = rt
        .block_on(PgStore::connect(&standby.url(""), Options::default()))
        .expect("the promoted standby is the store");
    let db = rt.block_on(store.connection()).unwrap();
    let scalars = |sql: &str| -> Vec<i64> {
        let row = rt
            .block_on(db.query_one(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        (0..row.len()).map(|i| row.get(i)).collect()
    };
    assert_eq!(
        scalars("SELECT count(*), count(DISTINCT idempotency_key) FROM jadpo_events"),
        [EVENTS as i64, EVENTS as i64],
        "one event per acknowledged key, and no other"
    );

    // Everything is delivered: runs whose claim or finish was lost with the
    // primary come back when their lease ends (2 s for the run, 30 s of
    // margin).
    wait::until("every delivery to succeed", || {
        scalars("SELECT count(*) FILTER (WHERE state = 'succeeded') FROM jadpo_deliveries")[0] == EVENTS as i64
    });
    let delivered_after = all_acked.elapsed();

    // Both processes are the ones started first, and answer through the
    // new primary.
    for s in &serves {
        let (status, body) = s.http("GET", "/healthz", None);
        assert_eq!(status, 200, "healthz of :{}: {body}", s.port);
    }
    for s in serves {
        let (status, log) = s.terminate();
        assert!(status.success(), "exited with {status}:\n{log}");
    }

    // Each delivery succeeded through exactly one committed run (its
    // success is an attempt row or, for a plain one, on the delivery's
    // row).
    let not_once = scalars(
        "SELECT count(*) FROM jadpo_deliveries d WHERE d.handled_at IS NULL OR \
         (SELECT count(*) FROM jadpo_attempts a WHERE a.delivery_id = d.id AND a.state = 'succeeded') \
         + (d.success_started_at IS NOT NULL)::int <> 1",
    )[0];
    assert_eq!(
        not_once, 0,
        "deliveries not succeeded through exactly one committed run"
    );
    let attempts: HashMap<String, i64> = rt
        .block_on(db.query(
            "SELECT e.payload::jsonb->>'id', d.attempts FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id",
            &[],
        ))
        .unwrap()
        .iter()
        .map(|r| (r.get(0), i64::from(r.get::<_, i32>(1))))
        .collect();
    let lost_runs: i64 = attempts.values().map(|n| n - 1).sum();

    // The provider: every event answered, never called more often than its
    // delivery was claimed to run; repeats bounded by what was in flight.
    let requests = provider.requests();
    let calls = crash::calls_by_event(&requests);
    for (event, n) in &attempts {
        let (sent, answered) = calls.get(event).copied().unwrap_or_default();
        assert!(answered >= 1, "{event} was never delivered ({sent} calls)");
        assert!(sent <= *n, "{event}: {sent} calls in {n} attempts");
    }
    assert_eq!(calls.len(), EVENTS, "calls for events the store does not hold");
    let repeats = requests.len() - calls.len();
    let under_way = requests
        .iter()
        .filter(|r| r.at <= died && died.duration_since(r.at) < CALL)
        .count();
    let bound = 2 * WORKERS;
    let refused: usize = emitted.iter().map(|e| e.refused).sum();
    let already: usize = emitted.iter().map(|e| e.already_made).sum();
    let back: Vec<String> = emitted
        .iter()
        .map(|e| {
            let at = e.back_at.expect("each process was emitting to when the primary died");
            format!("{:.0}ms", at.duration_since(died).as_secs_f64() * 1e3)
        })
        .collect();
    let listening: Vec<String> = listening_again
        .iter()
        .map(|d| format!("{:.0}ms", d.unwrap().as_secs_f64() * 1e3))
        .collect();
    eprintln!(
        "failover summary: primary stopped after {failed_after} of {EVENTS} events acknowledged and the \
         standby promoted, {:.0}ms from the stop to the promotion's end; the two processes took emits \
         again {} after the stop, their listeners listened again {} after it; {refused} emits refused or \
         failed and sent again, {already} of them answered as already made; every delivery succeeded \
         {:.1}s after the last emit; {under_way} calls under way at the stop, {lost_runs} runs lost with the primary (claimed again after their \
         lease), {repeats} repeated provider calls (bound {bound}: 2 processes x {WORKERS} workers), {} \
         answered 2xx twice; {:.1}s in all",
        promoted.as_secs_f64() * 1e3,
        back.join(" and "),
        listening.join(" and "),
        delivered_after.as_secs_f64(),
        crash::answered_twice(&requests),
        began.elapsed().as_secs_f64()
    );
    assert!(
        repeats <= bound,
        "{repeats} repeated calls, more than the {bound} runs the two processes can have in flight"
    );
}

/// What one emitter saw.
struct Share {
    /// Emits refused (an error answer) or failed (no answer), then sent
    /// again.
    refused: usize,
    /// Sent again and answered `200`: the first try had made the event.
    already_made: usize,
    /// When its process first acknowledged an emit after refusing one: back
    /// on the new primary.
    back_at: Option<Instant>,
}

/// Emits events `k`, `k + 2`, ... to the process on `port`, each under its
/// idempotency key until acknowledged (`202` made, `200` made before),
/// counting each acknowledgement in `acked`.
fn emit_share(k: usize, port: u16, acked: &AtomicUsize) -> Share {
    let mut client = Client::new(port, Duration::from_secs(10));
    let bearer = format!("Bearer {}", serve::TOKEN);
    let mut share = Share {
        refused: 0,
        already_made: 0,
        back_at: None,
    };
    for i in (k..EVENTS).step_by(2) {
        let body = format!(r#"{{"id":"e{i}"}}"#);
        let key = format!("k{i}");
        let first = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            match client.request(
                "POST",
                "/events/Order",
                &[("Authorization", &bearer), ("Idempotency-Key", &key)],
                &body,
            ) {
                Ok((status @ (200 | 202), _)) => {
                    if status == 200 && tries > 1 {
                        share.already_made += 1;
                    }
                    break;
                }
                Ok((503, _)) | Err(_) => share.refused += 1,
                Ok((status, answer)) => panic!("emit e{i}: {status} {answer}"),
            }
            assert!(
                first.elapsed() < wait::CEILING,
                "no acknowledgement of e{i} within {:?}",
                wait::CEILING
            );
            // A client's pause before sending it again.
            std::thread::sleep(Duration::from_millis(20));
        }
        if share.refused > 0 && share.back_at.is_none() {
            share.back_at = Some(Instant::now());
        }
        acked.fetch_add(1, Ordering::SeqCst);
    }
    share
}
