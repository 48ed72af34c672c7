//! The two worked examples of docs/simulate.md, run from
//! `examples/simulate/` as the page writes them: the figures the page
//! quotes and reads a lesson from.

mod common;

use common::Folder;
use serde_json::Value;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/simulate");

fn compare(app: &str, scenario: &str, other: &str) -> Vec<Value> {
    let f = Folder::empty();
    let path = |name: &str| format!("{EXAMPLES}/{name}");
    let run = f.run(&[
        "simulate",
        &path(app),
        "--scenario",
        &path(scenario),
        "--compare",
        &path(other),
        "--json",
    ]);
    run.expect(0, None).json().as_array().unwrap().clone()
}

fn subscriber<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["subscribers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no subscriber {name}: {report:#}"))
}

/// "A provider outage": the hang parks 44 payments sent without an
/// idempotency key, and none sent with one; 42 calls reached the provider
/// while it hung; it answered again at 1h30m and the breaker let the
/// payments go about six minutes later.
#[test]
fn a_hang_parks_the_payments_sent_without_a_key() {
    let both = compare("app.jadpo", "hang.toml", "app-no-key.jadpo");
    let (keyed, unkeyed) = (
        subscriber(&both[0], "record_payment_webhook"),
        subscriber(&both[1], "record_payment_webhook"),
    );
    assert_eq!(
        (keyed["delivered"].as_u64(), keyed["parked"].clone()),
        (Some(36000), serde_json::json!({}))
    );
    assert_eq!(keyed["attempts"]["2"], 42, "{keyed}");
    assert_eq!(unkeyed["delivered"], 35956, "{unkeyed}");
    assert_eq!(unkeyed["parked"], serde_json::json!({"http.timeout": 44}));
    let payments = &both[0]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "payments")
        .unwrap()
        .clone();
    assert_eq!(payments["phases"][1]["sends"], 42, "{payments}");
    assert_eq!(
        (payments["breaker_openings"].as_u64(), payments["probes"].as_u64()),
        (Some(1), Some(6))
    );
    let open_s = payments["open_ms"].as_u64().unwrap() / 1000;
    assert_eq!(open_s, 35 * 60 + 56, "open for 35m56s: {payments}");
}

/// "A rate-limited provider after a backlog": with `within: 1h`, 31,110
/// customers run out of budget waiting in the rate's queue, never tried;
/// with `within: 3h`, all are delivered, the last after 1h23m.
#[test]
fn a_backlog_behind_a_rate_outlasts_a_short_budget() {
    let both = compare("import.jadpo", "import.toml", "import-3h.jadpo");
    let (short, long) = (
        subscriber(&both[0], "sync_customer"),
        subscriber(&both[1], "sync_customer"),
    );
    assert_eq!(short["deliveries"], 128800);
    assert_eq!(
        short["failed"],
        serde_json::json!({"run.deadline_exceeded": 31110}),
        "{short}"
    );
    assert_eq!(
        (short["expired_unrun"].as_u64(), short["attempts"]["0"].as_u64()),
        (Some(31110), Some(31110))
    );
    assert_eq!(
        (long["delivered"].as_u64(), long["failed"].clone()),
        (Some(128800), serde_json::json!({}))
    );
    let max = long["to_success_ms"]["max"].as_u64().unwrap();
    assert_eq!(max / 60_000, 83, "the last delivered after 1h23m: {long}");
}
