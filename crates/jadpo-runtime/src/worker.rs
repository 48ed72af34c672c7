//! The worker: claims batches, runs each delivery under its time limit, and
//! writes back what the core decided.
//!
//! One claim loop per process runs up to `concurrency` deliveries at once.
//! It claims only as many as it has free slots, so every claimed delivery
//! starts at once; finished runs go to a completer that writes them in
//! batches (`finish_batch`), one transaction for many.

use crate::clock::SharedClock;
use crate::log;
use crate::run::{CallLog, Catalog, Executor, RunContext};
use futures::FutureExt;
use jadpo_core::{attempt, AttemptEnd, Breaker, Failure, Timestamp};
use jadpo_store::{ClaimRequest, Claimed, Finish, FinishReport, Store, StoreError};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};
use tokio::task::JoinSet;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Names this process's leases.
    pub name: String,
    /// Deliveries run at once.
    pub concurrency: usize,
    /// How long an idle worker waits before looking again, in engine time.
    pub poll: Duration,
    /// Added to the longest run's limit to make a lease, in real time: the
    /// time to write the outcome.
    pub lease_margin: Duration,
    /// The most finishes written in one transaction.
    pub finish_batch: usize,
    /// Finished deliveries older than this are pruned by the tick, with their
    /// events and attempts; `None` keeps everything.
    pub retention: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: format!("jadpo-{}", std::process::id()),
            concurrency: 16,
            poll: Duration::from_secs(1),
            lease_margin: Duration::from_secs(30),
            finish_batch: 1_000,
            retention: Some(Duration::from_secs(30 * 86_400)),
        }
    }
}

/// The most deliveries one process runs at once: an explicit bound.
pub const MAX_CONCURRENCY: usize = 10_000;

/// Shared between the claim loop and the run tasks.
pub(crate) struct Shared<S, E> {
    pub store: Arc<S>,
    pub executor: Arc<E>,
    pub clock: SharedClock,
    pub catalog: Arc<Catalog>,
    pub config: WorkerConfig,
    /// Breakers as last read, for the check just before each run.
    pub breakers: Mutex<BTreeMap<String, Breaker>>,
    /// Woken when something may have become due (see `wake.rs`).
    pub wake: Arc<Notify>,
}

type FinishReply = oneshot::Sender<Result<FinishReport, StoreError>>;

