//! The end-to-end drain every store's benchmark runs: emit a backlog, then
//! workers claim batches, run a no-op action and finish each batch in one
//! transaction, until nothing is due.

#![allow(dead_code)]

use jadpo_core::{Budget, Outcome, Timestamp};
use jadpo_store::{ClaimRequest, Finish, NewEvent, Route, Routes, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first backlog drained: 10,000, or `JADPO_BENCH_BACKLOG` (a larger
/// one evens out a noisy machine).
pub(crate) fn backlog() -> usize {
    std::env::var("JADPO_BENCH_BACKLOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

pub(crate) struct Drain {
    pub backlog: usize,
    pub batch: usize,
    pub workers: usize,
}

pub(crate) struct Measured {
    pub emit: Duration,
    pub drain: Duration,
    /// CPU time this process spent draining, where the OS tells it.
    pub drain_cpu: Option<Duration>,
    pub delivered: usize,
}

impl Measured {
    pub(crate) fn per_second(&self) -> f64 {
        self.delivered as f64 / self.drain.as_secs_f64()
    }

    /// CPU microseconds per delivery, or `?`: steadier than wall time on a
    /// machine others are loading, where the drain waits for a core.
    pub(crate) fn cpu_per_delivery(&self) -> String {
        self.drain_cpu.map_or("?".into(), |t| {
            format!("{:.1}", t.as_secs_f64() * 1e6 / self.delivered.max(1) as f64)
        })
    }
}

/// User and system CPU time of this process so far (Linux: `/proc/self/stat`,
/// in the kernel's 100 ticks a second).
pub(crate) fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

pub(crate) fn routes() -> Routes {
    let mut r = Routes::new();
    r.insert(
        "noop",
        Route {
            budget: Budget::DEFAULT,
            connections: vec![],
        },
    );
    r
}

/// Emits `backlog` events in chunks, all due at `now`.
pub(crate) async fn fill<S: Store>(store: &S, backlog: usize, now: Timestamp) -> Duration {
    let started = Instant::now();
    let mut left = backlog;
    while left > 0 {
        let n = left.min(10_000);
        let events: Vec<NewEvent> = (0..n)
            .map(|_| NewEvent {
                name: "Bench".into(),
                payload: "{}".into(),
                subscribers: vec!["noop".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect();
        store.emit(&events, now).await.expect("emit");
        left -= n;
    }
    started.elapsed()
}

/// Emits the backlog, then drains it with `workers` concurrent
/// claim-run-finish loops.
pub(crate) async fn drain<S: Store + Clone>(store: &S, d: &Drain, now: Timestamp) -> Measured {
    let emit = fill(store, d.backlog, now).await;
    drain_filled(store, d, now, emit).await
}

/// Drains a backlog already emitted (in `emit`).
pub(crate) async fn drain_filled<S: Store + Clone>(store: &S, d: &Drain, now: Timestamp, emit: Duration) -> Measured {
    let cpu = cpu_time();
    let started = Instant::now();
    let routes = Arc::new(routes());
    let mut tasks = Vec::new();
    for w in 0..d.workers {
        let store = store.clone();
        let routes = routes.clone();
        let batch = d.batch;
        tasks.push(tokio::spawn(async move {
            let name = format!("bench-{w}");
            let mut delivered = 0usize;
            loop {
                let req = ClaimRequest {
                    worker: &name,
                    routes: &routes,
                    now,
                    limit: batch,
                    lease: Duration::from_secs(60),
                };
                let claimed = store.claim(&req).await.expect("claim").claimed;
                if claimed.is_empty() {
                    return delivered;
                }
                let finishes: Vec<Finish> = claimed
                    .iter()
                    .map(|c| Finish {
                        claimed: None,
                        ..c.finish(Outcome::Succeeded, now, now)
                    })
                    .collect();
                let results = store.finish_batch(&finishes).await.expect("finish");
                delivered += results.iter().filter(|r| r.is_ok()).count();
            }
        }));
    }
    let mut delivered = 0;
    for t in tasks {
        delivered += t.await.expect("worker");
    }
    let drain = started.elapsed();
    Measured {
        emit,
        drain,
        drain_cpu: cpu.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a)),
        delivered,
    }
}
