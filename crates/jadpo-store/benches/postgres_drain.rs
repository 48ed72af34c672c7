//! End-to-end drain on the PostgreSQL store: emit a backlog, then workers
//! claim batches of 1,000, run a no-op action and finish each batch in one
//! transaction. Each run gets a schema of its own on the test server
//! (`JADPO_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`).
//!
//! `cargo bench -p jadpo-store --bench postgres_drain` runs the 10,000
//! backlog with one and four workers (`JADPO_BENCH_SHAPES=all` for more
//! shapes). With `JADPO_BENCH_1M=1` it also runs the 1,000,000 one with the
//! first two shapes (about two minutes each, a fifth of it emitting); after
//! the first it drains 10,000 more on top of the million finished rows and
//! prints the claim's plan there. `JADPO_BENCH_BACKLOG=N` sets the first
//! backlog. Each backlog ends with the raw-SQL reference: the same tables
//! drained by hand-written SQL, one statement claiming 1,000 rows and one
//! fenced statement completing them, each committed, with no planner and no
//! attempt or handled rows.

mod common;

use common::{drain, drain_filled, fill, Drain};
use jadpo_core::Timestamp;
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{Options, PgStore};
use std::time::{Duration, Instant};

const RAW_CLAIM: &str = "
UPDATE jadpo_deliveries SET state = 'running', attempts = attempts + 1, lease_owner = 'raw',
    lease_token = lease_token + 1, lease_until = $1 + 60000, updated_at = $1