/// Runs the claim loop until `shutdown` turns true, then lets running
/// deliveries finish (each within its limit) and returns.
pub(crate) async fn run<S: Store, E: Executor>(shared: Arc<Shared<S, E>>, mut shutdown: watch::Receiver<bool>) {
    assert!(shared.config.concurrency >= 1 && shared.config.concurrency <= MAX_CONCURRENCY);
    let slots = Arc::new(Semaphore::new(shared.config.concurrency));
    let (finish_tx, finish_rx) = mpsc::channel::<(Finish, FinishReply)>(shared.config.concurrency * 2);
    let completer = tokio::spawn(complete(shared.clone(), finish_rx));
    let mut runs = JoinSet::new();
    let mut store_backoff = Duration::from_millis(100);
    while !*shutdown.borrow() {
        while runs.try_join_next().is_some() {}
        let free = slots.available_permits();
        if free == 0 {
            tokio::select! {
                _ = runs.join_next() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        let now = shared.clock.now();
        let lease = shared
            .clock
            .engine_span(shared.catalog.longest_timeout() + shared.config.lease_margin);
        let req = ClaimRequest {
            worker: &shared.config.name,
            routes: &shared.catalog.routes,
            now,
            limit: free,
            lease,
        };
        let started = std::time::Instant::now();
        let claimed = shared.store.claim(&req).await;
        crate::metrics::claimed(started.elapsed());
        let report = match claimed {
            Ok(r) => r,
            Err(e) => {
                // A fault before anything committed: nothing was claimed.
                // Reconnect with backoff and keep going.
                tracing::warn!(error = %e, wait_ms = store_backoff.as_millis() as u64, "store.unavailable");
                tokio::select! {
                    _ = tokio::time::sleep(store_backoff) => {}
                    _ = shutdown.changed() => {}
                }
                store_backoff = (store_backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        store_backoff = Duration::from_millis(100);
        log::claim(&report);
        if report.claimed.iter().any(|c| !c.connections.is_empty()) {
            refresh_breakers(&shared).await;
        }
        let claimed_any = !report.claimed.is_empty();
        for claimed in report.claimed {
            let permit = slots.clone().acquire_owned().await.expect("semaphore never closed");
            let shared = shared.clone();
            let finish_tx = finish_tx.clone();
            runs.spawn(async move {
                run_one(&shared, claimed, &finish_tx).await;
                drop(permit);
            });
        }
        let decided_any = !(report.succeeded.is_empty() && report.gave_up.is_empty() && report.held.is_empty());
        if !claimed_any && !decided_any {
            let until = crate::wake::next_look(&*shared.store, &shared.clock, now, shared.config.poll).await;
            tokio::select! {
                _ = crate::wake::sleep_until(&shared.clock, until) => {}
                _ = shared.wake.notified() => {}
                _ = runs.join_next(), if !runs.is_empty() => {}
                _ = shutdown.changed() => {}
            }
        }
    }
    // Graceful: claim nothing more; running deliveries end within their limit.
    while runs.join_next().await.is_some() {}
    drop(finish_tx);
    let _ = completer.await;
}

async fn refresh_breakers<S: Store, E>(shared: &Shared<S, E>) {
    if let Ok(views) = shared.store.breakers().await {
        let mut cache = shared.breakers.lock().unwrap_or_else(|p| p.into_inner());
        cache.clear();
        cache.extend(views.into_iter().map(|v| (v.breaker.connection.clone(), v.breaker)));
    }
}

/// The connection whose breaker opened since the claim, if any.
fn held_before_run<S, E>(shared: &Shared<S, E>, claimed: &Claimed, now: Timestamp) -> Option<String> {
    let cache = shared.breakers.lock().unwrap_or_else(|p| p.into_inner());
    claimed
        .connections
        .iter()
        .find(|c| cache.get(*c).is_some_and(|b| !b.lets_run(claimed.delivery.id, now)))
        .cloned()
}

async fn run_one<S: Store, E: Executor>(
    shared: &Shared<S, E>,
    claimed: Claimed,
    finish_tx: &mpsc::Sender<(Finish, FinishReply)>,
) {
    let id = claimed.delivery.id;
    let token = claimed.token();
    let started_at = shared.clock.now();
    if let Some(connection) = held_before_run(shared, &claimed, started_at) {
        match shared.store.hold_claimed(id, token, &connection, started_at).await {
            Ok(()) => log::held(&claimed, &connection),
            Err(e) => tracing::warn!(delivery = id.0, error = %e, "delivery.hold_failed"),
        }
        return;
    }
    let timeout = shared.catalog.timeout(&claimed.delivery.subscriber);
    let calls = CallLog::default();
    let payload = serde_json::from_str(&claimed.payload).unwrap_or(serde_json::Value::Null);
    let ctx = RunContext {
        kind: crate::run::RunKind::Delivery,
        delivery: id,
        attempt: claimed.delivery.attempts,
        subscriber: claimed.delivery.subscriber.clone(),
        event_name: claimed.event_name.clone(),
        payload,
        started_at,
        deadline: tokio::time::Instant::now() + timeout,
        calls: calls.clone(),
    };
    let (end, stopped) = execute(&*shared.executor, ctx, timeout).await;
    let now = shared.clock.now();
    let outcome = attempt::decide(
        &claimed.delivery,
        claimed.budget,
        &end,
        now,
        &mut rand::rngs::StdRng::from_os_rng(),
    );
    let finish = Finish {
        id,
        token,
        outcome: outcome.clone(),
        calls: calls.verdicts(stopped),
        probe_for: claimed.probe_for.clone(),
        started_at,
        now,
    };
    let lease_until = claimed.delivery.lease.as_ref().map_or(now, |l| l.until);
    let mut wait = Duration::from_millis(50);
    loop {
        let (tx, rx) = oneshot::channel();
        if finish_tx.send((finish.clone(), tx)).await.is_err() {
            return;
        }
        match rx.await {
            Ok(Ok(report)) => {
                log::finished(&claimed, &outcome, &end, &report);
                return;
            }
            Ok(Err(StoreError::LeaseLost(_))) => {
                tracing::warn!(delivery = id.0, subscriber = %claimed.delivery.subscriber, "delivery.lease_lost");
                return;
            }
            Ok(Err(e)) if shared.clock.now() < lease_until => {
                // Keep trying to write the outcome while the lease lasts;
                // after that the next claim takes it over as lease_expired.
                tracing::warn!(delivery = id.0, error = %e, "delivery.finish_retry");
                let jitter = Duration::from_millis(rand::rng().random_range(0..50));
                tokio::time::sleep(wait + jitter).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Ok(Err(e)) => {
                tracing::warn!(delivery = id.0, error = %e, "delivery.finish_abandoned");
                return;
            }
            // The completer is gone: the process is stopping.
            Err(_) => return,
        }
    }
}

/// Runs an action under its time limit. A panic is a defect, never a
/// crashed worker; a run past its limit is `deadline_exceeded`, and `true`
/// says it was stopped mid-run.
pub(crate) async fn execute<E: Executor>(executor: &E, ctx: RunContext, limit: Duration) -> (AttemptEnd, bool) {
    let run = AssertUnwindSafe(executor.run(ctx)).catch_unwind();
    match tokio::time::timeout(limit, run).await {
        Ok(Ok(Ok(()))) => (AttemptEnd::Succeeded, false),
        Ok(Ok(Err(failure))) => (AttemptEnd::Failed(failure), false),
        Ok(Err(_panic)) => (AttemptEnd::Failed(Failure::panicked()), false),
        // Dropping the run's future is what stops it: nothing it did is kept.
        Err(_elapsed) => (AttemptEnd::Failed(Failure::deadline_exceeded()), true),
    }
}

/// Writes finishes in batches: whatever has arrived, up to the limit, in
/// one transaction.
async fn complete<S: Store, E>(shared: Arc<Shared<S, E>>, mut rx: mpsc::Receiver<(Finish, FinishReply)>) {
    let limit = shared.config.finish_batch.max(1);
    let mut batch = Vec::with_capacity(limit);
    while rx.recv_many(&mut batch, limit).await > 0 {
        let finishes: Vec<Finish> = batch.iter().map(|(f, _)| f.clone()).collect();
        match shared.store.finish_batch(&finishes).await {
            Ok(results) => {
                for ((_, reply), result) in batch.drain(..).zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                for (_, reply) in batch.drain(..) {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}
