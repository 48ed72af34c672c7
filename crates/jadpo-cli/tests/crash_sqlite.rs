//! Crashes through the real binary on SQLite: one `jadpo dev` process
//! (`--time-scale 20`, four workers) on a file, 500 events emitted over 4 s
//! to a provider whose calls take 20 to 50 ms, and meanwhile, five times,
//! after a random 200 to 800 ms, the process is SIGKILLed and started
//! again on the same file.
//!
//! Afterwards: every delivery succeeded, every event was called with a
//! `2xx` at least once and no more often than its delivery had attempts,
//! deliveries answered `2xx` more than once are at most eight per kill (the
//! four workers' calls, and about as many answered but not yet written),
//! each attempt history is consistent (numbers strictly increasing and
//! within its count of attempts, one success, last), and
//! `PRAGMA integrity_check` on the file says `ok` once the last process
//! stopped.
//!
//! The seed is printed first (`crash seed N`); `JADPO_CRASH_SEED=N` replays
//! the same waits and call times.
//!
//! A lease is real time (the run's limit, `timeout: 2s`, plus the 30 s
//! margin), so the deliveries a killed process held come back about 32 s
//! after its claims: most of this test's time.

#[path = "support/crash.rs"]
mod crash;

use crash::{Client, Delivery, Dev, Rng};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::sqlite::rusqlite;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "PAY_URL" }
action charge(id: string) { call pay.post("/charge", body: event, idempotency_key: id) }
subscriber charge { on: Paid  run: charge(event.id)  timeout: 2s }
"#;

const EVENTS: usize = 500;
const WORKERS: usize = 4;
const KILLS: usize = 5;
/// Events are emitted evenly over this long, while the kills happen.
const EMIT_OVER: Duration = Duration::from_secs(4);

