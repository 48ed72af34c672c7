//! `jadpo bench` as the real binary: on SQLite, on PostgreSQL (a fresh
//! schema; under `CI=true` an unreachable server fails the test), with the
//! HTTP sink, and its refusals. No timing is asserted: only that every
//! delivery went through and the report has its fields.

mod common;

use common::{block_on, Folder};
use jadpo_store::postgres::testing::{self, TestSchema};
use serde_json::Value;

/// The JSON object on the last line of stdout.
fn last_json(run: &common::Run) -> Value {
    let stdout = run.stdout();
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {stdout}\n{}", run.stderr()))
}

#[track_caller]
fn assert_report(v: &Value, events: u64) {
    assert_eq!(v["events"], events, "{v:#}");
    assert_eq!(v["concurrency"], 24, "{v:#}");
    assert_eq!(v["mode"], "backlog");
    for field in ["emit_per_s", "drain_per_s", "p50_ms", "p99_ms"] {
        assert!(v[field].as_f64().is_some_and(|x| x >= 0.0), "{field}: {v:#}");
    }
    assert!(v["emit_per_s"].as_f64().unwrap() > 0.0 && v["drain_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["p50_ms"].as_f64() <= v["p99_ms"].as_f64(), "{v:#}");
    assert!(v["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0), "{v:#}");
    // Every delivery succeeded, and nothing else is in the store.
    assert_eq!(v["counts"], serde_json::json!({ "succeeded": events }), "{v:#}");
    assert_eq!(v["kept"], false);
}

#[test]
fn bench_drains_a_backlog_on_sqlite_and_removes_its_file() {
    let f = Folder::empty();
    // The bench's file goes in a new folder beside the one named.
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    let run = f.run(&["bench", "--store", &url, "--events", "2000", "--json"]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_report(&v, 2000);
    assert_eq!(v["store"], "sqlite");
    assert_eq!(v["subscriber"], "noop");
    assert!(v["http_baseline_per_s"].is_null());
    let left: Vec<_> = std::fs::read_dir(f.path()).unwrap().collect();
    assert!(left.is_empty(), "the bench's folder is removed: {left:?}");
}

#[test]
fn bench_keeps_its_store_when_asked() {
    let f = Folder::empty();
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    let run = f.run(&[
        "bench", "--store", &url, "--events", "10", "--rate", "1000/s", "--keep", "--json",
    ]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_eq!(v["mode"], "rate");
    assert_eq!(v["rate_per_s"], 1000);
    assert_eq!(v["kept"], true);
    assert_eq!(v["counts"]["succeeded"], 10);
    // The kept store is one the other commands open.
    let kept = v["store_url"].as_str().unwrap();
    let list = f.run(&["deliveries", "--store", kept, "--json"]).json();
    assert_eq!(list.as_array().unwrap().len(), 10);
}

#[test]
fn bench_drains_a_backlog_on_postgres_in_a_schema_it_drops() {
    // Decides, as every PostgreSQL test does, between failing (CI=true) and
    // skipping loudly when the server is unreachable.
    let Some(_reachable) = block_on(TestSchema::create()) else {
        return;
    };
    let f = Folder::empty();
    let url = testing::url();
    let run = f.run(&["bench", "--store", &url, "--events", "2000", "--json"]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_report(&v, 2000);
    assert_eq!(v["store"], "postgres");
    let schema = v["schema"].as_str().unwrap().to_owned();
    assert!(schema.starts_with("jadpo_bench_"), "{schema}");
    let exists = block_on(jadpo_store::postgres::scratch::schema_exists(&url, &schema)).unwrap();
    assert!(!exists, "the bench's schema {schema} is dropped");
}

#[test]
fn bench_over_http_compares_with_a_plain_http_loop() {
    let f = Folder::empty();
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    let run = f.run(&["bench", "--store", &url, "--http", "--events", "500", "--json"]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_eq!(v["events"], 500);
    assert_eq!(v["subscriber"], "http");
    assert_eq!(v["http_latency_ms"], 0.0);
    assert_eq!(v["counts"]["succeeded"], 500);
    // Every delivery reached the sink over HTTP.
    assert!(v["sink_requests"].as_u64().is_some_and(|n| n >= 500), "{v:#}");
    assert!(v["http_baseline_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v:#}");
    assert!(v["http_ratio"].as_f64().is_some_and(|r| r > 0.0), "{v:#}");
}

#[test]
fn bad_bench_arguments_exit_2_with_their_code() {
    let f = Folder::empty();
    for (args, code) in [
        (vec!["bench", "--events", "0"], "bench.events_invalid"),
        (vec!["bench", "--rate", "0/s"], "bench.rate_invalid"),
        (vec!["bench", "--rate", "fast"], "bench.rate_invalid"),
        (vec!["bench", "--concurrency", "0"], "bench.concurrency_invalid"),
        (vec!["bench", "--http", "--latency", "1h"], "bench.latency_invalid"),
        (vec!["bench", "--store", "mysql://h/db"], "store.url_invalid"),
    ] {
        let run = f.run(&args);
        run.expect(2, Some(code));
        assert!(run.stdout().is_empty(), "{args:?}: {}", run.stdout());
    }
    // Flags that don't go together are clap's own usage errors.
    for args in [
        vec!["bench", "--backlog", "--rate", "5/s"],
        vec!["bench", "--latency", "5ms"],
    ] {
        assert_eq!(f.run(&args).code(), 2, "{args:?}");
    }
    let left: Vec<_> = std::fs::read_dir(f.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");
}
