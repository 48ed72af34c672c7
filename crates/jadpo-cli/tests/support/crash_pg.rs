//! Crashes through the real binary on PostgreSQL: three `jadpo dev`
//! processes (`--time-scale 20`, eight workers each) on one schema, one of
//! them through a TCP proxy, deliver 3,000 events to a provider that answers
//! 5% of calls with `503`, while a seeded random plan kills processes
//! (SIGKILL, started again on the same port), stalls them (SIGSTOP for 1 to
//! 4 s, then SIGCONT) and cuts the proxy's connections once.
//!
//! Afterwards: every delivery succeeded (none failed or parked), every
//! event was called with a `2xx` at least once, no delivery was called more
//! often than it had attempts, deliveries answered `2xx` more than once are
//! at most eight (one process's workers) per fault, and each delivery's
//! attempt history is consistent (numbers strictly increasing and within
//! its count of attempts, one success, last): no outcome was written under
//! a stale lease.
//!
//! The seed is printed first (`crash seed N`); `JADPO_CRASH_SEED=N` replays
//! the same plan (the same faults in the same order and gaps; which
//! deliveries they hit depends on timing).
//!
//! A lease is real time: the run's limit (`timeout: 2s`) plus the 30 s
//! margin (`WorkerConfig::lease_margin`), whatever the time scale, so the
//! deliveries a killed process held come back about 32 s after its claim.
//! Backoffs are engine time: 20 times faster.
//!
//! `run` is the scenario on any store URL: `crash_postgres.rs` runs it on
//! a schema of the shared server, `pgbouncer.rs` through PgBouncer in
//! session mode. The proxy sits in front of whatever the URL names.

use super::crash::{self, Client, Delivery, Dev, Rng};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::postgres::PgStore;
use jadpo_testing::proxy::{Mode, Proxy};
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

const EVENTS: usize = 3_000;
const PROCESSES: usize = 3;
const WORKERS: usize = 8;
const FAULTS: usize = 24;
/// Events are emitted evenly over this long, while the faults happen.
const EMIT_OVER: Duration = Duration::from_secs(12);
/// A successful call takes this long, so calls are in flight when a fault
/// comes.
const CALL: Duration = Duration::from_millis(10);

