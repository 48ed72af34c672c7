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

/// `--keys N`: every delivery keyed, event `i` with key `i mod N`.
#[test]
fn bench_keys_its_deliveries_over_n_keys() {
    let f = Folder::empty();
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    let run = f.run(&[
        "bench", "--store", &url, "--events", "30", "--keys", "7", "--json", "--keep",
    ]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_eq!(
        (v["keys"].as_u64(), v["counts"]["succeeded"].as_u64()),
        (Some(7), Some(30))
    );
    let kept = v["store_url"].as_str().unwrap();
    let of_key = f.run(&["deliveries", "--store", kept, "--key", "3", "--json"]).json();
    // Events 3, 10, 17, 24.
    assert_eq!(of_key.as_array().unwrap().len(), 4, "{of_key:#}");
}

/// `--order fifo`: the keys' deliveries run one at a time each, and all
/// of them run; the JSON says the rule.
#[test]
fn bench_orders_each_keys_deliveries() {
    let f = Folder::empty();
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    for (flag, value, order) in [("--order", "fifo", "fifo"), ("--concurrency-per-key", "2", "cap:2")] {
        let run = f.run(&[
            "bench", "--store", &url, "--events", "40", "--keys", "3", flag, value, "--json",
        ]);
        run.expect(0, None);
        let v = last_json(&run);
        assert_eq!(
            (v["order"].as_str(), v["counts"]["succeeded"].as_u64()),
            (Some(order), Some(40))
        );
    }
}

/// `--hot-key`: one key's backlog, emitted first, and one delivery on each
/// other key; the report says when every other key's delivery had started,
/// and the backlog is left behind its head, queued, not drained.
#[test]
fn bench_times_other_keys_behind_a_hot_keys_backlog() {
    let f = Folder::empty();
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    let run = f.run(&[
        "bench",
        "--store",
        &url,
        "--events",
        "500",
        "--keys",
        "11",
        "--order",
        "fifo",
        "--hot-key",
        "--json",
    ]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_eq!(v["hot_key"], true);
    let took = v["others_started_ms"]
        .as_f64()
        .expect("the time until the others started");
    assert!(took > 0.0, "{v}");
    let succeeded = v["counts"]["succeeded"].as_u64().unwrap_or(0);
    assert!(succeeded >= 10, "the ten other keys' deliveries ran: {v}");
    assert!(
        v["counts"]["queued"].as_u64().unwrap_or(0) > 0,
        "the backlog waits behind its head: {v}"
    );
    let human = f.run(&[
        "bench",
        "--store",
        &url,
        "--events",
        "50",
        "--keys",
        "3",
        "--order",
        "fifo",
        "--hot-key",
    ]);
    assert!(
        human
            .expect(0, None)
            .stdout()
            .contains("other keys' deliveries started"),
        "{}",
        human.stdout()
    );
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

/// Each broker on this machine (docs/app-file.md, "Connections to a
/// broker"): every delivery published with its confirmation, and a plain
/// client loop to the same broker to compare.
#[test]
fn bench_publishing_to_each_broker_compares_with_a_plain_client_loop() {
    let f = Folder::empty();
    let url = format!("sqlite:{}", f.path().join("jadpo.db").display());
    for driver in ["redis", "nats", "amqp", "mqtt"] {
        let run = f.run(&[
            "bench", "--store", &url, "--driver", driver, "--events", "300", "--json",
        ]);
        run.expect(0, None);
        let v = last_json(&run);
        assert_eq!(v["subscriber"], "publish", "{driver}");
        assert_eq!(v["driver"], driver);
        assert_eq!(v["counts"]["succeeded"], 300, "{driver}: {v:#}");
        assert!(v["broker_baseline_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v:#}");
        assert!(v["broker_ratio"].as_f64().is_some_and(|r| r > 0.0), "{v:#}");
        assert!(v["http_ratio"].is_null());
    }
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
        (vec!["bench", "--driver", "kafka"], "bench.driver_invalid"),
        (vec!["bench", "--store", "mysql://h/db"], "store.url_invalid"),
        (
            vec!["bench", "--rate", "5/s", "--duration", "5s"],
            "bench.duration_invalid",
        ),
        (
            vec!["bench", "--rate", "1000000/s", "--duration", "24h"],
            "bench.duration_invalid",
        ),
        (
            vec!["bench", "--rate", "5/s", "--duration", "1m", "--report-every", "0s"],
            "bench.report_every_invalid",
        ),
        (vec!["bench", "--retention", "soon"], "bench.retention_invalid"),
        (vec!["bench", "--keys", "0"], "bench.keys_invalid"),
        (vec!["bench", "--keys", "1000001"], "bench.keys_invalid"),
        (vec!["bench", "--keys", "5", "--order", "lifo"], "bench.order_invalid"),
        (
            vec!["bench", "--keys", "5", "--concurrency-per-key", "0"],
            "bench.order_invalid",
        ),
        (vec!["bench", "--keys", "1", "--hot-key"], "bench.hot_key_invalid"),
        (
            vec!["bench", "--events", "5", "--keys", "6", "--hot-key"],
            "bench.hot_key_invalid",
        ),
        (
            vec!["bench", "--keys", "5", "--hot-key", "--rate", "100/s"],
            "bench.hot_key_invalid",
        ),
    ] {
        let run = f.run(&args);
        run.expect(2, Some(code));
        assert!(run.stdout().is_empty(), "{args:?}: {}", run.stdout());
    }
    // Flags that don't go together are clap's own usage errors.
    for args in [
        vec!["bench", "--backlog", "--rate", "5/s"],
        vec!["bench", "--latency", "5ms"],
        vec!["bench", "--duration", "1m"],
        vec!["bench", "--rate", "5/s", "--duration", "1m", "--events", "10"],
        vec!["bench", "--report-every", "1s"],
        vec!["bench", "--order", "fifo"],
        vec!["bench", "--driver", "nats", "--http"],
        vec!["bench", "--broker-url", "nats://127.0.0.1:4222"],
        vec!["bench", "--keys", "5", "--order", "fifo", "--concurrency-per-key", "2"],
    ] {
        assert_eq!(f.run(&args).code(), 2, "{args:?}");
    }
    let left: Vec<_> = std::fs::read_dir(f.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");
}

/// A soak: events at a rate for a duration, retention pruning behind the
/// drain, one report a second (a JSON line each), and the summary last.
/// Only the shape and what must hold whatever the machine are asserted:
/// every delivery finished, and rows older than the retention were pruned.
fn soak_on(url: &str, store: &str) {
    let f = Folder::empty();
    let run = f.run(&[
        "bench",
        "--store",
        url,
        "--rate",
        "500/s",
        "--duration",
        "14s",
        "--report-every",
        "1s",
        "--retention",
        "2s",
        "--json",
    ]);
    run.expect(0, None);
    let v = last_json(&run);
    assert_eq!(v["events"], 7_000, "{v:#}");
    assert_eq!(v["store"], store);
    assert_eq!(v["duration_seconds"], 14.0);
    assert_eq!(v["retention_seconds"], 2.0);
    assert_eq!(v["seen_finished"], 7_000, "{v:#}");
    let intervals = v["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 13, "one a second: {v:#}");
    let stdout = run.stdout();
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("interval").is_some())
        .collect();
    assert!(&lines == intervals, "each interval was printed as it came:\n{stdout}");
    let sum = |field: &str| intervals.iter().map(|i| i[field].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("emitted"), 7_000);
    assert_eq!(sum("finished"), 7_000);
    for (k, i) in intervals.iter().enumerate() {
        assert_eq!(i["interval"], k as u64 + 1);
        assert!(i["tables"]["jadpo_deliveries"]["live_rows"].is_u64(), "{i:#}");
    }
    // The tick prunes every 10 s of engine time once it keeps up: by the
    // end some of the first seconds' deliveries are gone.
    let last = intervals.last().unwrap();
    assert!(
        last["finished_rows"].as_u64().unwrap() < 7_000,
        "retention pruned nothing: {last:#}"
    );
    match store {
        "sqlite" => assert!(last["file_bytes"].as_u64().is_some_and(|b| b > 0), "{last:#}"),
        _ => assert!(last["table_bytes"].as_u64().is_some_and(|b| b > 0), "{last:#}"),
    }
}

#[test]
fn a_soak_on_sqlite_reports_each_interval_and_prunes_behind_the_drain() {
    let f = Folder::empty();
    soak_on(&format!("sqlite:{}", f.path().join("jadpo.db").display()), "sqlite");
}

#[test]
fn a_soak_on_postgres_reports_each_interval_and_prunes_behind_the_drain() {
    let Some(_reachable) = block_on(TestSchema::create()) else {
        return;
    };
    soak_on(&testing::url(), "postgres");
}
