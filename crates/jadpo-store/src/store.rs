//! The interface every store offers: [`Store`] for events, deliveries and
//! breakers, [`ScheduleStore`] for schedules. Beside it, what the SQLite and
//! PostgreSQL stores share: the bound on one transaction's rows and why a
//! transaction aborts. The in-memory store is in `memory/`.

use crate::types::*;
use jadpo_core::alert::SendDecision;
use jadpo_core::clock::Anchor;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::DeliveryState;
use jadpo_core::{Delivery, DeliveryId, EventId, FailureRecord, LeaseToken, Timestamp};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The most rows one claim takes, finishes one `finish_batch` writes,
/// events one `emit` writes, or deliveries one retry touches: a
/// transaction's size stays bounded. A larger request is a bug in the
/// caller, asserted, not split silently.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub const MAX_BATCH: usize = 10_000;

/// How many times a method is redone when another process changed a row it
/// read (a breaker, a limit), before it gives up as unavailable.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const MAX_TRIES: u32 = 16;

/// Why a store's transaction did not commit; `E` is its database's error.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug)]
pub(crate) enum Abort<E> {
    /// A conditional write found another version: another process won.
    /// The whole transaction is rolled back and the method redone.
    Conflict,
    /// Refused for a reason of the store's contract (lease lost, not found).
    Store(StoreError),
    Db(E),
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<E> From<StoreError> for Abort<E> {
    fn from(e: StoreError) -> Abort<E> {
        Abort::Store(e)
    }
}

/// A store of events, deliveries, handled records, attempts and breakers.
///
/// Each method is one transaction: it applies the core's decisions and
/// commits, or changes nothing and returns an error. Every write after a
/// claim names the lease token it was claimed with and is refused with
/// [`StoreError::LeaseLost`] once that lease was taken over.
pub trait Store: Send + Sync + 'static {
    /// Creates or upgrades the system tables with every migration that
    /// stops no build still running on the store (`crate::upgrade`); a
    /// contract still to apply is [`StoreError::Schema`].
    fn migrate(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether this build still runs on the store's schema: a newer build's
    /// contract makes it [`StoreError::Schema`]. Asked at every tick, so a
    /// process finds out at once and stops claiming.
    fn check_schema(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Where the store's schema stands against this build's
    /// (`crate::upgrade::Standing`): one read of the migrations table, for
    /// a readiness probe.
    fn schema_standing(&self) -> impl Future<Output = Result<crate::upgrade::Standing, StoreError>> + Send;

    /// Writes events and one due delivery per subscriber of each.
    fn emit(
        &self,
        events: &[NewEvent],
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Emitted>, StoreError>> + Send;

    /// Claims a batch of due deliveries and applies the claim-time decisions.
    fn claim(&self, req: &ClaimRequest<'_>) -> impl Future<Output = Result<ClaimReport, StoreError>> + Send;

    /// Holds a claimed delivery whose breaker opened after its claim,
    /// giving back its attempt.
    fn hold_claimed(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        connection: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives back a claimed delivery unstarted (shutdown): due now, attempt
    /// not spent.
    fn give_back(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The run's own effects committed, apart from its finish (an action
    /// whose writes share a transaction with the store): writes the
    /// delivery's handled record, fenced on the lease. A worker lost after
    /// this never runs it again: the next claim makes it `succeeded`
    /// (docs/retries.md, "At the claim, before it runs"). One kept already
    /// is kept.
    fn commit_handled(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes an attempt's outcome and its breaker verdicts: a batch of one,
    /// so a store has one way to finish.
    fn finish(&self, f: &Finish) -> impl Future<Output = Result<FinishReport, StoreError>> + Send {
        async move {
            let mut results = self.finish_batch(std::slice::from_ref(f)).await?;
            results.pop().expect("one result per finish")
        }
    }

    /// Writes many attempts' outcomes in one transaction. Each is fenced on
    /// its own lease: a lost lease refuses that one (`Err(LeaseLost)` in its
    /// place) and writes the others. The outer error means nothing was
    /// written.
    fn finish_batch(
        &self,
        batch: &[Finish],
    ) -> impl Future<Output = Result<Vec<Result<FinishReport, StoreError>>, StoreError>> + Send;

    /// How many finish batches a process should have in flight at once
    /// (`finish_batch` on separate transactions). One where writes queue
    /// for a single writer (SQLite, memory); more where each transaction
    /// runs on a server connection of its own and the finish's statements,
    /// run one after another on one connection, would otherwise bound the
    /// drain (PostgreSQL, docs/decisions.md, "Finish batches in flight").
    fn finish_writers(&self) -> usize {
        1
    }

    /// The tick's sweep.
    fn sweep(
        &self,
        now: Timestamp,
        wake_lease: Duration,
    ) -> impl Future<Output = Result<SweepReport, StoreError>> + Send;

    /// An operator's retry: failed and parked deliveries get a fresh budget
    /// from `now`, each due at its time, taken in id order (so that a key's
    /// earliest takes its slot and the rest queue in emit order). Returns
    /// those retried, in id order.
    fn retry(
        &self,
        due: &[(DeliveryId, Timestamp)],
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<DeliveryId>, StoreError>> + Send;

    /// An operator's skip (`Delivery::skip`): each failed or parked
    /// delivery not skipped yet records `by` and `now`, and a `strict`
    /// key it blocked is handed to its next queued delivery. Nothing is
    /// called. Returns those skipped, in the order asked.
    fn skip(
        &self,
        ids: &[DeliveryId],
        by: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<DeliveryId>, StoreError>> + Send;

    /// The delivery with this id; `None` when there is none (never made, or
    /// pruned).
    fn delivery(&self, id: DeliveryId) -> impl Future<Output = Result<Option<Delivery>, StoreError>> + Send;

    /// What the `queued` delivery `id` waits for: the delivery of its key
    /// that took a slot last (under `order:`, the one holding the key).
    /// `None` for a delivery that is not queued.
    fn waits_for(&self, id: DeliveryId) -> impl Future<Output = Result<Option<DeliveryId>, StoreError>> + Send;

    /// Newest first.
    fn list(&self, filter: &DeliveryFilter) -> impl Future<Output = Result<Vec<Delivery>, StoreError>> + Send;

    /// The attempts of delivery `id` (`jadpo_attempts`), oldest first.
    fn attempts(&self, id: DeliveryId) -> impl Future<Output = Result<Vec<AttemptRecord>, StoreError>> + Send;

    /// The event with this id; `None` when there is none (never made, or
    /// pruned).
    fn event(&self, id: EventId) -> impl Future<Output = Result<Option<EventRecord>, StoreError>> + Send;

    /// Every breaker row, by connection, with how many deliveries each holds.
    fn breakers(&self) -> impl Future<Output = Result<Vec<BreakerView>, StoreError>> + Send;

    /// Every connection's limit state (tokens, slots, a 429's pause), for
    /// the operator's view.
    fn limit_states(&self) -> impl Future<Output = Result<Vec<jadpo_core::limit::LimitState>, StoreError>> + Send;

    /// How many due deliveries wait for room on each connection (the queue
    /// behind its limits), for the operator's view. Read through an index
    /// of waiting deliveries only.
    fn waiting_counts(
        &self,
    ) -> impl Future<Output = Result<std::collections::BTreeMap<String, u64>, StoreError>> + Send;

    /// The alert messages, newest first, at most `limit`, with their sends.
    fn alerts(&self, limit: usize) -> impl Future<Output = Result<Vec<AlertRecord>, StoreError>> + Send;

    /// Claims up to `limit` alert messages whose send is due at `now`
    /// (`jadpo_core::alert::Sends::claimable`), longest due first, each
    /// until `now + lease`. The claim counts a send: the returned records
    /// carry that count, the fence of [`Store::finish_alert_send`].
    fn claim_alert_sends(
        &self,
        now: Timestamp,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<AlertRecord>, StoreError>> + Send;

    /// Writes how the `attempt`-th send of message `id` ended. False, and
    /// nothing written, when a later claim took the message over or it was
    /// sent or given up already.
    fn finish_alert_send(
        &self,
        id: i64,
        attempt: u32,
        decision: &SendDecision,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Adds `counts` to the per-minute summary (`jadpo_minutes`), summing
    /// with what other processes added, and forgets the minutes before
    /// `forget_before`. At most 10,000 counts.
    fn add_minutes(
        &self,
        counts: &[MinuteCount],
        forget_before: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The per-minute summary from the minute `since` is in, by minute then
    /// series: a bounded read (minutes × series), whatever the deliveries.
    fn minutes(&self, since: Timestamp) -> impl Future<Output = Result<Vec<MinuteCount>, StoreError>> + Send;

    /// How many deliveries are in each state (states with none are absent).
    /// Reads every delivery: for operators' commands and metrics, not pages.
    fn counts(&self) -> impl Future<Output = Result<BTreeMap<DeliveryState, u64>, StoreError>> + Send;

    /// As [`Store::counts`], each at most `cap`: a bounded read (each state
    /// through an index, stopping at `cap`), for a page that must answer
    /// fast whatever the store holds. A count of `cap` means "`cap` or more".
    fn counts_up_to(&self, cap: u64) -> impl Future<Output = Result<BTreeMap<DeliveryState, u64>, StoreError>> + Send;

    /// What `/metrics` shows beside [`Store::counts_up_to`]: breakers with
    /// their held deliveries, waiting deliveries and each subscriber's
    /// oldest due delivery, each a bounded read (see [`GaugeQuery`]).
    fn gauges(&self, q: &GaugeQuery<'_>) -> impl Future<Output = Result<Gauges, StoreError>> + Send;

    /// Retention: deletes up to `batch` deliveries finished before `before`,
    /// with their attempts and handled records, and the events left with no
    /// delivery. Never a delivery that is not finished. Returns how many
    /// deliveries it deleted; call again until it returns less than `batch`.
    fn prune(&self, before: Timestamp, batch: usize) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// The store's scaled clock (`jadpo_clock`), if a process ever started
    /// on it with a time scale: every process and command on the store
    /// reads engine time from it (`jadpo_core::clock`).
    fn clock_anchor(&self) -> impl Future<Output = Result<Option<Anchor>, StoreError>> + Send;

    /// Keeps `anchor` as the store's clock unless it keeps one already, and
    /// returns the one it keeps: of two processes starting at once, the
    /// first to commit wins and the other reads the winner's. Never moves a
    /// kept anchor.
    fn keep_clock_anchor(&self, anchor: Anchor) -> impl Future<Output = Result<Anchor, StoreError>> + Send;

    /// Keeps a console sign-in until `expires_at` (real time), by a hash
    /// of its secret (a store's reader cannot sign in with what is kept),
    /// and forgets sign-ins that expired by `now`.
    fn start_session(
        &self,
        hash: &str,
        expires_at: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether the sign-in with this hash is kept and not expired at `now`:
    /// every process serving the console asks the store, so a sign-out in
    /// one is a sign-out in all.
    fn session_alive(&self, hash: &str, now: Timestamp) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Forgets a sign-in (sign-out). Forgetting one not kept is no error.
    fn end_session(&self, hash: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The earliest time a claim could find something: the earliest due
    /// time of a due delivery, or the earliest lease end of a running one.
    /// `None` when there is neither. An idle worker sleeps until then rather
    /// than until its next poll, so a retry scheduled by backoff starts on
    /// time.
    fn next_due(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Wakes `wake` (`notify_one`) whenever another process may have made a
    /// delivery due now: an emit, an operator's retry, a release, a probe's
    /// wake-up. Runs until dropped, reconnecting by itself after an outage;
    /// after each (re)connection it wakes once, since what was sent while it
    /// was not listening is lost. A store only one process writes (memory),
    /// or one whose other writers are left to the poll (SQLite), has nothing
    /// to listen to and returns at once: that process's own wake is enough.
    fn listen(&self, wake: Arc<Notify>) -> impl Future<Output = ()> + Send {
        drop(wake);
        async {}
    }
}

/// Schedules' state, in the same store as the deliveries.
pub trait ScheduleStore: Store {
    /// Claims the due ones among `schedules` (each with the due time to
    /// start from when it has no row yet) for `worker` until `now + lease`.
    /// A claim taking over a lost run records `lease_expired` on it.
    fn claim_schedules(
        &self,
        schedules: &[(String, Timestamp)],
        worker: &str,
        now: Timestamp,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<ScheduleClaim>, StoreError>> + Send;

    /// Ends the run under `token` at `now`: next due at `next_due`. Returns
    /// the schedule's alert when this failure raises it, and keeps it as an
    /// alert message. A lost lease changes nothing and is `LeaseLost`.
    fn finish_schedule(
        &self,
        name: &str,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<ScheduleAlert>, StoreError>> + Send;

    /// Every schedule's state, by name.
    fn schedules(&self) -> impl Future<Output = Result<Vec<ScheduleState>, StoreError>> + Send;
}