/// Runs the scenario with every process on `url` (one of them through a
/// proxy in front of the URL's host and port), then reads the rows they
/// left through `rows`: a store on the same tables, reached directly.
pub(crate) fn run(rt: &tokio::runtime::Runtime, url: &str, rows: &PgStore) {
    let began = Instant::now();
    let seed = crash::seed();
    let mut rng = Rng::new(seed);
    let provider = rt.block_on(TestProvider::start());
    // 5% of calls answer 503, drawn from the seed in order of arrival.
    provider.set(Behaviour::Slow(CALL));
    provider.script((0..4 * EVENTS).map(|_| {
        if rng.chance(0.05) {
            Behaviour::Status(503)
        } else {
            Behaviour::Slow(CALL)
        }
    }));
    let proxy = rt.block_on(Proxy::start(upstream(url)));
    // When the cut store connection comes back, chosen with the cut.
    let mut up_at: Option<Instant> = None;
    let direct = url.to_owned();
    let proxied = proxy.url_through(url);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &provider.url())).unwrap();
    let workers = WORKERS.to_string();
    let mut devs: Vec<Dev> = (0..PROCESSES)
        .map(|i| {
            let store = if i == 0 { &proxied } else { &direct };
            let args = ["--store", store, "--workers", &workers, "--time-scale", "20"];
            Dev::new(&format!("p{i}"), dir.path(), &args)
        })
        .collect();
    for dev in &mut devs {
        dev.spawn();
    }
    for dev in &mut devs {
        dev.wait_listening(Duration::from_secs(60));
    }
    let ports: Vec<u16> = devs.iter().map(|d| d.port).collect();
    eprintln!(
        "processes on ports {ports:?} ({} through the proxy), started in {:.1}s",
        ports[0],
        began.elapsed().as_secs_f64()
    );

    // Emitters: one thread per process, each its share of the events at an
    // even pace, moving to the next process on any failure and sending the
    // same event again under its idempotency key.
    let emitted = Arc::new(AtomicUsize::new(0));
    let emitters: Vec<_> = (0..PROCESSES)
        .map(|k| {
            let ports = ports.clone();
            let emitted = emitted.clone();
            std::thread::spawn(move || emit_share(k, &ports, &emitted))
        })
        .collect();

    // The faults.
    let mut state: Vec<State> = vec![State::Up; PROCESSES];
    let cut_at = rng.below(FAULTS as u64) as usize;
    let mut faults: Vec<String> = Vec::new();
    let (mut kills, mut stops) = (0, 0);
    let faults_began = Instant::now();
    let mut next_fault = faults_began + rng.millis(500, 1_000);
    let mut failed_starts = 0;
    loop {
        let now = Instant::now();
        assert!(
            now.duration_since(faults_began) < Duration::from_secs(120),
            "the faults did not settle within 120s: {state:?}"
        );
        for (i, dev) in devs.iter_mut().enumerate() {
            match state[i] {
                State::Killed { restart_at } if now >= restart_at => {
                    dev.spawn();
                    state[i] = State::Starting { since: now };
                }
                State::Starting { since } => match dev.listening() {
                    Ok(true) => state[i] = State::Up,
                    Ok(false) => assert!(
                        now.duration_since(since) < Duration::from_secs(60),
                        "{} did not listen again within 60s:\n{}",
                        dev.name,
                        dev.log_tail(30)
                    ),
                    Err(why) => {
                        // Its port not free yet, say: once more shortly.
                        failed_starts += 1;
                        assert!(failed_starts <= 5, "{why}");
                        eprintln!("{why}\n(starting it again)");
                        state[i] = State::Killed {
                            restart_at: now + Duration::from_millis(300),
                        };
                    }
                },
                State::Stopped { until } if now >= until => {
                    dev.cont();
                    state[i] = State::Up;
                }
                _ => {}
            }
        }
        if proxy.mode() == Mode::Down && up_at.is_some_and(|t| now >= t) {
            proxy.set(Mode::Up);
            up_at = None;
        }
        if faults.len() == FAULTS {
            let settled = state.iter().all(|s| *s == State::Up) && proxy.mode() != Mode::Down;
            if settled {
                break;
            }
        } else if now >= next_fault {
            let at = faults_began.elapsed().as_secs_f64();
            let up: Vec<usize> = (0..PROCESSES).filter(|&i| state[i] == State::Up).collect();
            if faults.len() == cut_at {
                let down_for = rng.millis(300, 1_500);
                up_at = Some(now + down_for);
                let cut = proxy.cut();
                faults.push(format!(
                    "{at:.1}s cut {cut} store connections of p0, refused for {down_for:?}"
                ));
            } else if up.len() < 2 {
                // Always one process up: look again shortly.
                next_fault = now + Duration::from_millis(100);
                continue;
            } else {
                let i = up[rng.below(up.len() as u64) as usize];
                if rng.chance(0.5) {
                    devs[i].kill();
                    let after = rng.millis(200, 1_500);
                    state[i] = State::Killed {
                        restart_at: now + after,
                    };
                    kills += 1;
                    faults.push(format!("{at:.1}s SIGKILL p{i}, started again after {after:?}"));
                } else {
                    devs[i].stop();
                    let stalled = rng.millis(1_000, 4_000);
                    state[i] = State::Stopped { until: now + stalled };
                    stops += 1;
                    faults.push(format!("{at:.1}s SIGSTOP p{i} for {stalled:?}"));
                }
            }
            eprintln!("fault {}: {}", faults.len(), faults.last().unwrap());
            next_fault = now + rng.millis(300, 800);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for emitter in emitters {
        emitter.join().expect("an emitter failed");
    }
    assert_eq!(emitted.load(Ordering::SeqCst), EVENTS);
    eprintln!(
        "{} faults ({kills} kills, {stops} stalls, 1 cut) over {:.1}s, all {EVENTS} events emitted at {:.1}s",
        faults.len(),
        faults_began.elapsed().as_secs_f64(),
        began.elapsed().as_secs_f64()
    );

    // Everything finishes: the leases of the last killed process end about
    // 32 s after its claims.
    let client = rt.block_on(rows.connection()).expect("a connection to read the rows");
    let count_states = || -> HashMap<String, i64> {
        rt.block_on(client.query("SELECT state, count(*) FROM jadpo_deliveries GROUP BY state", &[]))
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
            .collect()
    };
    let waiting = Instant::now();
    loop {
        let states = count_states();
        let ended_badly = states.get("failed").copied().unwrap_or(0) + states.get("parked").copied().unwrap_or(0);
        assert_eq!(ended_badly, 0, "deliveries failed or parked (seed {seed}): {states:?}");
        if states.get("succeeded").copied().unwrap_or(0) == EVENTS as i64 {
            break;
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(90),
            "not all succeeded within 90s of the last fault (seed {seed}): {states:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let finished_at = began.elapsed();
    eprintln!(
        "all {EVENTS} succeeded at {:.1}s, {:.1}s after the last fault",
        finished_at.as_secs_f64(),
        waiting.elapsed().as_secs_f64()
    );

    // Every process answers through its store, the proxied one included:
    // it reconnected after the cut.
    for port in &ports {
        let (status, body) = Client::new(*port, Duration::from_secs(10))
            .request("GET", "/healthz", &[], "")
            .unwrap();
        assert_eq!(status, 200, "healthz of :{port}: {body}");
    }
    for dev in &mut devs {
        let status = dev.terminate(Duration::from_secs(30));
        assert!(status.success(), "{} exited with {status}", dev.name);
    }

    // The rows.
    let scalar = |sql: &str| -> i64 { rt.block_on(client.query_one(sql, &[])).unwrap().get(0) };
    assert_eq!(scalar("SELECT count(*) FROM jadpo_events"), EVENTS as i64);
    assert_eq!(
        scalar("SELECT count(DISTINCT idempotency_key) FROM jadpo_events"),
        EVENTS as i64,
        "one event per key"
    );
    let rows = rt
        .block_on(client.query(
            "SELECT d.id, e.payload, d.state, d.attempts, d.lease_owner, d.lease_until, d.handled_at, \
             d.finished_at, d.success_started_at \
             FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id ORDER BY d.id",
            &[],
        ))
        .unwrap();
    assert_eq!(rows.len(), EVENTS);
    let mut history: HashMap<i64, Vec<(i64, String)>> = HashMap::new();
    for r in rt
        .block_on(client.query(
            "SELECT delivery_id, attempt, state FROM jadpo_attempts ORDER BY delivery_id, id",
            &[],
        ))
        .unwrap()
    {
        history
            .entry(r.get::<_, i64>(0))
            .or_default()
            .push((i64::from(r.get::<_, i32>(1)), r.get::<_, String>(2)));
    }
    // A plain run's success has no attempts row here: the delivery keeps
    // its start, and its history ends with it.
    let rows: Vec<Delivery> = rows
        .iter()
        .map(|r| {
            let d = Delivery {
                id: r.get(0),
                event: crash::event_of(r.get(1)),
                state: r.get(2),
                attempts: i64::from(r.get::<_, i32>(3)),
                lease_owner: r.get(4),
                lease_until: r.get(5),
                handled_at: r.get(6),
                finished_at: r.get(7),
            };
            if r.get::<_, Option<i64>>(8).is_some() {
                history
                    .entry(d.id)
                    .or_default()
                    .push((d.attempts, "succeeded".to_owned()));
            }
            d
        })
        .collect();

    let requests = provider.requests();
    let calls = crash::calls_by_event(&requests);
    let crash::Tally {
        retried,
        max_attempts,
        lost,
    } = crash::check_deliveries(rows, history, calls, seed);

    let doubled = crash::answered_twice(&requests);
    let bound = (kills + stops + 1) * WORKERS;
    eprintln!(
        "crash summary (seed {seed}): {} calls, {} answered 503, {retried} deliveries retried, \
         at most {max_attempts} attempts, {lost} attempts lost with their process (no outcome \
         written); {doubled} deliveries answered 2xx more than once (bound {bound}: {} faults x \
         {WORKERS} workers); {:.1}s in all",
        requests.len(),
        requests.iter().filter(|r| r.status == 503).count(),
        kills + stops + 1,
        began.elapsed().as_secs_f64()
    );
    assert!(
        doubled <= bound,
        "{doubled} deliveries answered 2xx more than once, more than {bound} (seed {seed}); faults:\n{}",
        faults.join("\n")
    );
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Up,
    Killed { restart_at: Instant },
    Starting { since: Instant },
    Stopped { until: Instant },
}

/// Emits events `k`, `k + PROCESSES`, ... at an even pace over
/// [`EMIT_OVER`], starting with process `k`, each under its idempotency key
/// until some process accepts it (`202`, or `200` for one already made).
fn emit_share(k: usize, ports: &[u16], emitted: &AtomicUsize) {
    let mut clients: Vec<Client> = ports.iter().map(|p| Client::new(*p, Duration::from_secs(3))).collect();
    let mine: Vec<usize> = (k..EVENTS).step_by(PROCESSES).collect();
    let gap = EMIT_OVER / mine.len() as u32;
    let began = Instant::now();
    let mut at = k;
    for (n, i) in mine.into_iter().enumerate() {
        if let Some(wait) = (began + gap * n as u32).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let body = format!(r#"{{"id":"e{i}"}}"#);
        let key = format!("k{i}");
        let first = Instant::now();
        loop {
            match clients[at].request("POST", "/events/Paid", &[("Idempotency-Key", &key)], &body) {
                Ok((202 | 200, _)) => break,
                Ok((503, _)) | Err(_) => {}
                Ok((status, answer)) => panic!("emit e{i}: {status} {answer}"),
            }
            assert!(
                first.elapsed() < Duration::from_secs(60),
                "no process took event e{i} within 60s"
            );
            at = (at + 1) % ports.len();
            std::thread::sleep(Duration::from_millis(20));
        }
        emitted.fetch_add(1, Ordering::SeqCst);
    }
}

/// `host:port` of a `postgres://[user[:password]@]host[:port][/db][?query]`.
fn upstream(url: &str) -> String {
    let (_, rest, _) = split_url(url);
    if rest.contains(':') {
        rest.to_owned()
    } else {
        format!("{rest}:5432")
    }
}

/// The URL's prefix up to the host (scheme and user), the host and port,
/// and what follows.
fn split_url(url: &str) -> (&str, &str, &str) {
    let scheme_end = url.find("://").map(|i| i + 3).expect("a postgres:// URL");
    let after = &url[scheme_end..];
    let authority_end = after.find(['/', '?']).unwrap_or(after.len());
    let authority = &after[..authority_end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    (
        &url[..scheme_end + host_start],
        &authority[host_start..],
        &after[authority_end..],
    )
}
