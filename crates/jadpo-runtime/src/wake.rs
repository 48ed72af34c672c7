//! When an idle worker looks again.
//!
//! An idle claim loop sleeps until the first of:
//!
//! - a wake-up (`Shared::wake`, a `Notify` permit, so a burst of them leaves
//!   one behind): an emit, an operator's retry or the sweep's release in
//!   this process, or the store's notification of the same in another one
//!   ([`listen`]; PostgreSQL only);
//! - the earliest due time the store knows of ([`Store::next_due`]): a retry
//!   scheduled by backoff, a retry spread over a window, a lease that ends;
//! - its poll, `WorkerConfig::poll` after it went idle: the fallback when a
//!   notification is lost, or when another process wrote to a store that
//!   sends none (SQLite).

use crate::clock::SharedClock;
use crate::worker::Shared;
use jadpo_core::Timestamp;
use jadpo_store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The shortest wait when something is due now that the claim could not
/// take: another process holds those rows until its claim commits, so
/// looking again at once would spin.
pub(crate) const BUSY_WAIT: Duration = Duration::from_millis(20);

/// The engine time an idle worker, which went idle at `now`, looks again
/// at, failing a wake-up: the store's next due time, at most a poll away.
pub(crate) async fn next_look<S: Store>(store: &S, clock: &SharedClock, now: Timestamp, poll: Duration) -> Timestamp {
    let latest = now.plus(poll);
    match store.next_due().await {
        Ok(Some(due)) => due.max(clock.now().plus(clock.engine_span(BUSY_WAIT))).min(latest),
        // The claim loop meets a store that is down at its next claim.
        Ok(None) | Err(_) => latest,
    }
}

/// Resolves once engine time reaches `until`, or the same span of real
/// time has passed (the clock's `real_span`), whichever comes first.
pub(crate) async fn sleep_until(clock: &SharedClock, until: Timestamp) {
    let real = clock.real_span(until.since(clock.now())).max(Duration::from_millis(5));
    tokio::select! {
        _ = clock.sleep_until(until) => {}
        _ = tokio::time::sleep(real) => {}
    }
}

/// Runs the store's listener (see [`Store::listen`]) until shutdown.
pub(crate) async fn listen<S: Store, E>(shared: Arc<Shared<S, E>>, mut shutdown: watch::Receiver<bool>) {
    tokio::select! {
        _ = shared.store.listen(shared.wake.clone()) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
}
