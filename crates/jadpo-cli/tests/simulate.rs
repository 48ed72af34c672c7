//! `jadpo simulate` through the real binary: a provider's outage in
//! virtual time, its report's figures, the same report for the same seed,
//! two apps side by side, and a scenario's errors.

mod common;

use common::Folder;

const APP: &str = r#"
event Paid { id: string  amount: int }
connection payments { base_url: env("PAYMENTS_URL")  timeout: 5s }
action record(id: string) {
    call payments.post("/payments/{id}", body: event, idempotency_key: id)
}
subscriber record_payment { on: Paid  run: record(event.id) }
"#;

/// One attempt only: what fails while the provider is down fails for good.
const ONE_ATTEMPT: &str = r#"
event Paid { id: string  amount: int }
connection payments { base_url: env("PAYMENTS_URL")  timeout: 5s }
action record(id: string) {
    call payments.post("/payments/{id}", body: event, idempotency_key: id)
}
subscriber record_payment { on: Paid  run: record(event.id)  retry: { attempts: 1 } }
"#;

/// 60 payments a minute for an hour; the provider is down from minute 20
/// to minute 40.
const OUTAGE: &str = r#"
[[traffic]]
event = "Paid"
rate = "60/min"
for = "1h"

[[connections.payments]]
from = "0s"
state = "up"
latency = "50ms..150ms"

[[connections.payments]]
from = "20m"
state = "down"
answer = "503"

[[connections.payments]]
from = "40m"
state = "up"
latency = "50ms..150ms"
"#;

fn folder() -> Folder {
    let f = Folder::empty();
    f.write("app.jadpo", APP);
    f.write("one.jadpo", ONE_ATTEMPT);
    f.write("outage.toml", OUTAGE);
    f
}

/// Every payment is delivered; the breaker opened once and raised one
/// alert; while the provider was down it saw only the calls that opened
/// the breaker and the probes, and no delivery spent an attempt while held.
#[test]
fn an_outage_is_delivered_through_the_breaker_with_few_calls_while_down() {
    let f = folder();
    let run = f.run(&["simulate", "app.jadpo", "--scenario", "outage.toml", "--json"]);
    let report = run.expect(0, None).json();
    let sub = &report["subscribers"][0];
    assert_eq!(sub["name"], "record_payment");
    assert_eq!(sub["deliveries"], 3600, "{report:#}");
    assert_eq!(sub["delivered"], 3600, "{report:#}");
    assert_eq!(sub["unfinished"], 0);
    assert!(
        sub["held"].as_u64().unwrap() > 1000,
        "the outage's deliveries held: {sub}"
    );
    let payments = &report["connections"][0];
    assert_eq!(payments["name"], "payments");
    assert_eq!(payments["breaker_openings"], 1, "{payments}");
    assert_eq!(payments["alerts"], 1, "{payments}");
    let phases = payments["phases"].as_array().unwrap();
    let down = phases[1]["sends"].as_u64().unwrap();
    let probes = payments["probes"].as_u64().unwrap();
    // Five failures open it (a few more were under way), then one probe
    // per pause: 1, 2, 4, 8 minutes (capped at 10) over twenty minutes.
    assert!(
        (5..=5 + 10 + probes).contains(&down),
        "{down} sends while down, {probes} probes"
    );
    assert!((3..=8).contains(&probes), "{probes}");
    let open = payments["open_ms"].as_u64().unwrap();
    assert!((20 * 60_000..=32 * 60_000).contains(&open), "open for {open} ms");
    let attempts = sub["attempts"].as_object().unwrap();
    let retried: u64 = attempts
        .iter()
        .filter(|(a, _)| *a != "1")
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert!(retried <= down, "only the calls that failed were retried: {attempts:?}");
    let backlog = report["backlog_per_minute"].as_array().unwrap();
    let peak = backlog.iter().map(|n| n.as_u64().unwrap()).max().unwrap();
    assert!(
        (1200..=2000).contains(&peak),
        "twenty minutes of events and the wait for a probe: {peak}"
    );
}

