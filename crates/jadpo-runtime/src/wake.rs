//! When an idle worker looks again.
//!
//! An idle claim loop sleeps until the first of:
//!
//! - a wake-up (`EngineState::wake`, a `Notify` permit, so a burst of them leaves
//!   one behind): an emit, an operator's retry or the sweep's release in
//!   this process, or the store's notification of the same in another one
//!   ([`listen`]; PostgreSQL only);
//! - the earliest due time the store knows of ([`Store::next_due`]): a retry
//!   scheduled by backoff, a retry spread over a window, a lease that ends;
//! - its poll, `WorkerConfig::poll` after it went idle: the fallback when a
//!   notification is lost, or when another process wrote to a store that
//!   sends none (SQLite).

use crate::clock::SharedClock;
use jadpo_core::Timestamp;
use jadpo_store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The shortest wait when something is due now that the claim could not
/// take: another process holds those rows until its claim commits, so
/// looking again at once would spin.
pub(crate) const BUSY_WAIT: Duration = Duration::from_millis(20);

/// The engine time an idle worker, which went idle at `now`, looks again
/// at, failing a wake-up: the store's next due time, at most a poll away.
/// Only something due already waits [`BUSY_WAIT`]; a time to come (a
/// delivery's turn for a token) is looked at when it comes, not after.
pub(crate) async fn next_look<S: Store>(store: &S, clock: &SharedClock, now: Timestamp, poll: Duration) -> Timestamp {
    let latest = now.plus(poll);
    match store.next_due().await {
        Ok(Some(due)) => {
            let current = clock.now();
            let at = if due > current {
                due
            } else {
                current.plus(clock.engine_span(BUSY_WAIT))
            };
            at.min(latest)
        }
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
pub(crate) async fn listen<S: Store>(store: Arc<S>, wake: Arc<Notify>, mut shutdown: watch::Receiver<bool>) {
    tokio::select! {
        _ = store.listen(wake) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
}

/// Whether an idle claim loop sleeps, and until when.
///
/// A claim that finds nothing due reports when to look again, from what its
/// transaction saw. A wake-up that arrives while that claim is in flight
/// announces rows the claim may not have seen (an emit that committed
/// after its snapshot), so such a claim's report must not put the loop to
/// sleep: the loop would have spent the wake-up's permit and slept until
/// its poll. Each claim carries the count of wake-ups at its start; a
/// report is believed only if no wake-up came since.
#[derive(Debug, Default)]
pub(crate) struct Idle {
    wakes: u64,
    until: Option<Timestamp>,
}

/// What a claim saw of the wake-ups when it started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket(u64);

impl Idle {
    pub(crate) fn claim_started(&self) -> Ticket {
        Ticket(self.wakes)
    }

    /// A wake-up, or the idle time ran out: look again now.
    pub(crate) fn woken(&mut self) {
        self.wakes += 1;
        self.until = None;
    }

    /// A claim ended; `look_again` is set when it found nothing more due.
    pub(crate) fn claim_ended(&mut self, ticket: Ticket, look_again: Option<Timestamp>) {
        self.until = if ticket.0 == self.wakes { look_again } else { None };
    }

    /// The engine time to look again at, if idle.
    pub(crate) fn until(&self) -> Option<Timestamp> {
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timestamp = Timestamp::from_millis(1_000);

    /// An idle worker at `T` with one delivery due at `due`, or none: a
    /// due time to come is looked at when it comes, even sooner than the
    /// busy wait; only one already past waits the busy wait; the poll is
    /// the latest.
    #[tokio::test]
    async fn an_idle_worker_looks_again_at_the_next_due_time_when_it_comes() {
        use crate::clock::ManualClock;
        use jadpo_store::memory::SharedMemoryStore;
        use jadpo_store::{NewEvent, Store};
        let ms = Duration::from_millis;
        let poll = Duration::from_secs(1);
        let cases: [(Option<Timestamp>, Timestamp, &str); 5] = [
            (None, T.plus(poll), "nothing due: the poll"),
            (Some(T.plus(ms(5))), T.plus(ms(5)), "due sooner than the busy wait"),
            (Some(T.plus(ms(300))), T.plus(ms(300)), "due later"),
            (Some(T.plus(ms(5_000))), T.plus(poll), "due past the poll"),
            (Some(T.minus(ms(1))), T.plus(BUSY_WAIT), "due already: the busy wait"),
        ];
        for (due, want, case) in cases {
            let store = SharedMemoryStore::new(jadpo_core::BreakerPolicy::DEFAULT);
            if let Some(due) = due {
                let event = NewEvent {
                    name: "E".into(),
                    payload: "{}".into(),
                    subscribers: vec!["s".into()],
                    idempotency_key: None,
                    trace: None,
                    keys: Default::default(),
                };
                store.emit(&[event], due).await.unwrap();
            }
            let clock: SharedClock = Arc::new(ManualClock::new(T));
            assert_eq!(next_look(&store, &clock, T, poll).await, want, "{case}");
        }
    }

    #[test]
    fn a_claim_that_found_nothing_idles_until_its_look_again() {
        let mut idle = Idle::default();
        let ticket = idle.claim_started();
        idle.claim_ended(ticket, Some(T));
        assert_eq!(idle.until(), Some(T));
        idle.woken();
        assert_eq!(idle.until(), None);
    }

    #[test]
    fn a_wake_up_during_a_claim_outlives_its_report() {
        let mut idle = Idle::default();
        let ticket = idle.claim_started();
        idle.woken();
        idle.claim_ended(ticket, Some(T));
        assert_eq!(
            idle.until(),
            None,
            "the wake-up may announce rows the claim did not see"
        );
        // The next claim, started after the wake-up, is believed.
        let ticket = idle.claim_started();
        idle.claim_ended(ticket, Some(T));
        assert_eq!(idle.until(), Some(T));
    }

    #[test]
    fn a_claim_that_found_work_does_not_idle() {
        let mut idle = Idle::default();
        let ticket = idle.claim_started();
        idle.claim_ended(ticket, Some(T));
        let ticket = idle.claim_started();
        idle.claim_ended(ticket, None);
        assert_eq!(idle.until(), None);
    }
}
