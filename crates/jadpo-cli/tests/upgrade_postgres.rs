//! Upgrades without an outage, through real processes on PostgreSQL
//! (docs/deploy.md, "Upgrades"): a `jadpo serve` whose store a newer build
//! contracted past it says so once and stops claiming, and claims again
//! when the schema lets it; `jadpo migrate` refuses a contract that would
//! stop older processes until `--force`; a process refuses to start on a
//! schema it cannot run on. Each test has a schema of its own.

#[path = "support/process.rs"]
mod process;
#[path = "support/serve.rs"]
mod serve;

use jadpo_runtime::provider::TestProvider;
use jadpo_store::postgres::schema::{LATEST, MIGRATIONS};
use jadpo_store::postgres::testing::TestSchema;
use process::jadpo;
use serve::Serve;
use std::process::Output;

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "PAY_URL" }
action charge(id: string) { call pay.post("/charge/{id}", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;

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
