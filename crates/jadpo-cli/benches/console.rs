//! How long the console's pages take with a million deliveries in the
//! store: a real `jadpo serve` over a SQLite file and over PostgreSQL, each
//! filled with 1,000,000 deliveries (96% succeeded, 1% each failed, parked,
//! held behind an open breaker and due), an hour of the per-minute summary
//! and a few alerts; every page fetched over HTTP with its session cookie,
//! `JADPO_BENCH_SAMPLES` times (default 20), p50 and max printed.
//!
//! `cargo bench -p jadpo-cli --bench console` (`JADPO_BENCH_DELIVERIES=N`
//! to change the million). PostgreSQL is used when reachable
//! (`JADPO_TEST_POSTGRES_URL`); results in docs/performance.md.

#[path = "../tests/support/serve.rs"]
mod serve;

use jadpo_core::Timestamp;
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::{MinuteCount, NewEvent, Store};
use jadpo_testing::process::Logged;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "http://127.0.0.1:9" }
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;

/// Sets each delivery's state from its id; the due ones are due in a year
/// and the held ones sit behind an open breaker whose pause outlasts the
/// bench, so the server's workers change nothing while it runs.
fn states_sql(now: i64) -> String {
    let year = now + 365 * 24 * 3600 * 1000;
    format!(
        "UPDATE jadpo_deliveries SET state = 'succeeded', attempts = 1, finished_at = {now}, handled_at = {now}
             WHERE id % 100 < 96;
         UPDATE jadpo_deliveries SET state = 'failed', attempts = 1, finished_at = {now},
             last_failure_code = 'http.400', last_failure_kind = 'rejected' WHERE id % 100 = 96;
         UPDATE jadpo_deliveries SET state = 'parked', attempts = 1, finished_at = {now},
             last_failure_code = 'http.timeout', last_failure_kind = 'outcome_unknown' WHERE id % 100 = 97;
         UPDATE jadpo_deliveries SET state = 'held', held_connection = 'pay', held_since = {now}
             WHERE id % 100 = 98;
         UPDATE jadpo_deliveries SET due_at = {year} WHERE id % 100 = 99;
         INSERT INTO jadpo_circuit_breakers (connection, state, consecutive_unavailable, opened_at,
             outage_since, pause_ms, alert_raised, version)
             VALUES ('pay', 'open', 5, {now}, {now}, 600000, false, 1);"
    )
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

async fn fill<S: Store>(store: &S, n: usize) {
    let started = Instant::now();
    let now = Timestamp::from_millis(now_ms());
    let mut left = n;
    while left > 0 {
        let chunk = left.min(10_000);
        let events: Vec<NewEvent> = (0..chunk)
            .map(|i| NewEvent {
                name: "Paid".into(),
                payload: format!(r#"{{"id":"p{i}"}}"#),
                subscribers: vec!["charge".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect();
        store.emit(&events, now).await.unwrap();
        left -= chunk;
    }
    let mut counts = Vec::new();
    for m in 0..60u32 {
        let minute = now.minus(Duration::from_secs(60) * m);
        for (series, k) in [
            ("succeeded", 900),
            ("retried", 40),
            ("failed", 9),
            ("held", 30),
            ("calls:pay", 950),
        ] {
            counts.push(MinuteCount {
                minute,
                series: series.into(),
                n: k,
            });
        }
    }
    store
        .add_minutes(&counts, now.minus(Duration::from_secs(86_400)))
        .await
        .unwrap();
    eprintln!("filled {n} deliveries in {:.1?}", started.elapsed());
}

fn request(port: u16, method: &str, path: &str, cookie: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out)
}

fn sign_in(port: u16) -> String {
    let (status, out) = request(port, "POST", "/ui/login", "", &format!("token={}", serve::TOKEN));
    assert_eq!(status, 303, "{out}");
    let line = out
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a session cookie");
    line.split_once(':')
        .unwrap()
        .1
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// `jadpo serve` on `store` and port 0, once its API listens; the port it
/// chose.
fn start(dir: &std::path::Path, store: &str) -> (Logged, u16) {
    let mut child = Logged::spawn(
        Command::new(env!("CARGO_BIN_EXE_jadpo"))
            .current_dir(dir)
            .env_remove("JADPO_STORE")
            .env_remove("RUST_LOG")
            .env("JADPO_API_TOKEN", serve::TOKEN)
            .args([
                "serve",
                "--store",
                store,
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--workers",
                "1",
            ])
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    (child, port)
}

fn stop(child: Logged) {
    let _ = child.terminate();
}

fn measure(label: &str, port: u16, samples: usize) {
    let cookie = sign_in(port);
    let pages = [
        "/ui",
        "/ui/deliveries",
        "/ui/deliveries?state=failed",
        "/ui/deliveries?state=held&connection=pay",
        "/ui/deliveries?state=due",
        "/ui/deliveries?state=succeeded&before=500000",
        "/ui/deliveries?event=123456",
        "/ui/deliveries/500096",
        "/ui/breakers",
        "/ui/retry?preview=1&state=failed",
    ];
    println!("\n{label}: page, p50 ms, max ms ({samples} samples each)");
    for page in pages {
        let mut took: Vec<Duration> = Vec::with_capacity(samples);
        for _ in 0..samples {
            let start = Instant::now();
            let (status, out) = request(port, "GET", page, &cookie, "");
            took.push(start.elapsed());
            assert_eq!(status, 200, "{page}: {}", &out[..out.len().min(400)]);
        }
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{page:<48} {:>8.1} {:>8.1}",
            ms(took[samples / 2]),
            ms(took[samples - 1])
        );
    }
}

fn main() {
    let samples: usize = std::env::var("JADPO_BENCH_SAMPLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let n: usize = std::env::var("JADPO_BENCH_DELIVERIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP).unwrap();
    let only_sqlite = std::env::var("JADPO_BENCH_SQLITE_ONLY").is_ok();

    let db = dir.path().join("console.db");
    let url = format!("sqlite:{}", db.display());
    rt.block_on(async {
        let store = jadpo_store::sqlite::SqliteStore::open(&url).await.unwrap();
        fill(&store, n).await;
        let sql = states_sql(now_ms());
        store
            .transaction(move |tx| {
                tx.execute_batch(&sql)
                    .map_err(|e| jadpo_store::StoreError::Unavailable(e.to_string()))
            })
            .await
            .unwrap();
        store
            .transaction(|tx| {
                tx.execute_batch("ANALYZE")
                    .map_err(|e| jadpo_store::StoreError::Unavailable(e.to_string()))
            })
            .await
            .unwrap();
    });
    let (server, port) = start(dir.path(), &url);
    measure("SQLite", port, samples);
    stop(server);
    if let Ok(keep) = std::env::var("JADPO_BENCH_KEEP") {
        std::fs::copy(&db, &keep).unwrap();
    }

    if only_sqlite {
        return;
    }
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        eprintln!("PostgreSQL not reachable: measured SQLite only");
        return;
    };
    let pg_url = serve::url(&schema);
    rt.block_on(async {
        let store = schema.store(Default::default()).await;
        fill(&store, n).await;
        let client = schema.client().await;
        client.batch_execute(&states_sql(now_ms())).await.unwrap();
        client.batch_execute("VACUUM ANALYZE jadpo_deliveries").await.unwrap();
    });
    let (server, port) = start(dir.path(), &pg_url);
    measure("PostgreSQL", port, samples);
    stop(server);
}
