//! What this process did, minute by minute, for the console's charts: the
//! outcomes it wrote, the deliveries it held, each connection's calls and
//! unavailable answers, and the breaker changes it made. Counted in memory
//! as deliveries finish and claims return (one lock per batch), and added
//! to the store's summary (`Store::add_minutes`) by the tick every
//! [`FLUSH_EVERY`], where every process's counts sum. A process that dies
//! loses at most its last few seconds of counts: a chart, not a record.

use jadpo_core::{CallVerdict, Outcome, Timestamp, Transition};
use jadpo_store::{minute_of, MinuteCount, Store};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// How often the tick adds this process's counts to the store, in real time.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// How much of the summary the store keeps.
pub(crate) const KEEP: Duration = Duration::from_secs(24 * 3600);

/// The most counts one write carries.
const MAX_FLUSH: usize = 10_000;

type Key = (Timestamp, Cow<'static, str>);

/// Counts not yet in the store.
#[derive(Debug, Default)]
pub(crate) struct Minutes(Mutex<BTreeMap<Key, u64>>);

/// Counts gathered off the lock, then added in one go.
#[derive(Default)]
pub(crate) struct Tally(BTreeMap<Key, u64>);

impl Tally {
    pub(crate) fn add(&mut self, at: Timestamp, series: impl Into<Cow<'static, str>>, n: u64) {
        if n > 0 {
            *self.0.entry((minute_of(at), series.into())).or_default() += n;
        }
    }

    /// A finished delivery: its outcome, each connection's call, and the
    /// breaker changes its finish made.
    pub(crate) fn finished(
        &mut self,
        at: Timestamp,
        outcome: &Outcome,
        calls: &[(String, CallVerdict)],
        transitions: &[(String, Transition)],
    ) {
        let series = match outcome {
            Outcome::Succeeded => "succeeded",
            Outcome::Retry { .. } => "retried",
            Outcome::Failed(_) => "failed",
            Outcome::Parked(_) => "parked",
        };
        self.add(at, series, 1);
        for (connection, verdict) in calls {
            self.add(at, format!("calls:{connection}"), 1);
            if *verdict == CallVerdict::Unavailable {
                self.add(at, format!("unavailable:{connection}"), 1);
            }
        }
        for (connection, t) in transitions {
            let what = match t {
                Transition::Opened | Transition::Reopened => "opened",
                Transition::Closed => "closed",
            };
            self.add(at, format!("{what}:{connection}"), 1);
        }
    }
}

impl Minutes {
    pub(crate) fn add(&self, tally: Tally) {
        if tally.0.is_empty() {
            return;
        }
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (k, n) in tally.0 {
            *counts.entry(k).or_default() += n;
        }
    }

    fn take(&self) -> BTreeMap<Key, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Adds what was counted to the store's summary. What a failed write
    /// held is counted again for the next one.
    pub(crate) async fn flush<S: Store>(&self, store: &S, now: Timestamp) {
        let taken = self.take();
        if taken.is_empty() {
            return;
        }
        let counts: Vec<MinuteCount> = taken
            .iter()
            .map(|((minute, series), n)| MinuteCount {
                minute: *minute,
                series: series.to_string(),
                n: *n,
            })
            .collect();
        let forget_before = now.minus(KEEP);
        for (i, chunk) in counts.chunks(MAX_FLUSH).enumerate() {
            if let Err(e) = store.add_minutes(chunk, forget_before).await {
                tracing::warn!(error = %e, "minutes.store_unavailable");
                let mut back = Tally::default();
                for c in &counts[i * MAX_FLUSH..] {
                    back.add(c.minute, c.series.clone(), c.n);
                }
                self.add(back);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::{FailureKind, FailureRecord};
    use jadpo_store::SharedMemoryStore;

    const T: Timestamp = Timestamp::from_millis(1_700_000_070_000);

    #[tokio::test]
    async fn counts_go_to_their_minute_and_add_up_in_the_store() {
        let store = SharedMemoryStore::new(jadpo_core::BreakerPolicy::DEFAULT);
        let minutes = Minutes::default();
        let mut t = Tally::default();
        let calls = vec![("pay".to_string(), CallVerdict::Unavailable)];
        let opened = vec![("pay".to_string(), Transition::Opened)];
        t.finished(T, &Outcome::Succeeded, &[], &[]);
        t.finished(T.plus(Duration::from_secs(5)), &Outcome::Succeeded, &[], &[]);
        let failure = FailureRecord::new("http.503", FailureKind::Unavailable);
        t.finished(
            T.plus(Duration::from_secs(30)),
            &Outcome::Retry { at: T, failure },
            &calls,
            &opened,
        );
        minutes.add(t);
        minutes.flush(&store, T).await;
        let m = minute_of(T);
        let next = m.plus(Duration::from_secs(60));
        let got: Vec<(Timestamp, String, u64)> = store
            .minutes(m)
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.minute, c.series, c.n))
            .collect();
        assert_eq!(
            got,
            vec![
                (m, "succeeded".into(), 2),
                (next, "calls:pay".into(), 1),
                (next, "opened:pay".into(), 1),
                (next, "retried".into(), 1),
                (next, "unavailable:pay".into(), 1),
            ]
        );
        // Flushed counts are gone from the process: a second flush adds nothing.
        minutes.flush(&store, T).await;
        assert_eq!(store.minutes(m).await.unwrap().len(), 5);
    }
}
