//! Upgrades without an outage, through real processes on PostgreSQL
//! (docs/deploy.md, "Upgrades"). Each test has a schema of its own.
//!
//! - A rolling upgrade: two `jadpo serve` of the previous version (its
//!   binary built from this repository's history by `.ci/previous-jadpo`)
//!   take a steady stream of emits with idempotency keys; the new binary's
//!   `jadpo migrate` runs, a new `serve` starts, and the old ones are
//!   stopped one by one with SIGTERM, each taken out of the emitters'
//!   rotation first, as a load balancer drains a server. No emit is
//!   refused, the old processes keep claiming after the migration without
//!   one failed claim, every event is delivered, and each once.
//! - A `serve` whose store a newer build contracted past it says so once
//!   and stops claiming, and claims again when the schema lets it; a
//!   process refuses to start on a schema it cannot run on.
//! - `jadpo migrate` refuses a contract that would stop older processes
//!   until `--force`.

#[path = "support/crash.rs"]
mod crash;
#[path = "support/process.rs"]
mod process;
#[path = "support/serve.rs"]
mod serve;

use crash::Client;
use jadpo_runtime::provider::TestProvider;
use jadpo_store::postgres::schema::{LATEST, MIGRATIONS};
use jadpo_store::postgres::testing::TestSchema;
use process::jadpo;
use serve::{Serve, TOKEN};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "PAY_URL" }
action charge(id: string) { call pay.post("/charge/{id}", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;

const EVENTS: usize = 1_500;
/// The emits are spread over this time, so every step of the upgrade
/// happens while they flow.
const EMIT_OVER: Duration = Duration::from_secs(8);

/// The previous version's binary: `$JADPO_TEST_PREVIOUS_JADPO`, else built
/// (once per machine) by `.ci/previous-jadpo`. `None` when it cannot be
/// built outside CI (a copy of the sources without their history).
fn previous_jadpo() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("JADPO_TEST_PREVIOUS_JADPO").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/previous-jadpo");
    eprintln!(
        "building the previous version's jadpo with {} (once per machine)",
        script.display()
    );
    let out = std::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    if !out.status.success() {
        jadpo_testing::skip::missing(
            "the previous version's jadpo",
            &format!("{} failed", script.display()),
            "Run the suite from a git clone with its history, or set JADPO_TEST_PREVIOUS_JADPO.",
        );
        return None;
    }
    Some(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
}

#[test]
fn a_rolling_upgrade_refuses_no_emit_and_delivers_each_event_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let Some(previous) = previous_jadpo() else {
        return;
    };
    let pay = rt.block_on(TestProvider::start());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = schema.url_with_search_path();

    // The store as the previous version made it, and two of its processes.
    let made = std::process::Command::new(&previous)
        .current_dir(dir.path())
        .env_remove("JADPO_STORE")
        .args(["migrate", "--store", &url])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let old: Vec<Serve> = (0..2)
        .map(|_| Serve::start_binary(&previous, dir.path(), &url, &[], None))
        .collect();
    let live = Arc::new(Mutex::new(old.iter().map(|s| s.port).collect::<Vec<u16>>()));

    // Each event is sent to the next process in rotation until one
    // acknowledges it; any other answer is counted as refused.
    let emitted = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(Mutex::new(Vec::<String>::new()));
    let emitter = {
        let (live, emitted, refused) = (live.clone(), emitted.clone(), refused.clone());
        std::thread::spawn(move || {
            let bearer = format!("Bearer {TOKEN}");
            let began = Instant::now();
            for i in 0..EVENTS {
                if let Some(wait) =
                    (began + EMIT_OVER * i as u32 / EVENTS as u32).checked_duration_since(Instant::now())
                {
                    std::thread::sleep(wait);
                }
                let (body, key) = (format!(r#"{{"id":"e{i}"}}"#), format!("k{i}"));
                for turn in 0.. {
                    assert!(turn < 100, "event e{i} never taken: {:?}", refused.lock().unwrap());
                    let ports = live.lock().unwrap().clone();
                    let port = ports[(i + turn) % ports.len()];
                    let headers = [("Authorization", bearer.as_str()), ("Idempotency-Key", key.as_str())];
                    match Client::new(port, Duration::from_secs(10)).request("POST", "/events/Paid", &headers, &body) {
                        Ok((202 | 200, _)) => break,
                        Ok((status, answer)) => refused
                            .lock()
                            .unwrap()
                            .push(format!("e{i} at :{port}: {status} {answer}")),
                        Err(e) => refused.lock().unwrap().push(format!("e{i} at :{port}: {e}")),
                    }
                }
                emitted.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let at =
        |n: usize| jadpo_testing::wait::until(&format!("{n} events emitted"), || emitted.load(Ordering::SeqCst) >= n);

    // The new version migrates the store under the old processes, and
    // starts beside them.
    at(EVENTS / 4);
    let migrated = jadpo(dir.path())
        .args(["migrate", "--store", &url])
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let succeeded_before: Vec<usize> = old.iter().map(|s| s.logged("delivery.succeeded")).collect();
    let new = Serve::start(dir.path(), &url, &[]);
    live.lock().unwrap().push(new.port);

    // The old ones leave one by one, out of the rotation first.
    let mut old_logs = Vec::new();
    for (k, serve) in old.into_iter().enumerate() {
        at(EVENTS * (k + 2) / 4);
        let after = serve.logged("delivery.succeeded");
        live.lock().unwrap().retain(|p| *p != serve.port);
        let (status, log) = serve.terminate();
        assert!(status.success(), "old process {k}: {log}");
        old_logs.push((succeeded_before[k], after, log));
    }
    emitter.join().expect("the emitter failed");
    jadpo_testing::wait::until("every event delivered", || {
        pay.requests()
            .iter()
            .map(|r| r.path.clone())
            .collect::<std::collections::HashSet<_>>()
            .len()
            == EVENTS
    });

    let refused = refused.lock().unwrap();
    assert!(
        refused.is_empty(),
        "{} emits refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(10)]
    );
    let mut calls: HashMap<String, usize> = HashMap::new();
    for r in pay.requests() {
        *calls.entry(r.path).or_default() += 1;
    }
    let twice: Vec<_> = calls.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "called more than once: {twice:?}");
    let events: i64 = rt
        .block_on(
            rt.block_on(schema.client())
                .query_one("SELECT count(*) FROM jadpo_events", &[]),
        )
        .unwrap()
        .get(0);
    assert_eq!(events, EVENTS as i64, "one event per key");
    for (k, (before, after, log)) in old_logs.iter().enumerate() {
        assert!(
            !log.contains("\"store.unavailable\""),
            "old process {k} failed a claim: {log}"
        );
        eprintln!("old process {k}: {before} deliveries before the migration, {after} when stopped");
    }
    assert!(
        old_logs.iter().any(|(before, after, _)| after > before),
        "the old processes kept delivering after the migration"
    );
    let (status, log) = new.terminate();
    assert!(status.success(), "{log}");
    assert!(!log.contains("store.schema_newer"), "{log}");
}

/// `jadpo ARGS --store URL` in `dir`, to its end.
fn run(dir: &std::path::Path, args: &[&str], url: &str) -> Output {
    jadpo(dir)
        .env("JADPO_API_TOKEN", serve::TOKEN)
        .args(args)
        .args(["--store", url])
        .stdout(std::process::Stdio::piped())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const ADD: &str = "INSERT INTO jadpo_migrations (version, applied_at, oldest_reader) VALUES ($1, 0, $2)";

#[test]
fn a_schema_contracted_past_the_process_stops_its_claims_until_it_runs_again() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let pay = rt.block_on(TestProvider::start());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = schema.url_with_search_path();
    let mut serve = Serve::start_logging(dir.path(), &url, &[], Some("info,jadpo_runtime::worker=debug"));
    assert_eq!(serve.http("POST", "/events/Paid", Some(r#"{"id":"a"}"#)).0, 202);
    serve.wait_for("the first delivery", |_| pay.calls() == 1);

    // A newer build applied a contract that needs schema LATEST + 1.
    let client = rt.block_on(schema.client());
    rt.block_on(client.execute(ADD, &[&(LATEST + 1), &(LATEST + 1)]))
        .unwrap();
    serve.wait_for("the process to see it", |s| s.logged("store.schema_newer") == 1);
    let said = &serve.events("store.schema_newer")[0];
    assert_eq!(said["code"], "store.schema_newer");
    assert_eq!(
        (said["store"].as_i64(), said["needs"].as_i64(), said["build"].as_i64()),
        (Some(LATEST as i64 + 1), Some(LATEST as i64 + 1), Some(LATEST as i64)),
        "{said}"
    );

    // An event emitted now wakes the worker, which claims nothing.
    let woken = serve.logged("worker.woken");
    assert_eq!(serve.http("POST", "/events/Paid", Some(r#"{"id":"b"}"#)).0, 202);
    serve.wait_for("the worker to wake", |s| s.logged("worker.woken") > woken);
    let second: (String, i32) = rt
        .block_on(client.query_one("SELECT state, attempts FROM jadpo_deliveries WHERE id = 2", &[]))
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(second, ("due".to_owned(), 0), "{}", serve.log_text());
    assert_eq!(pay.calls(), 1);

    // The schema lets this build run again (the contract undone, as a
    // restored backup would): it claims at once, having said so once.
    rt.block_on(client.execute("DELETE FROM jadpo_migrations WHERE version > $1", &[&LATEST]))
        .unwrap();
    serve.wait_for("the second delivery", |_| pay.calls() == 2);
    assert_eq!(serve.logged("store.schema_newer"), 1);
    assert_eq!(serve.logged("store.schema_runs"), 1);
    assert_eq!(
        serve.logged("store.unavailable"),
        0,
        "no claim failed: {}",
        serve.log_text()
    );
    let (status, log) = serve.terminate();
    assert!(status.success(), "{log}");

    // A process that starts on such a schema refuses at once, and so
    // does migrate: code 2, both versions.
    rt.block_on(client.execute(ADD, &[&(LATEST + 1), &(LATEST + 1)]))
        .unwrap();
    for args in [&["migrate"][..], &["serve", "--port", "0"][..]] {
        let out = run(dir.path(), args, &url);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains("error[store.schema_newer]"), "{args:?}: {text}");
        assert!(
            text.contains(&format!("schema {}", LATEST + 1)) && text.contains(&format!("knows schema {LATEST}")),
            "{text}"
        );
    }
}

#[test]
fn migrate_applies_a_contract_only_with_force() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("app.jadpo"),
        APP.replace("PAY_URL", "http://127.0.0.1:9"),
    )
    .unwrap();
    let url = schema.url_with_search_path();
    // The schema as a build that knew three migrations left it: the fourth
    // drops a table that build writes.
    let client = rt.block_on(schema.client());
    rt.block_on(
        client.batch_execute("CREATE TABLE jadpo_migrations (version INT PRIMARY KEY, applied_at BIGINT NOT NULL)"),
    )
    .unwrap();
    for m in &MIGRATIONS[..3] {
        rt.block_on(client.batch_execute(m.sql)).unwrap();
        rt.block_on(client.execute("INSERT INTO jadpo_migrations VALUES ($1, 0)", &[&m.version]))
            .unwrap();
    }
    for args in [&["migrate"][..], &["serve", "--port", "0"][..]] {
        let out = run(dir.path(), args, &url);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains("error[store.migration_contract]"), "{args:?}: {text}");
        assert!(
            text.contains("migration 4") && text.contains("jadpo migrate --force"),
            "{text}"
        );
    }
    let applied = || -> i64 {
        rt.block_on(client.query_one("SELECT count(*) FROM jadpo_migrations", &[]))
            .unwrap()
            .get(0)
    };
    assert_eq!(applied(), 3, "nothing applied");

    let out = run(dir.path(), &["migrate", "--force"], &url);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(applied(), LATEST as i64);
    let out = run(dir.path(), &["migrate"], &url);
    assert!(out.status.success(), "again, with nothing to do: {}", stderr(&out));
}
