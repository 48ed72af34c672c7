//! End-to-end drain on the SQLite store: emit a backlog, then workers claim
//! batches, run a no-op action and finish each batch in one transaction;
//! then the same backlog drained by hand-written SQL, the reference.
//!
//! `cargo bench -p jadpo-store --bench sqlite_drain` runs the 10,000 backlog
//! with batches of 1,000 and 1 or 4 workers. `JADPO_BENCH_1M=1` adds the
//! 1,000,000 backlog (about two minutes, a third of it emitting);
//! `JADPO_BENCH_SHAPES=all` adds 2 workers, batches of 100 and of 10,000.

mod common;

use common::{drain, fill, Drain};
use jadpo_core::Timestamp;
use jadpo_store::sqlite::{rusqlite, SqliteStore};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The reference the store is measured against: the same tables drained by
/// hand-written SQL, one statement claiming a batch and one fenced statement
/// completing it, each committed, no planner, no attempts or handled rows.
fn raw_drain(path: &Path, batch: usize, now: i64) -> (usize, Duration) {
    let mut c = rusqlite::Connection::open(path).expect("open");
    c.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
        .expect("pragmas");
    let started = Instant::now();
    let mut drained = 0;
    loop {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let claimed: Vec<(i64, i64)> = tx
            .prepare_cached(
                "UPDATE jadpo_deliveries SET state = 'running', attempts = attempts + 1, \
                 lease_owner = 'raw', lease_token = lease_token + 1, lease_until = ?1 + 60000, \
                 updated_at = ?1 WHERE id IN (SELECT id FROM jadpo_deliveries \
                 WHERE state = 'due' AND due_at <= ?1 ORDER BY due_at, id LIMIT ?2) \
                 RETURNING id, lease_token",
            )
            .expect("prepare claim")
            .query_map((now, batch as i64), |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("claim")
            .collect::<Result<_, _>>()
            .expect("claim rows");
        tx.commit().expect("commit claim");
        if claimed.is_empty() {
            return (drained, started.elapsed());
        }
        let pairs: Vec<String> = claimed.iter().map(|(id, t)| format!("[{id},{t}]")).collect();
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        drained += tx
            .prepare_cached(
                "UPDATE jadpo_deliveries SET state = 'succeeded', lease_owner = NULL, \
                 lease_until = NULL, finished_at = ?1, updated_at = ?1 \
                 WHERE state = 'running' AND (id, lease_token) IN \
                 (SELECT value ->> 0, value ->> 1 FROM json_each(?2))",
            )
            .expect("prepare complete")
            .execute((now, format!("[{}]", pairs.join(","))))
            .expect("complete");
        tx.commit().expect("commit complete");
    }
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
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
        Some("all") => &[(1_000, 1), (1_000, 2), (1_000, 4), (100, 4), (10_000, 1)],
        _ => &[(1_000, 1), (1_000, 4)],
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sqlite_drain");
    std::fs::create_dir_all(&dir).expect("bench folder");
    println!("SQLite drain (WAL, synchronous=NORMAL), file under {}", dir.display());
    for &backlog in &backlogs {
        for &(batch, workers) in shapes {
            let path = fresh(&dir, &format!("drain-{backlog}-{batch}-{workers}.db"));
            let m = rt.block_on(async {
                let store = SqliteStore::open(&format!("sqlite:{}", path.display()))
                    .await
                    .expect("open");
                let d = Drain {
                    backlog,
                    batch,
                    workers,
                };
                drain(&store, &d, Timestamp::from_millis(1_000)).await
            });
            assert_eq!(m.delivered, backlog, "every delivery drained");
            println!(
                "backlog {backlog:>9}  batch {batch:>5}  workers {workers}  emit {:>7.2} s ({:>8.0} events/s)  drain {:>7.2} s  {:>8.0} deliveries/s  cpu {:>5} us/delivery",
                m.emit.as_secs_f64(),
                backlog as f64 / m.emit.as_secs_f64(),
                m.drain.as_secs_f64(),
                m.per_second(),
                m.cpu_per_delivery()
            );
            fresh(&dir, &format!("drain-{backlog}-{batch}-{workers}.db"));
        }
        let path = fresh(&dir, &format!("raw-{backlog}.db"));
        rt.block_on(async {
            let store = SqliteStore::open(&format!("sqlite:{}", path.display()))
                .await
                .expect("open");
            fill(&store, backlog, Timestamp::from_millis(1_000)).await;
        });
        let cpu = common::cpu_time();
        let (drained, took) = raw_drain(&path, 1_000, 1_000);
        let cpu = cpu.zip(common::cpu_time()).map(|(a, b)| b.saturating_sub(a));
        assert_eq!(drained, backlog);
        println!(
            "backlog {backlog:>9}  raw SQL reference, batch 1000, one connection:          drain {:>7.2} s  {:>8.0} rows/s      cpu {:>5} us/row",
            took.as_secs_f64(),
            drained as f64 / took.as_secs_f64(),
            cpu.map_or("?".into(), |t| format!("{:.1}", t.as_secs_f64() * 1e6 / drained as f64))
        );
        fresh(&dir, &format!("raw-{backlog}.db"));
    }
}