/// The same app, scenario and seed give the same report, byte for byte;
/// the text report says the same as the JSON.
#[test]
fn the_same_seed_gives_the_same_report() {
    let f = folder();
    let args = ["simulate", "app.jadpo", "--scenario", "outage.toml", "--seed", "42"];
    let first = f.run(&args).expect(0, None).stdout();
    let second = f.run(&args).expect(0, None).stdout();
    assert_eq!(first, second);
    assert!(first.starts_with("Simulated "), "{first}");
    assert!(
        first.contains("record_payment: 3600 deliveries: 3600 delivered"),
        "{first}"
    );
    assert!(first.contains("payments: breaker opened 1"), "{first}");
    assert!(first.contains("Backlog per minute"), "{first}");
}

/// `--compare`: two apps on one scenario and seed. With one attempt, what
/// ran while the provider was down failed for good; with the default
/// budget, nothing failed.
#[test]
fn compare_runs_two_apps_on_the_same_scenario() {
    let f = folder();
    let run = f.run(&[
        "simulate",
        "app.jadpo",
        "--scenario",
        "outage.toml",
        "--compare",
        "one.jadpo",
        "--json",
    ]);
    let both = run.expect(0, None).json();
    let both = both.as_array().unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(
        (both[0]["app"].as_str(), both[1]["app"].as_str()),
        (Some("app.jadpo"), Some("one.jadpo"))
    );
    let failed = |r: &serde_json::Value| -> u64 {
        r["subscribers"][0]["failed"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum()
    };
    assert_eq!(failed(&both[0]), 0);
    assert!(
        failed(&both[1]) >= 5,
        "the calls that opened the breaker failed: {}",
        both[1]
    );
    let text = f
        .run(&[
            "simulate",
            "app.jadpo",
            "--scenario",
            "outage.toml",
            "--compare",
            "one.jadpo",
        ])
        .expect(0, None)
        .stdout();
    assert!(text.contains("== app.jadpo") && text.contains("== one.jadpo"), "{text}");
}

/// A process that crashes mid-traffic (`[[crash]]`) loses its runs; they
/// run again once their leases end, and every payment is still delivered.
#[test]
fn a_crashed_process_loses_no_delivery() {
    let f = folder();
    f.write(
        "crash.toml",
        &format!("processes = 2\n{OUTAGE}\n[[crash]]\nat = \"10m\"\nprocess = 2\nback_after = \"1m\"\n"),
    );
    let report = f
        .run(&["simulate", "app.jadpo", "--scenario", "crash.toml", "--json"])
        .expect(0, None)
        .json();
    assert_eq!(report["process_crashes"], 1, "{report:#}");
    let sub = &report["subscribers"][0];
    assert_eq!(
        (sub["delivered"].as_u64(), sub["unfinished"].as_u64()),
        (Some(3600), Some(0)),
        "{sub}"
    );
}

/// A scenario with errors: every one printed with its code and place, exit
/// 1; a scenario that cannot be read, exit 2.
#[test]
fn a_scenarios_errors_are_printed_with_their_codes() {
    let f = folder();
    f.write(
        "bad.toml",
        "[[traffic]]\nevent = \"Refund\"\ncount = 5\n\n[[connections.payments]]\nfrom = \"0s\"\nstate = \"sideways\"\n",
    );
    let run = f.run(&["simulate", "app.jadpo", "--scenario", "bad.toml"]);
    run.expect(1, None);
    let err = run.stderr();
    assert!(
        err.contains("error[scenario.event_unknown]: the app has no event `Refund`"),
        "{err}"
    );
    assert!(err.contains("--> bad.toml:2:9"), "{err}");
    assert!(err.contains("error[scenario.state_invalid]"), "{err}");
    assert!(err.contains("bad.toml: 2 errors"), "{err}");
    assert!(run.stdout().is_empty());

    let run = f.run(&["simulate", "app.jadpo", "--scenario", "missing.toml"]);
    run.expect(2, None);
    assert!(run.stderr().contains("error[scenario.unreadable]"), "{}", run.stderr());
}
