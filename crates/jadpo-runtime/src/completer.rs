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

use crate::clock::SharedClock;
use crate::log;
use jadpo_core::{Backoff, Breaker, CallVerdict, Outcome, Timestamp, Transition};
use jadpo_store::{Finish, FinishReport, Store, StoreError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, Notify};

/// Past this engine time a finish's lease is gone and writing it is
/// pointless: the lease of the claim it carries (`Finish::claimed`).
fn lease_until(f: &Finish) -> Timestamp {
    f.claimed
        .as_ref()
        .and_then(|d| d.lease.as_ref())
        .map_or(f.ended_at, |l| l.until)
}

/// Breakers as this process last saw them: from its claims and its own
/// finishes, the newest version of each. The check just before a run reads
/// only this.
#[derive(Debug, Default)]
pub(crate) struct BreakerCache(Mutex<BTreeMap<String, Breaker>>);

impl BreakerCache {
    pub(crate) fn merge(&self, seen: impl IntoIterator<Item = Breaker>) {
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for b in seen {
            match cache.get(&b.connection) {
                Some(known) if known.version >= b.version => {}
                _ => {
                    cache.insert(b.connection.clone(), b);
                }
            }
        }
    }

    /// The first of `connections` whose breaker does not let `id` run now.
    pub(crate) fn holding(&self, connections: &[String], id: jadpo_core::DeliveryId, now: Timestamp) -> Option<String> {
        let cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        jadpo_store::step::holding(connections, id, now, |c| cache.get(c))
    }
}

/// Unavailable verdicts this process has seen but not yet written, by
/// connection. A run hands its outcome over and frees its slot before the
/// write, so without this a provider that went down would get a call from
/// every queued delivery while the failures that should open its breaker
/// wait in the completer. A delivery that calls such a connection waits for
/// those writes, then checks the breaker as they left it; deliveries of
/// healthy connections never wait.
#[derive(Debug, Default)]
pub(crate) struct PendingVerdicts {
    unavailable: Mutex<BTreeMap<String, usize>>,
    written: Notify,
}

impl PendingVerdicts {
    fn count(&self, calls: &[(String, CallVerdict)], add: bool) {
        let mut pending = self.unavailable.lock().unwrap_or_else(|p| p.into_inner());
        for (connection, verdict) in calls {
            if *verdict != CallVerdict::Unavailable {
                continue;
            }
            if add {
                *pending.entry(connection.clone()).or_default() += 1;
            } else if let Some(n) = pending.get_mut(connection) {
                *n -= 1;
                if *n == 0 {
                    pending.remove(connection);
                }
            }
        }
    }

    /// Counts the verdicts of a finish on its way to the store.
    pub(crate) fn sent(&self, calls: &[(String, CallVerdict)]) {
        self.count(calls, true);
    }

    /// Those verdicts are written, or will never be.
    pub(crate) fn settled(&self, calls: &[(String, CallVerdict)]) {
        self.count(calls, false);
        self.written.notify_waiters();
    }

    /// Waits until no unavailable verdict on `connections` is unwritten.
    pub(crate) async fn wait(&self, connections: &[String]) {
        loop {
            let written = self.written.notified();
            {
                let pending = self.unavailable.lock().unwrap_or_else(|p| p.into_inner());
                if connections.iter().all(|c| !pending.contains_key(c)) {
                    return;
                }
            }
            written.await;
        }
    }
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
        while rx.recv_many(&mut received, limit).await > 0 {
            batch.extend(received.drain(..).map(|f| *f));
            self.write(&mut batch).await;
        }
    }

    /// Writes the batch, leaving it empty.
    async fn write(&self, batch: &mut Vec<Finish>) {
        // Writes failed in a row.
        let mut faults = 0u32;
        loop {
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

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::{BreakerPolicy, DeliveryId};

    fn opened(connection: &str) -> Breaker {
        let mut b = Breaker::new(connection);
        let policy = BreakerPolicy::DEFAULT;
        for i in 0..policy.threshold {
            b.record(
                CallVerdict::Unavailable,
                DeliveryId(i as i64),
                Timestamp::from_millis(0),
                &policy,
            );
        }
        assert!(!b.is_closed());
        b
    }

    #[test]
    fn the_newest_version_of_a_breaker_wins() {
        let cache = BreakerCache::default();
        let open = opened("payments");
        let mut closed = open.clone();
        closed.record(
            CallVerdict::Answered,
            DeliveryId(99),
            Timestamp::from_millis(1),
            &BreakerPolicy::DEFAULT,
        );
        assert!(closed.version > open.version);
        let conns = ["payments".to_string()];
        let now = Timestamp::from_millis(2);
        cache.merge([open.clone()]);
        assert_eq!(cache.holding(&conns, DeliveryId(7), now), Some("payments".into()));
        cache.merge([closed.clone()]);
        assert_eq!(cache.holding(&conns, DeliveryId(7), now), None);
        // A claim that read the breaker before this process closed it does
        // not bring the old state back.
        cache.merge([open]);
        assert_eq!(cache.holding(&conns, DeliveryId(7), now), None);
    }

    #[test]
    fn a_connection_never_seen_lets_everything_run() {
        let cache = BreakerCache::default();
        cache.merge([opened("email")]);
        let conns = ["payments".to_string()];
        assert_eq!(cache.holding(&conns, DeliveryId(1), Timestamp::from_millis(0)), None);
    }
}

#[cfg(test)]
mod pending_tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_run_on_a_healthy_connection_never_waits() {
        let p = PendingVerdicts::default();
        p.sent(&[("payments".into(), CallVerdict::Answered)]);
        p.sent(&[("email".into(), CallVerdict::Unavailable)]);
        assert!(p.wait(&["payments".into()]).now_or_never().is_some());
        assert!(p.wait(&[]).now_or_never().is_some());
    }

    #[tokio::test]
    async fn a_run_waits_for_the_unavailable_verdicts_on_its_connections() {
        let p = Arc::new(PendingVerdicts::default());
        let calls = vec![("payments".to_string(), CallVerdict::Unavailable)];
        p.sent(&calls);
        p.sent(&calls);
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.wait(&["email".into(), "payments".into()]).await }
        });
        tokio::task::yield_now().await;
        p.settled(&calls);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one verdict is still unwritten");
        p.settled(&calls);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken once both are written")
            .unwrap();
    }
}
