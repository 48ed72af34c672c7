//! Writes the outcomes of finished runs in batches, apart from the runs.
//!
//! A run hands its outcome over and frees its slot at once; the completer
//! writes whatever has arrived, up to the batch limit, in one transaction
//! (`finish_batch`) while the worker's next claim is in flight, with as
//! many batches in flight as the store says it writes to advantage
//! (`Store::finish_writers`): the next batch starts while one commits. When the
//! store fails, it keeps trying each outcome while that delivery's lease
//! lasts; after that the next claim takes the delivery over as
//! `lease_expired`, as it would from a lost worker. The channel into it is
//! bounded, so a slow store makes new runs wait for a slot, never the runs
//! already started.

use crate::breakers_seen::{BreakerCache, PendingVerdicts};
use crate::clock::SharedClock;
use crate::liveness::{Liveness, Loop};
use crate::log;
use futures::stream::{FuturesUnordered, StreamExt};
use jadpo_core::{Backoff, Outcome, Timestamp, Transition};
use jadpo_store::{Finish, FinishReport, Store, StoreError};
use std::future::Future;
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
        let _alive = self.liveness.running(Loop::Completer);
        batches(
            &mut rx,
            self.batch.max(1),
            self.store.finish_writers().max(1),
            |batch| self.write(batch.into_iter().map(|f| *f).collect()),
            || self.liveness.beat(Loop::Completer),
        )
        .await;
    }

    /// Writes the batch, or abandons what its leases no longer cover.
    async fn write(&self, mut batch: Vec<Finish>) {
        // Writes failed in a row.
        let mut faults = 0u32;
        loop {
            self.liveness.beat(Loop::Completer);
            match self.store.finish_batch(&batch).await {
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
                // Released deliveries are due now, and so is a key's next
                // one when this end freed its slot: on a store without
                // notifications (SQLite), nothing else would wake a worker
                // that found nothing due before this commit until its poll.
                if report.released > 0 || report.freed_slot {
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

/// Takes what arrives on `rx`, at most `limit` at a time, and hands each
/// batch to `write`, with at most `writers` writes in flight: while one
/// commits, the next batch is taken and started. Returns once every sender
/// is gone and every write has ended. `beat` is called at every turn, and
/// every [`crate::liveness::BEAT`] while it waits, so silence means stuck.
async fn batches<T, W: Future<Output = ()>>(
    rx: &mut mpsc::Receiver<T>,
    limit: usize,
    writers: usize,
    mut write: impl FnMut(Vec<T>) -> W,
    beat: impl Fn(),
) {
    let mut received = Vec::with_capacity(limit);
    let mut writing = FuturesUnordered::new();
    let mut ticks = tokio::time::interval(crate::liveness::BEAT);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        beat();
        tokio::select! {
            n = rx.recv_many(&mut received, limit), if writing.len() < writers => {
                if n == 0 {
                    break;
                }
                writing.push(write(std::mem::replace(&mut received, Vec::with_capacity(limit))));
            }
            Some(()) = writing.next(), if !writing.is_empty() => {}
            _ = ticks.tick() => {}
        }
    }
    while writing.next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::batches;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Mutex;
    use tokio::sync::{mpsc, Semaphore};

    /// The most writes seen in flight at once when batches of one arrive
    /// faster than they are written, and every item written in the end.
    async fn most_in_flight(writers: usize) -> (usize, Vec<u32>) {
        let (tx, mut rx) = mpsc::channel(16);
        for i in 0..10 {
            tx.send(i).await.unwrap();
        }
        drop(tx);
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let written = Mutex::new(Vec::new());
        // Writes wait here until the test has watched the first ones start.
        let gate = Semaphore::new(0);
        let write = |batch: Vec<u32>| {
            let (now, most, written, gate) = (&now, &most, &written, &gate);
            async move {
                most.fetch_max(now.fetch_add(1, SeqCst) + 1, SeqCst);
                gate.acquire().await.unwrap().forget();
                written.lock().unwrap().extend(batch);
                now.fetch_sub(1, SeqCst);
            }
        };
        let run = batches(&mut rx, 1, writers, write, || {});
        let open = async {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            gate.add_permits(100);
        };
        tokio::join!(run, open);
        let mut written = written.into_inner().unwrap();
        written.sort_unstable();
        (most.load(SeqCst), written)
    }

    #[tokio::test]
    async fn as_many_batches_are_in_flight_as_the_store_writes_at_once() {
        for writers in [1, 2, 3] {
            let (most, written) = most_in_flight(writers).await;
            assert_eq!(most, writers, "{writers} writers");
            assert_eq!(written, (0..10).collect::<Vec<_>>(), "everything received is written");
        }
    }
}
