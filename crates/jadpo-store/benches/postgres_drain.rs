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
//! prints the claim's plan there.

mod common;

use common::{drain, Drain};
use jadpo_core::Timestamp;
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::Options;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut backlogs = vec![10_000];
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
        let shapes = if backlog > 10_000 {
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
                let m = drain(&store, &d, now).await;
                assert_eq!(m.delivered, backlog, "every delivery drained");
                println!(
                    "backlog {backlog:>9}  batch {batch:>5}  workers {workers}  emit {:>7.2} s ({:>8.0} events/s)  drain {:>7.2} s  {:>8.0} deliveries/s",
                    m.emit.as_secs_f64(),
                    backlog as f64 / m.emit.as_secs_f64(),
                    m.drain.as_secs_f64(),
                    m.per_second()
                );
                if backlog > 10_000 && i == 0 {
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
    }
}