WHERE id = ANY (ARRAY(SELECT id FROM jadpo_deliveries WHERE state = 'due' AND due_at <= $1
                      ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING id, lease_token";

/// The fence is on the primary key's rows: `state = 'running'` inside a CASE
/// so the planner does not walk the lost-lease index instead.
const RAW_COMPLETE: &str = "
UPDATE jadpo_deliveries AS d SET state = 'succeeded', lease_owner = NULL, lease_until = NULL,
    finished_at = $1, updated_at = $1
FROM unnest($2::bigint[], $3::bigint[]) AS u(id, token)
WHERE d.id = u.id AND CASE WHEN d.state = 'running' THEN d.lease_token = u.token ELSE false END";

/// What the server did meanwhile: WAL written, and the CPU time of every
/// `postgres` process on this machine (backends, WAL writer, autovacuum),
/// read from `/proc`. Meaningful while nothing else uses the server.
struct Server {
    wal: i64,
    cpu: Option<Duration>,
}

async fn server(store: &PgStore) -> Server {
    let client = store.connection().await.expect("connection");
    let wal: i64 = client
        .query_one("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint", &[])
        .await
        .expect("wal position")
        .get(0);
    Server {
        wal,
        cpu: postgres_cpu(),
    }
}

fn postgres_cpu() -> Option<Duration> {
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let path = entry.path();
        if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == "postgres") {
            let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
                continue;
            };
            let Some(end) = stat.rfind(')') else { continue };
            let fields: Vec<&str> = stat[end + 2..].split_whitespace().collect();
            ticks += fields.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
                + fields.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    Some(Duration::from_millis(ticks * 10))
}

/// Server work per delivery between two readings: WAL bytes and CPU us.
fn per_delivery(a: &Server, b: &Server, n: usize) -> String {
    let cpu = a.cpu.zip(b.cpu).map_or("?".into(), |(a, b)| {
        format!("{:.1}", b.saturating_sub(a).as_secs_f64() * 1e6 / n as f64)
    });
    format!(
        "server: wal {:>5} B, cpu {cpu:>5} us /delivery",
        (b.wal - a.wal) / n as i64
    )
}

/// The reference the store is measured against, on one connection.
async fn raw_drain(store: &PgStore, batch: usize, now: i64) -> (usize, Duration) {
    let mut client = store.connection().await.expect("connection");
    let (claim, complete) = (
        client.prepare_cached(RAW_CLAIM).await.expect("prepare claim"),
        client.prepare_cached(RAW_COMPLETE).await.expect("prepare complete"),
    );
    let started = Instant::now();
    let mut drained = 0;
    loop {
        let tx = client.transaction().await.expect("begin");
        let rows = tx.query(&claim, &[&now, &(batch as i64)]).await.expect("claim");
        tx.commit().await.expect("commit claim");
        if rows.is_empty() {
            return (drained, started.elapsed());
        }
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let tokens: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
        let tx = client.transaction().await.expect("begin");
        drained += tx.execute(&complete, &[&now, &ids, &tokens]).await.expect("complete") as usize;
        tx.commit().await.expect("commit complete");
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut backlogs = vec![common::backlog()];
    if std::env::var_os("JADPO_BENCH_1M").is_some() {
        backlogs.push(1_000_000);
    }
    let shapes: &[(usize, usize)] = match std::env::var("JADPO_BENCH_SHAPES").ok().as_deref() {
        Some("all") => &[(1_000, 1), (1_000, 2), (1_000, 4), (100, 4), (5_000, 2)],
        _ => &[(1_000, 1), (1_000, 4)],
    };
    println!("PostgreSQL drain, {}", jadpo_store::postgres::testing::url());
    let now = Timestamp::from_millis(1_000);
    for &backlog in &backlogs {
        // At a million the first two shapes only: each refill takes minutes.
        let shapes = if backlog >= 1_000_000 {
            &shapes[..2.min(shapes.len())]
        } else {
            shapes
        };
        for (i, &(batch, workers)) in shapes.iter().enumerate() {
            rt.block_on(async {
                let Some(schema) = TestSchema::create().await else {
                    std::process::exit(0);
                };
                let options = Options {
                    pool_size: workers,
                    ..Options::default()
                };
                let store = schema.store(options).await;
                let d = Drain { backlog, batch, workers };
                let emit = fill(&store, backlog, now).await;
                let before = server(&store).await;
                let m = drain_filled(&store, &d, now, emit).await;
                let after = server(&store).await;
                assert_eq!(m.delivered, backlog, "every delivery drained");
                println!(
                    "backlog {backlog:>9}  batch {batch:>5}  workers {workers}  emit {:>7.2} s ({:>8.0} events/s)  drain {:>7.2} s  {:>8.0} deliveries/s  cpu {:>5} us/delivery  {}",
                    m.emit.as_secs_f64(),
                    backlog as f64 / m.emit.as_secs_f64(),
                    m.drain.as_secs_f64(),
                    m.per_second(),
                    m.cpu_per_delivery(),
                    per_delivery(&before, &after, backlog)
                );
                if backlog >= 1_000_000 && i == 0 {
                    let later = Timestamp::from_millis(2_000);
                    let d = Drain { backlog: 10_000, batch, workers };
                    let m = drain(&store, &d, later).await;
                    println!(
                        "  then 10,000 more over {backlog} finished: drain {:>6.2} s  {:>8.0} deliveries/s",
                        m.drain.as_secs_f64(),
                        m.per_second()
                    );
                    common::fill(&store, 1_000, Timestamp::from_millis(3_000)).await;
                    let plan = store
                        .explain_claim(Timestamp::from_millis(3_000), 1_000)
                        .await
                        .expect("explain");
                    println!("  the claim over {backlog} finished rows and 1,000 due:\n{plan}");
                }
            });
        }
        rt.block_on(async {
            let Some(schema) = TestSchema::create().await else {
                std::process::exit(0);
            };
            let store = schema.store(Options::default()).await;
            fill(&store, backlog, Timestamp::from_millis(1_000)).await;
            let before = server(&store).await;
            let (drained, took) = raw_drain(&store, 1_000, 1_000).await;
            let after = server(&store).await;
            assert_eq!(drained, backlog);
            println!(
                "backlog {backlog:>9}  raw SQL reference, batch 1000, one connection:          drain {:>7.2} s  {:>8.0} rows/s  {}",
                took.as_secs_f64(),
                drained as f64 / took.as_secs_f64(),
                per_delivery(&before, &after, backlog)
            );
        });
    }
}
