//! The operator commands on PostgreSQL, run as the real binary, each test
//! in a fresh schema of its own. Skipped (loudly) when PostgreSQL is not
//! reachable, except under `CI=true` (see `jadpo_store::postgres::testing`).

mod common;
#[path = "support/serve.rs"]
mod serve;

use common::{block_on, by_id, Folder};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::Options;

/// The schema and a URL the binary reaches it with: its `search_path` set
/// through the URL's `options`.
fn schema() -> Option<(std::sync::Arc<TestSchema>, String, common::Seeded)> {
    block_on(async {
        let schema = TestSchema::create().await?;
        let store = schema.store(Options::default()).await;
        let seeded = common::seed(&store).await;
        let url = schema.url_with_search_path();
        Some((schema, url, seeded))
    })
}

#[test]
fn every_operator_command_works_on_postgres() {
    let Some((_schema, url, s)) = schema() else { return };
    let f = Folder::with_app();
    let run = f.run(&["migrate", "--store", &url]);
    assert!(run.expect(0, None).stdout().contains("PostgreSQL"), "{}", run.stdout());

    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    assert_eq!(list.as_array().unwrap().len(), 10);
    let held = by_id(&list, s.held);
    assert_eq!(held["state"], "held");
    assert_eq!(held["held_connection"], "payments");
    assert_eq!(by_id(&list, s.failed)["last_failure_kind"], "rejected");
    let held_only = f
        .run(&["deliveries", "--store", &url, "--json", "--state", "held"])
        .json();
    assert_eq!(held_only.as_array().unwrap().len(), 1);

    let one = f
        .run(&["deliveries", "show", &s.failed.0.to_string(), "--store", &url, "--json"])
        .json();
    assert_eq!(one["history"][0]["code"], "http.400");

    let breakers = f.run(&["breakers", "--store", &url, "--json"]).json();
    let payments = breakers
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["connection"] == "payments")
        .unwrap();
    assert_eq!(payments["state"], "open");
    assert_eq!(payments["held"], 1);

    let run = f.run(&["retry", "--state", "failed", "--store", &url, "--json"]);
    assert_eq!(run.expect(0, None).json()["retried"], serde_json::json!([s.failed.0]));

    let out = f
        .run(&["emit", "Ping", r#"{"id": "z"}"#, "--store", &url, "--json"])
        .json();
    assert_eq!(out["deliveries"], 1);
    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    assert_eq!(list.as_array().unwrap().len(), 11);
}

/// The test server's URL with a password in its userinfo (holding `/` and
/// `?`, percent-encoded) and in `?password=`, and the schema's
/// `search_path`: the server trusts the test user, so it still connects.
/// `None` when the URL has a password of its own already.
fn with_passwords(schema: &jadpo_store::postgres::testing::TestSchema) -> Option<String> {
    let (scheme, rest) = schema.url().split_once("://")?;
    let (user, rest) = rest.split_once('@')?;
    if user.contains(':') || rest.to_lowercase().contains("password") {
        return None;
    }
    let sep = if rest.contains('?') { '&' } else { '?' };
    Some(format!(
        "{scheme}://{user}:hunter2%2Fx%3Fy@{rest}{sep}password=hunter2&options=-c%20search_path%3D{}",
        schema.name()
    ))
}

#[test]
fn serve_started_and_migrate_never_show_the_password() {
    let Some((schema, _, _)) = schema() else { return };
    let Some(url) = with_passwords(&schema) else {
        eprintln!("skipped: the test server's URL has a password of its own");
        return;
    };
    let f = Folder::empty();
    f.write("app.jadpo", "event Ping { id: string }\n");

    let s = serve::Serve::start(f.path(), &url, &[]);
    let started = s.events("serve.started");
    assert_eq!(started.len(), 1, "{}", s.log_text());
    let store = started[0]["store"].as_str().unwrap_or_default().to_owned();
    assert!(store.contains(":***@") && store.contains("password=***"), "{store}");
    let (status, logs) = s.terminate();
    assert!(status.success(), "{logs}");
    assert!(!logs.contains("hunter2"), "{logs}");

    let run = f.run(&["migrate", "--store", &url]);
    let out = run.expect(0, None).stdout();
    assert!(out.contains("PostgreSQL store") && out.contains(":***@"), "{out}");
    assert!(out.contains("password=***"), "{out}");
    assert!(!out.contains("hunter2") && !run.stderr().contains("hunter2"), "{out}");
}

/// The shared server has `ssl = on`: `sslmode=require` connects over TLS
/// (it answered "no TLS implementation configured" before), and a mode
/// libpq does not know is the URL's error, said before connecting.
#[test]
fn a_url_with_sslmode_require_connects_over_tls() {
    let Some((_schema, url, _)) = schema() else { return };
    let f = Folder::with_app();
    let list = f
        .run(&["deliveries", "--store", &format!("{url}&sslmode=require"), "--json"])
        .json();
    assert_eq!(list.as_array().unwrap().len(), 10);
    f.run(&["deliveries", "--store", &format!("{url}&sslmode=verify")])
        .expect(2, Some("store.url_invalid"));
}
