//! One scaled clock per store, through the real binary, on SQLite and on
//! PostgreSQL (docs/decisions.md, "One scaled clock per store"):
//! `jadpo dev --time-scale 600` runs; `jadpo emit` from the command line and
//! an operator's `jadpo retry` of a failed delivery are both called and
//! succeed (on a clock of their own, the command line wrote budgets that by
//! the engine's clock had ended months before, and each failed unrun); a
//! second `dev` started later agrees on the clock; a start at another scale
//! and a `serve` are refused with their codes; printed times look like
//! today's.

#[path = "support/process.rs"]
mod process;

use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_testing::process::Logged;
use process::{post, wait_until};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const APP: &str = r#"
event Gone { id: string }
connection gone { base_url: env("GONE_URL") }
action record(id: string) { call gone.post("/things/{id}") }
subscriber on_gone { on: Gone  run: record(event.id)  retry: { attempts: 10  within: 30m } }
"#;

fn jadpo(dir: &Path, provider: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_jadpo"));
    c.current_dir(dir)
        .env_remove("JADPO_STORE")
        .env_remove("JADPO_API_TOKEN")
        .env_remove("RUST_LOG")
        .env("GONE_URL", provider);
    c
}

fn run(dir: &Path, provider: &str, args: &[&str]) -> Output {
    let out = jadpo(dir, provider).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn dev(dir: &Path, provider: &str, store: &str, scale: &str) -> (Logged, u16) {
    let mut child = Logged::spawn(
        jadpo(dir, provider)
            .args(["dev", "--store", store, "--port", "0", "--time-scale", scale])
            // SQLite has no wake-up between processes: a command's emit waits
            // for the poll, which must be short beside the budget's 3 real s.
            .args(["--poll", "50ms"])
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    (child, port)
}

/// SIGTERM, then what it logged.
fn stop(child: Logged) -> String {
    let (status, logs) = child.terminate();
    assert!(status.success(), "{logs}");
    logs
}

fn show(dir: &Path, provider: &str, store: &str, id: i64) -> Value {
    let out = run(
        dir,
        provider,
        &["deliveries", "show", &id.to_string(), "--store", store, "--json"],
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn ms(rfc3339: &Value) -> i64 {
    let t: jiff::Timestamp = rfc3339.as_str().unwrap().parse().unwrap();
    t.as_millisecond()
}

/// `clock=scaled 600x since ...` from a `dev.started` line.
fn clock_of(logs: &str) -> String {
    let line = logs
        .lines()
        .find(|l| l.contains("dev.started"))
        .unwrap_or_else(|| panic!("{logs}"));
    let at = line.find("clock=").unwrap_or_else(|| panic!("{line}"));
    line[at..].split(" console=").next().unwrap().trim().to_owned()
}

fn scenario(store: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = rt.block_on(TestProvider::start());
    provider.set(Behaviour::Status(404));
    let url = provider.url();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("app.jadpo"), APP).unwrap();

    let started = Instant::now();
    let first_start = wall_ms();
    let (first, _) = dev(d, &url, store, "600");
    // Five real seconds are fifty engine minutes: a command on a clock of
    // its own would write a budget that, by the engine's clock, ended
    // twenty minutes ago.
    while started.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // An event emitted from the command line is called: its budget is on
    // the store's clock, not the command's own.
    let out = run(d, &url, &["emit", "Gone", r#"{"id":"g1"}"#, "--store", store, "--json"]);
    let emitted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = emitted["delivery_ids"][0].as_i64().unwrap();
    wait_until("the emitted delivery tried and failed as not_found", || {
        show(d, &url, store, id)["state"] == "failed"
    });
    let failed = show(d, &url, store, id);
    assert_eq!(failed["attempts"], 1, "called once: {failed}");
    assert_eq!(failed["last_failure_code"], "http.404", "{failed}");
    assert_eq!(provider.calls(), 1);

    // Printed times look like today's: engine time starts at the first
    // start's real time, and has run 600 times faster since.
    let created = ms(&failed["created_at"]);
    let bound = 60_000 + started.elapsed().as_millis() as i64 * 600;
    assert!(
        created >= first_start - 60_000 && created <= first_start + bound,
        "created {} ms from the wall clock at the start (bound {bound})",
        created - first_start
    );

    // The provider is fixed; an operator's retry from the command line gets
    // a fresh budget by the store's clock and is called.
    provider.set(Behaviour::Up);
    run(d, &url, &["retry", &id.to_string(), "--store", store]);
    wait_until("the retried delivery succeeded", || {
        show(d, &url, store, id)["state"] == "succeeded"
    });
    let retried = show(d, &url, store, id);
    assert_eq!(retried["history"].as_array().unwrap().len(), 2, "{retried}");
    assert_eq!(provider.calls(), 2);

    // Views say the clock is scaled.
    let text = run(d, &url, &["deliveries", "show", &id.to_string(), "--store", store]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("clock         scaled 600x since "), "{text}");

    // A second `dev`, started later, reads the same anchor: both name it
    // alike, and an event through its API and one from the command line
    // right after are created at engine times a few engine minutes apart
    // (the same scale counted from each process's own start would put
    // them apart by 600 times the gap between the starts).
    let (second, port2) = dev(d, &url, store, "600");
    assert_eq!(post(port2, "/events/Gone", r#"{"id":"g2"}"#), 202);
    let out = run(d, &url, &["emit", "Gone", r#"{"id":"g3"}"#, "--store", store, "--json"]);
    let third: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id3 = third["delivery_ids"][0].as_i64().unwrap();
    wait_until("both new deliveries succeeded", || {
        [id3 - 1, id3]
            .iter()
            .all(|i| show(d, &url, store, *i)["state"] == "succeeded")
    });
    let gap = ms(&show(d, &url, store, id3)["created_at"]) - ms(&show(d, &url, store, id3 - 1)["created_at"]);
    assert!(
        (0..600 * 10_000).contains(&gap),
        "engine ms between the two emits: {gap}"
    );

    // Another scale is refused, and so is `serve`: each names its code and
    // logs no start.
    let refused = jadpo(d, &url)
        .args(["dev", "--store", store, "--port", "0", "--time-scale", "60"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("clock.scale_mismatch") && err.contains("--time-scale 600"),
        "{err}"
    );
    assert!(!err.contains("dev.started"), "{err}");
    let refused = jadpo(d, &url)
        .env("JADPO_API_TOKEN", "test-token-0123456789abcdef012345")
        .args(["serve", "--store", store, "--bind", "127.0.0.1", "--port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(err.contains("clock.store_scaled"), "{err}");

    let (logs1, logs2) = (stop(first), stop(second));
    assert!(clock_of(&logs1).starts_with("clock=scaled 600x since "), "{logs1}");
    assert_eq!(clock_of(&logs1), clock_of(&logs2));
}

#[test]
fn scaled_dev_with_command_line_emit_and_retry_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    scenario(&format!("sqlite:{}", dir.path().join("j.db").display()));
}

#[test]
fn scaled_dev_with_command_line_emit_and_retry_on_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    scenario(&schema.url_with_search_path());
}
