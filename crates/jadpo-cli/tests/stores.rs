//! Several stores through the real binary: one `jadpo dev` works an app
//! whose events live in two stores, a PostgreSQL schema and a SQLite file.
//! A provider both stores' subscribers call goes down: each store's breaker
//! opens from its own deliveries' attempts only, holds only its own
//! deliveries, and each store raises its own single alert. The operator
//! commands read either store by name. `--time-scale 60` makes the
//! breaker's minute of pause a second of the test.

#[path = "support/process.rs"]
mod process;

use jadpo_runtime::provider::{Behaviour, Recorded, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_testing::process::Logged;
use process::{get, post, wait_until};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

const APP: &str = r#"
store main  { url: env("MAIN_URL") }
store audit { url: "AUDIT_URL" }

event Paid { id: string }
event Audited in audit { id: string }

connection pay { base_url: "PAY_URL" }
connection ops { base_url: "OPS_URL" }

action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
subscriber check { on: Audited  run: charge(event.id) }
alerts { connection: ops  path: "/jadpo/alerts" }
"#;

/// `jadpo ARGS --json` in `dir`, run as an operator would, with the app's
/// `MAIN_URL` set.
fn operator(dir: &Path, main_url: &str, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_jadpo"))
        .current_dir(dir)
        .env_remove("JADPO_STORE")
        .env("MAIN_URL", main_url)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn pay_breaker(dir: &Path, main_url: &str, store: &str) -> Value {
    let all = operator(dir, main_url, &["breakers", "--store", store]);
    all.as_array()
        .unwrap()
        .iter()
        .find(|b| b["connection"] == "pay")
        .cloned()
        .unwrap()
}

fn raised(ops: &TestProvider) -> Vec<Recorded> {
    ops.requests()
        .into_iter()
        .filter(|r| r.path == "/jadpo/alerts" && r.json().is_ok_and(|b| b["status"] == "raised"))
        .collect()
}

fn resolved(ops: &TestProvider) -> Vec<Recorded> {
    ops.requests()
        .into_iter()
        .filter(|r| r.path == "/jadpo/alerts" && r.json().is_ok_and(|b| b["status"] == "resolved"))
        .collect()
}

fn states(dir: &Path, main_url: &str, store: &str) -> Vec<String> {
    let all = operator(dir, main_url, &["deliveries", "--store", store]);
    all.as_array()
        .unwrap()
        .iter()
        .map(|d| d["state"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn each_store_has_its_own_breakers_holds_and_alert() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let (pay, ops) = rt.block_on(async { (TestProvider::start().await, TestProvider::start().await) });
    pay.set(Behaviour::Down);
    let main_url = schema.url_with_search_path();
    let dir = tempfile::tempdir().unwrap();
    let audit_url = format!("sqlite:{}", dir.path().join("audit.db").display());
    let app = APP
        .replace("AUDIT_URL", &audit_url)
        .replace("PAY_URL", &pay.url())
        .replace("OPS_URL", &ops.url());
    std::fs::write(dir.path().join("app.jadpo"), app).unwrap();
    let mut child = Logged::spawn(
        Command::new(env!("CARGO_BIN_EXE_jadpo"))
            .current_dir(dir.path())
            .env_remove("JADPO_STORE")
            .env_remove("RUST_LOG")
            .env("MAIN_URL", &main_url)
            .args(["dev", "--port", "0", "--time-scale", "60"])
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    let d = dir.path();

    // The outage seen by `main`'s deliveries: only `main`'s breaker opens,
    // and only `main` holds deliveries.
    for i in 0..8 {
        assert_eq!(post(port, "/events/Paid", &format!(r#"{{"id":"p{i}"}}"#)), 202);
    }
    wait_until("main's breaker open and an alert", || {
        pay_breaker(d, &main_url, "main")["state"] != "closed" && !raised(&ops).is_empty()
    });
    let audit = pay_breaker(d, &main_url, "audit");
    assert_eq!(audit["state"], "closed", "{audit}");
    assert_eq!(audit["consecutive_unavailable"], 0, "{audit}");
    assert!(states(d, &main_url, "audit").is_empty(), "Paid lives in main");
    let calls_before = pay.calls();

    // `audit`'s own deliveries are tried (its breaker is closed), fail, and
    // open `audit`'s breaker from its own attempts; it raises its own alert.
    for i in 0..8 {
        assert_eq!(post(port, "/events/Audited", &format!(r#"{{"id":"a{i}"}}"#)), 202);
    }
    wait_until("audit's breaker open", || {
        pay_breaker(d, &main_url, "audit")["state"] != "closed"
    });
    assert!(
        pay.calls() >= calls_before + 5,
        "audit's deliveries called the provider themselves"
    );
    assert_eq!(states(d, &main_url, "audit").len(), 8);
    assert_eq!(states(d, &main_url, "main").len(), 8);
    wait_until("a second alert", || raised(&ops).len() >= 2);

    // The provider answers again: each store's probe closes its own
    // breaker and every delivery of both stores gets through.
    pay.set(Behaviour::Up);
    wait_until("every delivery of both stores succeeded", || {
        ["main", "audit"]
            .iter()
            .all(|s| states(d, &main_url, s).iter().all(|st| st == "succeeded"))
    });
    for store in ["main", "audit"] {
        assert_eq!(pay_breaker(d, &main_url, store)["state"], "closed");
    }
    // Each outage's resolved message comes after its alert, and the
    // senders' every look since: a third alert would have gone out first.
    wait_until("both stores' resolved messages", || resolved(&ops).len() >= 2);
    assert_eq!(raised(&ops).len(), 2, "one alert per store");
    assert_eq!(resolved(&ops).len(), 2, "one resolved message per store");
    let alerts = operator(d, &main_url, &["alerts", "--store", "audit"]);
    assert_eq!(
        alerts
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["status"] == "raised")
            .count(),
        1
    );

    // Each store's `/metrics` counts its own engine's events and claims,
    // not the process's: eight events emitted in each.
    for path in ["/metrics", "/metrics?store=main", "/metrics?store=audit"] {
        let text = get(port, path);
        assert!(
            text.lines().any(|l| l == "jadpo_events_emitted_total 8"),
            "{path}: {text}"
        );
        let claims = text
            .lines()
            .find_map(|l| l.strip_prefix("jadpo_claim_seconds_count "))
            .and_then(|n| n.parse::<u64>().ok());
        assert!(claims.is_some_and(|n| n > 0), "{path}: {text}");
        // The histograms are the engine's too: each store's eight first
        // attempts, and each attempt it ran under the connection it called.
        let series = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
        };
        assert_eq!(series("jadpo_emit_to_start_seconds_count"), Some(8), "{path}: {text}");
        let attempts: u64 = ["succeeded", "retry", "failed", "parked"]
            .iter()
            .filter_map(|o| series(&format!("jadpo_attempts_total{{outcome=\"{o}\"}}")))
            .sum();
        assert!(attempts > 8, "{path}: {text}");
        assert_eq!(
            series("jadpo_attempt_duration_seconds_count{connection=\"pay\"}"),
            Some(attempts),
            "{path}: {text}"
        );
        assert!(series("jadpo_claim_duration_seconds_count").is_some_and(|n| n > 0));
    }

    let (status, logs) = child.terminate();
    assert!(status.success(), "{logs}");
}
