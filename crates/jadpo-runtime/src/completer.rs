//! Writes the outcomes of finished runs in batches, apart from the runs.
//!
//! A run hands its outcome over and frees its slot at once; the completer
//! writes whatever has arrived, up to the batch limit, in one transaction
//! (`finish_batch`) while the worker's next claim is in flight. When the
//! store fails, it keeps trying each outcome while that delivery's lease
//! lasts; after that the next claim takes the delivery over as
//! `lease_expired`, as it would from a lost worker. The channel into it is
//! bounded, so a slow store makes new runs wait for a slot, never the runs
//! already started.

use crate::breakers_seen::{BreakerCache, PendingVerdicts};
use crate::clock::SharedClock;
use crate::liveness::{Liveness, Loop};
use crate::log;
use jadpo_core::{Backoff, Outcome, Timestamp, Transition};
use jadpo_store::{Finish, FinishReport, Store, StoreError};
use std::sync::Arc;
use tokio::sync::{mpsc, Notify};

/// Past this engine time a finish's lease is gone and writing it is
/// pointless: the lease of the claim it carries (`Finish::claimed`).
fn lease_until(f: &Finish) -> Timestamp {
    f.claimed
        .as_ref()
        .and_then(|d| d.lease.as_ref())
        .map_or(f.ended_at, |l| l.until)
}

pub(crate) struct Completer<S> {
    pub store: Arc<S>,
    pub clock: SharedClock,
    pub breakers: Arc<BreakerCache>,
    pub pending: Arc<PendingVerdicts>,
    /// Woken when a finish released held deliveries: they are due now.
    pub wake: Arc<Notify>,
    /// Woken when a finish closed a breaker: its outage's `resolved`
    /// message may be waiting to be sent.
    pub alert_wake: Arc<Notify>,
    /// Outcomes, calls and breaker changes, for the per-minute summary.
    pub minutes: Arc<crate::minutes::Minutes>,
    /// Beaten at each batch and while waiting for one (`liveness.rs`).
    pub liveness: Arc<Liveness>,
    pub batch: usize,
}

impl<S: Store> Completer<S> {
    /// Runs until every sender is gone and everything received is written
    /// or abandoned.
    /// Each finish arrives boxed: it passes through the channel and the
    /// batch, and a pointer moves where half a kilobyte would be copied.
    pub(crate) async fn run(self, mut rx: mpsc::Receiver<Box<Finish>>) {
        let limit = self.batch.max(1);
        let mut received = Vec::with_capacity(limit);
        let mut batch = Vec::with_capacity(limit);
        let _alive = self.liveness.running(Loop::Completer);
        // An idle completer beats while it waits, so silence means stuck.
        let mut beat = tokio::time::interval(crate::liveness::BEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.liveness.beat(Loop::Completer);
            tokio::select! {
                n = rx.recv_many(&mut received, limit) => if n == 0 { break },
                _ = beat.tick() => continue,
            }
            batch.extend(received.drain(..).map(|f| *f));
            self.write(&mut batch).await;
        }
    }

    /// Writes the batch, leaving it empty.
    async fn write(&self, batch: &mut Vec<Finish>) {
        // Writes failed in a row.
        let mut faults = 0u32;
        loop {
            self.liveness.beat(Loop::Completer);
            match self.store.finish_batch(batch).await {
                Ok(results) => {
                    // A retry written here may be due before the time an
                    // idle claim loop planned to look again (it asked the
                    // store before this commit): wake it to ask again.
                    let retries = batch.iter().any(|f| matches!(f.outcome, Outcome::Retry { .. }));
                    let mut tally = crate::minutes::Tally::default();
                    for (f, result) in batch.drain(..).zip(results) {
                        if let Ok(report) = &result {
                            tally.finished(f.ended_at, &f.outcome, &f.calls, &report.transitions);
                        }
                        self.written(&f, result);
                    }
                    self.minutes.add(tally);
                    if retries {
                        self.wake.notify_one();
                    }
                    return;
                }
                Err(e) => {
                    let now = self.clock.now();
                    batch.retain(|f| {
                        let keep = now < lease_until(f);
                        if !keep {
                            tracing::warn!(delivery = f.id.0, error = %e, "delivery.finish_abandoned");
                            self.pending.settled(&f.calls);
                        }
                        keep
                    });
                    if batch.is_empty() {
                        return;
                    }
                    tracing::warn!(deliveries = batch.len(), error = %e, "delivery.finish_retry");
                    faults = faults.saturating_add(1);
                    let wait = Backoff::STORE.draw(faults, None, &mut rand::rng());
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    fn written(&self, f: &Finish, result: Result<FinishReport, StoreError>) {
        // The breakers as written go into the cache before the waiting runs
        // are told, so they check against them.
        if let Ok(report) = &result {
            self.breakers.merge(report.breakers.iter().cloned());
        }
        self.pending.settled(&f.calls);
        match result {
            Ok(report) => {
                if report.released > 0 {
                    self.wake.notify_one();
                }
                if report.transitions.iter().any(|(_, t)| *t == Transition::Closed) {
                    self.alert_wake.notify_one();
                }
                log::finished(f, &report);
            }
            Err(StoreError::LeaseLost(_)) => {
                let subscriber = log::subscriber(f);
                tracing::warn!(delivery = f.id.0, subscriber, "delivery.lease_lost");
            }
            Err(e) => tracing::warn!(delivery = f.id.0, error = %e, "delivery.finish_abandoned"),
        }
    }
}
