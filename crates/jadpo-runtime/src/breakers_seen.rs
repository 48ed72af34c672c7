//! What this process has seen of the breakers, for the check just before
//! each run: the breakers as its claims and finishes last returned them,
//! and the unavailable verdicts its runs handed over that the completer has
//! not written yet. Shared by the worker, the runs and the completer.

use jadpo_core::{Breaker, CallVerdict, Timestamp};
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;

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
    use std::sync::Arc;

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
