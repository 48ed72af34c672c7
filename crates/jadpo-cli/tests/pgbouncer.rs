//! `jadpo serve` and `jadpo dev` through PgBouncer, the way a managed
//! PostgreSQL often sits.
//!
//! In session mode: two `serve` processes on one database through the
//! pooler deliver every event once, and their listeners hear emits through
//! it; the crash test (`support/crash_pg.rs`: three `dev` processes killed,
//! stalled and cut off) delivers everything through it. In transaction
//! mode a start is refused with `store.transaction_pooling`, before
//! anything is written (docs/decisions.md, "PgBouncer").
//!
//! PgBouncer refuses the startup parameter `options`, so each test's store
//! is a fresh database of its own (its `public` schema), not a schema
//! named in the URL.

#[path = "support/crash.rs"]
mod crash;
#[path = "support/crash_pg.rs"]
mod crash_pg;
#[path = "support/serve.rs"]
mod serve;

use jadpo_runtime::provider::TestProvider;
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::StoreError;
use jadpo_testing::pgbouncer::PgBouncer;
use jadpo_testing::wait;
use serve::Serve;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const APP: &str = r#"
event Ping { id: string }
connection echo { base_url: "PROVIDER" }
action forward(id: string) { call echo.post("/ping/{id}", body: event) }
subscriber forward_ping { on: Ping  run: forward(event.id) }
"#;

const N: usize = 200;

/// The shared server's host and port, from its URL
/// (`postgres://user@host:port/db`).
fn server() -> (String, u16) {
    let url = jadpo_store::postgres::testing::url();
    let authority = url.split("://").nth(1).unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = host_port.split(['/', '?']).next().unwrap_or_default();
    match host_port.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().expect("a port")),
        None => (host_port.to_owned(), 5432),
    }
}

/// A database of the test's own on the shared server, named after a fresh
/// test schema (`jadpo_pgb_<schema>`), with PgBouncer in `pool_mode` in
/// front of it. Dropped, it stops PgBouncer and drops the database.
struct Pooled {
    /// Always there until dropped: stopped before the database is.
    bouncer: Option<PgBouncer>,
    db: String,
    schema: Arc<TestSchema>,
}

impl Pooled {
    /// `None` after the skip rule when PostgreSQL or PgBouncer is missing.
    fn start(rt: &tokio::runtime::Runtime, pool_mode: &str) -> Option<Pooled> {
        // Fails under CI (skips loudly elsewhere) when the server is down.
        let schema = rt.block_on(TestSchema::create())?;
        let db = format!("jadpo_pgb_{}", schema.name());
        let admin = rt.block_on(schema.client());
        rt.block_on(admin.batch_execute(&format!("CREATE DATABASE {db}")))
            .unwrap();
        let (host, port) = server();
        let pooled = Pooled {
            bouncer: Some(PgBouncer::start(&host, port, pool_mode)?),
            db,
            schema,
        };
        Some(pooled)
    }

    /// The database through PgBouncer.
    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{}", self.bouncer().port(), self.db)
    }

    fn bouncer(&self) -> &PgBouncer {
        self.bouncer.as_ref().expect("running until dropped")
    }

    /// A store on the database reached directly, not through PgBouncer,
    /// neither checked nor migrated: to look at the rows.
    fn direct(&self) -> PgStore {
        let server = self.schema.url();
        let base = server.split('?').next().unwrap_or_default();
        let at = base.rfind('/').expect("a database in the URL");
        PgStore::lazy(&format!("{}/{}", &base[..at], self.db), Options::default()).unwrap()
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        drop(self.bouncer.take());
        let (url, db) = (self.schema.url().to_owned(), self.db.clone());
        // From a thread of its own: the test's runtime may be the one this
        // runs on, and a destructor cannot await.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let store = PgStore::lazy(&url, Options::default()).ok()?;
                let admin = store.connection().await.ok()?;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                    .await
                    .ok()
            })
        });
        let _ = dropped.join();
    }
}

#[test]
fn two_serve_processes_through_pgbouncer_in_session_mode_deliver_every_event_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pooled) = Pooled::start(&rt, "session") else {
        return;
    };
    let provider = rt.block_on(TestProvider::start());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PROVIDER", &provider.url())).unwrap();
    let url = pooled.url();
    // Each waits until its listener listens through the pooler.
    let a = Serve::start(dir.path(), &url, &[]);
    let b = Serve::start(dir.path(), &url, &[]);
    for i in 0..N {
        let body = format!(r#"{{"id":"p{i}"}}"#);
        let through = if i % 2 == 0 { &a } else { &b };
        assert_eq!(through.http("POST", "/events/Ping", Some(&body)).0, 202);
    }
    wait::until("every event delivered", || provider.calls() >= N as u64);
    let (status_a, log_a) = a.terminate();
    let (status_b, log_b) = b.terminate();
    assert!(status_a.success() && status_b.success(), "{log_a}\n{log_b}");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in provider.requests() {
        *seen.entry(r.path).or_default() += 1;
    }
    assert_eq!(seen.len(), N, "every event reached the provider");
    assert!(seen.values().all(|n| *n == 1), "each exactly once: {seen:?}");
    let log = pooled.bouncer().log_text();
    assert!(!log.contains("unsupported startup parameter"), "{log}");
}

#[test]
fn the_crash_test_passes_through_pgbouncer_in_session_mode() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pooled) = Pooled::start(&rt, "session") else {
        return;
    };
    // The proxy sits between one process and PgBouncer: its cut drops that
    // process's client connections, and PgBouncer its server sessions.
    crash_pg::run(&rt, &pooled.url(), &pooled.direct());
}

#[test]
fn a_start_through_pgbouncer_in_transaction_mode_is_refused_before_anything_is_written() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pooled) = Pooled::start(&rt, "transaction") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("app.jadpo"),
        APP.replace("PROVIDER", "http://127.0.0.1:9"),
    )
    .unwrap();
    let url = pooled.url();
    let began = Instant::now();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_jadpo"))
        .current_dir(dir.path())
        .env_remove("JADPO_STORE")
        .env_remove("RUST_LOG")
        .env("JADPO_API_TOKEN", serve::TOKEN)
        .args(["serve", "--store", &url, "--bind", "127.0.0.1", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jadpo runs");
    // The embedded API's store, meanwhile: the same check, the same error.
    let embedded = rt.block_on(PgStore::connect(&url, Options::default()));
    // A start let through would serve until stopped.
    while serve.try_wait().unwrap().is_none() && began.elapsed() < wait::CEILING {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = serve.kill();
    let out = serve.wait_with_output().unwrap();
    let took = began.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "serve through transaction pooling:\n{stderr}"
    );
    assert!(stderr.contains("error[store.transaction_pooling]"), "{stderr}");
    assert!(
        stderr.contains("PgBouncer in session mode (`pool_mode = session`)") && stderr.contains("PostgreSQL directly"),
        "the message names the fix: {stderr}"
    );
    assert!(!stderr.contains("api.listening"), "{stderr}");
    match embedded {
        Err(StoreError::TransactionPooling(why)) => assert!(why.contains("pool_mode = session"), "{why}"),
        Err(other) => panic!("the embedded store failed otherwise: {other}"),
        Ok(_) => panic!("the embedded store opened through transaction pooling"),
    }
    // Nothing written: not even the migrations' tables.
    let direct = pooled.direct();
    let conn = rt.block_on(direct.connection()).unwrap();
    let tables: i64 = rt
        .block_on(conn.query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
            &[],
        ))
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "tables were made through transaction pooling");
    eprintln!("refused in {:.1}s", took.as_secs_f64());
}
