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

/// A connection's `retry:` resends a failed call after a jittered wait
/// within the run: the waits come from the scenario's seed too, so a
/// provider that fails a share of calls gives the same report twice (the
/// waits were once drawn at random, and the reports differed).
#[test]
fn the_same_seed_gives_the_same_report_when_calls_are_resent() {
    let f = Folder::empty();
    f.write(
        "app.jadpo",
        &APP.replace("timeout: 5s", "timeout: 5s  retry: { attempts: 3 }"),
    );
    f.write(
        "flaky.toml",
        r#"
[[traffic]]
event = "Paid"
rate = "60/min"
for = "1h"

[[connections.payments]]
from = "0s"
state = "up"
latency = "50ms..150ms"
fail = { "503" = 0.3 }
"#,
    );
    let args = [
        "simulate",
        "app.jadpo",
        "--scenario",
        "flaky.toml",
        "--seed",
        "7",
        "--json",
    ];
    let first = f.run(&args).expect(0, None).stdout();
    let second = f.run(&args).expect(0, None).stdout();
    assert_eq!(first, second);
    let report: serde_json::Value = serde_json::from_str(&first).unwrap();
    let payments = &report["connections"][0];
    let sends = payments["phases"][0]["sends"].as_u64().unwrap();
    assert!(
        sends > 4000,
        "failed calls were resent: {sends} sends for 3600 deliveries"
    );
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

/// The app with a schedule that reconciles with the provider every 7
/// minutes and emits an event after each success; `ledger` answers it.
const WITH_SCHEDULE: &str = r#"
event Paid { id: string  amount: int }
event Reconciled { run: string }
connection payments { base_url: env("PAYMENTS_URL")  timeout: 5s }
connection ledger { base_url: env("LEDGER_URL")  timeout: 10s }
action record(id: string) {
    call payments.post("/payments/{id}", body: event, idempotency_key: id)
}
action reconcile() {
    call payments.post("/reconcile")
    call ledger.post("/reconcile")
    emit Reconciled(run: "r")
}
action note(run: string) {
    call ledger.post("/notes/{run}")
}
subscriber record_payment { on: Paid  run: record(event.id) }
subscriber note_reconciled { on: Reconciled  run: note(event.run) }
schedule reconcile { every: 7m  run: reconcile() }
"#;

/// The ledger takes 5 to 6 seconds to answer.
const LEDGER: &str = r#"
[[connections.ledger]]
from = "0s"
state = "up"
latency = "5s..6s"
"#;

/// A schedule runs on its trigger while the traffic lasts: its runs while
/// the provider is down fail (three in a row raise its alert, once), the
/// others succeed and their emits are delivered; it does not keep an
/// otherwise finished run going.
#[test]
fn an_apps_schedule_runs_on_its_trigger_through_the_outage() {
    let f = folder();
    f.write("sched.jadpo", WITH_SCHEDULE);
    f.write("sched.toml", &format!("{OUTAGE}\n{LEDGER}"));
    let run = f.run(&["simulate", "sched.jadpo", "--scenario", "sched.toml", "--json"]);
    let report = run.expect(0, None).json();
    let reconcile = &report["schedules"][0];
    assert_eq!(reconcile["name"], "reconcile", "{report:#}");
    // Due at 7, 14, ... minutes while the deliveries last: the last
    // payment of the hour is delivered a little after 60m.
    let runs = reconcile["runs"].as_u64().unwrap();
    assert!((8..=9).contains(&runs), "{reconcile}");
    // 21, 28 and 35 minutes fall in the outage (20m to 40m).
    assert_eq!(reconcile["failed"], serde_json::json!({"http.503": 3}), "{reconcile}");
    assert_eq!(reconcile["succeeded"].as_u64().unwrap(), runs - 3, "{reconcile}");
    assert_eq!(reconcile["alerts"], 1, "{reconcile}");
    assert_eq!(reconcile["emitted"].as_u64().unwrap(), runs - 3, "{reconcile}");
    let noted = report["subscribers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "note_reconciled")
        .unwrap();
    assert_eq!(noted["delivered"].as_u64().unwrap(), runs - 3, "{noted}");
    let text = f
        .run(&["simulate", "sched.jadpo", "--scenario", "sched.toml"])
        .expect(0, None)
        .stdout();
    assert!(
        text.contains(&format!(
            "reconcile: {runs} runs: {} succeeded, 3 (http.503 3) failed, alerts 1",
            runs - 3
        )),
        "{text}"
    );
}

/// With an `until`, schedules run to it; a run lost with its process is
/// claimed again once its lease has ended, and counts as
/// `run.lease_expired`.
#[test]
fn a_schedule_runs_to_until_and_a_run_lost_in_a_crash_is_claimed_again() {
    let f = folder();
    f.write("sched.jadpo", WITH_SCHEDULE);
    // The run at 7m calls the ledger from about 7m00.1s to 7m05s; the
    // process dies at 7m02s and comes back a minute later.
    f.write(
        "sched.toml",
        &format!("until = \"3h\"\n{OUTAGE}\n{LEDGER}\n[[crash]]\nat = \"422s\"\nprocess = 1\nback_after = \"1m\"\n"),
    );
    let report = f
        .run(&["simulate", "sched.jadpo", "--scenario", "sched.toml", "--json"])
        .expect(0, None)
        .json();
    let reconcile = &report["schedules"][0];
    // 7m (lost), taken over at 8m03s, then every 7 minutes from 8m03s
    // (the rhythm keeps its phase from the run it stands for: 14m, 21m, ...
    // up to 2h55m): 1 + 1 + 24.
    assert_eq!(reconcile["failed"]["run.lease_expired"], 1, "{reconcile}");
    assert_eq!(reconcile["runs"], 26, "{reconcile}");
    assert!(report["simulated_ms"].as_u64().unwrap() >= 175 * 60_000, "{report:#}");

    // A cron schedule counts from midnight UTC, the scenario's start: at
    // 3h, 27h and 51h of a scenario of two and a half days.
    f.write("cron.jadpo", &WITH_SCHEDULE.replace("every: 7m", "cron: \"0 3 * * *\""));
    f.write("cron.toml", &format!("until = \"60h\"\n{OUTAGE}\n{LEDGER}"));
    let report = f
        .run(&["simulate", "cron.jadpo", "--scenario", "cron.toml", "--json"])
        .expect(0, None)
        .json();
    assert_eq!(report["schedules"][0]["succeeded"], 3, "{report:#}");
}