#[test]
fn one_process_killed_five_times_delivers_everything_and_keeps_its_file_whole() {
    let began = Instant::now();
    let seed = crash::seed();
    let mut rng = Rng::new(seed);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = rt.block_on(TestProvider::start());
    provider.set(Behaviour::Slow(Duration::from_millis(35)));
    provider.script((0..4 * EVENTS).map(|_| Behaviour::Slow(rng.millis(20, 50))));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &provider.url())).unwrap();
    let file = dir.path().join("jadpo.db");
    let store = format!("sqlite:{}", file.display());
    let workers = WORKERS.to_string();
    let mut dev = Dev::new(
        "s",
        dir.path(),
        &["--store", &store, "--workers", &workers, "--time-scale", "20"],
    );
    dev.start(Duration::from_secs(60));

    // The events arrive evenly while the process is killed and started
    // again, so every one of its lives has calls in flight; each is sent
    // again under its idempotency key until the process takes it.
    let emitted = Arc::new(AtomicUsize::new(0));
    let emitter = {
        let (port, emitted) = (dev.port, emitted.clone());
        std::thread::spawn(move || {
            let mut client = Client::new(port, Duration::from_secs(5));
            let began = Instant::now();
            for i in 0..EVENTS {
                if let Some(wait) =
                    (began + EMIT_OVER * i as u32 / EVENTS as u32).checked_duration_since(Instant::now())
                {
                    std::thread::sleep(wait);
                }
                let body = format!(r#"{{"id":"e{i}"}}"#);
                let key = format!("k{i}");
                let first = Instant::now();
                loop {
                    match client.request("POST", "/events/Paid", &[("Idempotency-Key", &key)], &body) {
                        Ok((202 | 200, _)) => break,
                        Ok((503, _)) | Err(_) => {}
                        Ok((status, answer)) => panic!("emit e{i}: {status} {answer}"),
                    }
                    assert!(
                        first.elapsed() < Duration::from_secs(60),
                        "event e{i} not taken within 60s"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                emitted.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    let mut kills = Vec::new();
    let mut killed_at = Vec::new();
    for k in 1..=KILLS {
        let after = rng.millis(200, 800);
        std::thread::sleep(after);
        let (calls, events) = (provider.calls(), emitted.load(Ordering::SeqCst));
        dev.kill();
        killed_at.push(Instant::now());
        kills.push(format!(
            "kill {k}: {after:?} after its start, {events} events emitted and {calls} calls so far"
        ));
        eprintln!("{}", kills.last().unwrap());
        dev.start(Duration::from_secs(60));
    }
    emitter.join().expect("the emitter failed");
    eprintln!("{EVENTS} events emitted at {:.1}s", began.elapsed().as_secs_f64());
    let mut client = Client::new(dev.port, Duration::from_secs(10));

    // Everything finishes: the leases of the last killed process end about
    // 32 s after its claims.
    let waiting = Instant::now();
    loop {
        let (status, body) = client
            .request("GET", "/deliveries?limit=10000", &[], "")
            .unwrap_or((0, String::new()));
        if status == 200 {
            let list: serde_json::Value = serde_json::from_str(&body).unwrap();
            let mut states: HashMap<String, usize> = HashMap::new();
            for d in list.as_array().unwrap() {
                *states.entry(d["state"].as_str().unwrap().to_owned()).or_default() += 1;
            }
            let ended_badly = states.get("failed").unwrap_or(&0) + states.get("parked").unwrap_or(&0);
            assert_eq!(ended_badly, 0, "deliveries failed or parked (seed {seed}): {states:?}");
            if states.get("succeeded") == Some(&EVENTS) {
                break;
            }
            assert!(
                waiting.elapsed() < Duration::from_secs(90),
                "not all succeeded within 90s of the last kill (seed {seed}): {states:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "all {EVENTS} succeeded at {:.1}s, {:.1}s after the last start",
        began.elapsed().as_secs_f64(),
        waiting.elapsed().as_secs_f64()
    );
    drop(client);
    let status = dev.terminate(Duration::from_secs(30));
    assert!(status.success(), "exited with {status}");

    // The file, after the last process stopped.
    let db = rusqlite::Connection::open(&file).unwrap();
    let integrity: Vec<String> = db
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(integrity, ["ok"], "integrity_check (seed {seed})");
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM jadpo_events"), EVENTS as i64);
    assert_eq!(
        count("SELECT count(DISTINCT idempotency_key) FROM jadpo_events"),
        EVENTS as i64
    );

    let mut history: HashMap<i64, Vec<(i64, String)>> = HashMap::new();
    {
        let mut stmt = db
            .prepare("SELECT delivery_id, attempt, state FROM jadpo_attempts ORDER BY delivery_id, id")
            .unwrap();
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?))
            })
            .unwrap();
        for row in rows {
            let (delivery, attempt, state) = row.unwrap();
            history.entry(delivery).or_default().push((attempt, state));
        }
    }
    let requests = provider.requests();
    let calls = crash::calls_by_event(&requests);
    let doubled = crash::answered_twice(&requests);
    // Each delivery answered 2xx twice, by the kill that lost its first
    // answer: the first kill after that answer arrived.
    let mut first_ok: HashMap<&str, Instant> = HashMap::new();
    for r in requests.iter().filter(|r| (200..300).contains(&r.status)) {
        first_ok.entry(r.header("idempotency-key").unwrap()).or_insert(r.at);
    }
    let mut per_kill = vec![0usize; KILLS + 1];
    for (key, (_, ok)) in &calls {
        if *ok >= 2 {
            let at = first_ok[key.as_str()];
            per_kill[killed_at.iter().position(|k| *k > at).unwrap_or(KILLS)] += 1;
        }
    }

    let mut stmt = db
        .prepare(
            "SELECT d.id, e.payload, d.state, d.attempts, d.lease_owner, d.lease_until, d.handled_at, d.finished_at, \
             d.success_started_at FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id ORDER BY d.id",
        )
        .unwrap();
    // The attempt that succeeded has no attempts row: the delivery keeps
    // its start, and its history ends with it.
    let rows: Vec<Delivery> = stmt
        .query_map([], |r| {
            let d = Delivery {
                id: r.get(0)?,
                event: crash::event_of(&r.get::<_, String>(1)?),
                state: r.get(2)?,
                attempts: r.get(3)?,
                lease_owner: r.get(4)?,
                lease_until: r.get(5)?,
                handled_at: r.get(6)?,
                finished_at: r.get(7)?,
            };
            if r.get::<_, Option<i64>>(8)?.is_some() {
                history
                    .entry(d.id)
                    .or_default()
                    .push((d.attempts, "succeeded".to_owned()));
            }
            Ok(d)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), EVENTS);
    let crash::Tally {
        retried,
        max_attempts,
        lost,
    } = crash::check_deliveries(rows, history, calls, seed);

    // At a kill, up to `WORKERS` calls are running; and since a run's slot
    // is free again once its outcome is queued for the completer, before
    // that is written (`worker.rs`), up to about as many more may have been
    // answered but not yet written.
    let bound = KILLS * 2 * WORKERS;
    eprintln!(
        "crash summary (seed {seed}): {} calls, {retried} deliveries retried, at most {max_attempts} \
         attempts, {lost} attempts lost with their process (no outcome written); {doubled} deliveries \
         answered 2xx more than once (bound {bound}: {KILLS} kills x 2 x {WORKERS} workers; by kill \
         {per_kill:?}); {:.1}s in all",
        requests.len(),
        began.elapsed().as_secs_f64()
    );
    assert!(
        doubled <= bound,
        "{doubled} deliveries answered 2xx more than once, more than {bound} (seed {seed}):\n{}",
        kills.join("\n")
    );
}
