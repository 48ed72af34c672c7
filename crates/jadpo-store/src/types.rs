//! The plain data a store takes and returns.

use jadpo_core::alert::{AlertMessage, Sends};
use jadpo_core::limit::Limits;
use jadpo_core::{
    Alert, Budget, CallVerdict, Delivery, DeliveryId, DeliveryState, EventId, FailureRecord, LeaseToken, Outcome,
    Timestamp, Transition,
};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What the store needs to know of a subscriber at the claim: its budget and
/// the connections its action may call, itself or through actions it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Its `retry:` budget: how many attempts, within how long.
    pub budget: Budget,
    /// Every connection its action may call, itself or through the actions it
    /// runs: the breakers that can hold it and the limits it takes room on.
    pub connections: Vec<String>,
}

/// Every subscriber's route, by subscriber name, and each limited
/// connection's limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes {
    routes: BTreeMap<String, Route>,
    limits: BTreeMap<String, Limits>,
}

impl Routes {
    /// No routes and no limits yet: add them with [`Routes::insert`] and
    /// [`Routes::limit`].
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Sets `subscriber`'s route, replacing the one it had.
    pub fn insert(&mut self, subscriber: impl Into<String>, route: Route) {
        self.routes.insert(subscriber.into(), route);
    }

    /// `subscriber`'s route. `None` for a subscriber the app no longer
    /// declares: the claim fails its deliveries as a defect
    /// ([`unknown_subscriber`]).
    pub fn get(&self, subscriber: &str) -> Option<&Route> {
        self.routes.get(subscriber)
    }

    /// Limits `connection`'s calls (`rate:`, `concurrency:`).
    pub fn limit(&mut self, connection: impl Into<String>, limits: Limits) {
        if !limits.is_none() {
            self.limits.insert(connection.into(), limits);
        }
    }

    /// The limited connections' limits.
    pub fn limits(&self) -> &BTreeMap<String, Limits> {
        &self.limits
    }

    /// The concurrency-limited ones among `connections`: a run holds a slot
    /// on each, given back with its finish.
    pub fn slots_of(&self, connections: &[String]) -> Vec<String> {
        connections
            .iter()
            .filter(|c| self.limits.get(*c).is_some_and(|l| l.concurrency.is_some()))
            .cloned()
            .collect()
    }
}

/// The record of a delivery whose subscriber is no longer in the app: a
/// defect, failed until the app declares it again and an operator retries.
pub fn unknown_subscriber() -> FailureRecord {
    FailureRecord::unknown_subscriber()
}

/// An event to emit, with the subscribers that get a delivery of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// The event's name, as the app declares it.
    pub name: String,
    /// The event's JSON. Kept for the action; never logged.
    pub payload: String,
    /// The subscribers that get a delivery of it, one each.
    pub subscribers: Vec<String>,
    /// The caller's name for this event (at most [`MAX_IDEMPOTENCY_KEY`]
    /// bytes), unique per event name while the event is kept: emitting
    /// the same key and payload again returns the first event
    /// ([`Emitted::duplicate`]) and makes nothing; another payload is
    /// [`StoreError::IdempotencyConflict`].
    pub idempotency_key: Option<String>,
    /// The trace it was emitted in, kept with it so that each attempt, in
    /// whichever process and however late, joins that trace.
    pub trace: Option<jadpo_core::TraceContext>,
    /// The key of each keyed subscriber's delivery, by subscriber: its
    /// `key:` over this event, with its `order:` or
    /// `concurrency_per_key:`. A subscriber not named has none.
    pub keys: std::collections::BTreeMap<String, jadpo_core::key::Keyed>,
}

/// The longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// What an emit made of one event: its ids and its deliveries, or those of the
/// event emitted before under the same idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emitted {
    /// The event's id in this store.
    pub event_id: EventId,
    /// Unique across every store and environment (a UUIDv7), where
    /// `event_id` is unique only within its store: what a receiver can
    /// tell events apart by (signed calls' `webhook-id` derive from it).
    pub public_id: String,
    /// Its deliveries, one per subscriber.
    pub deliveries: Vec<DeliveryId>,
    /// An event emitted before under the same idempotency key: nothing was
    /// made, and these are its ids.
    pub duplicate: bool,
}

/// A new event's public id: a UUIDv7, so ids sort by when they were made.
pub fn new_public_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// What a worker asks of one claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRequest<'a> {
    /// The worker's name: the owner of the leases it takes.
    pub worker: &'a str,
    /// Every subscriber's budget and connections, from the app.
    pub routes: &'a Routes,
    /// The claim's time (engine time): what is due by then can be claimed.
    pub now: Timestamp,
    /// The most due rows one claim looks at.
    pub limit: usize,
    /// How long the worker holds what it claims; outlasts the run's limit.
    pub lease: Duration,
}

/// A delivery a worker now holds and may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// As claimed: running, this attempt counted, under the new lease.
    pub delivery: Delivery,
    /// Its subscriber's budget, for the decision after the run.
    pub budget: Budget,
    /// The connections its action may call, from its route: the breakers
    /// checked just before the run, and the limits whose slots its finish
    /// gives back.
    pub connections: Vec<String>,
    /// The connections it probes.
    pub probe_for: Vec<String>,
    /// Its event's name and JSON, for binding the action's arguments.
    pub event_name: String,
    /// The event's JSON. Kept for the action; never logged.
    pub payload: String,
    /// Its event's public id ([`Emitted::public_id`]).
    pub event_public_id: String,
    /// How many emits deep its event is: 0 for an event from outside, one
    /// more for each action that emitted it from another's delivery.
    pub event_depth: u32,
    /// The trace its event was emitted in ([`NewEvent::trace`]).
    pub event_trace: Option<jadpo_core::TraceContext>,
    /// Released from a hold since its last run
    /// ([`jadpo_core::Delivery::released_since_run`], read before the
    /// claim): its attempt's span shows the release.
    pub released: bool,
}

impl Claimed {
    /// The token of the lease it was claimed under: every write about this run
    /// names it, and is refused once the lease was taken over.
    pub fn token(&self) -> LeaseToken {
        self.delivery
            .lease
            .as_ref()
            .expect("a claimed delivery has a lease")
            .token
    }

    /// Its finish: `outcome`, the attempt run from `started_at` to
    /// `ended_at`, fenced on this claim's lease, with the probe places it
    /// took and its claimed row. No call, slot, 429 or emit: add them with
    /// `Finish { calls, ..claimed.finish(..) }`.
    pub fn finish(&self, outcome: Outcome, started_at: Timestamp, ended_at: Timestamp) -> Finish {
        Finish {
            id: self.delivery.id,
            token: self.token(),
            outcome,
            calls: Vec::new(),
            probe_for: self.probe_for.clone(),
            slots: Vec::new(),
            rate_limited: Vec::new(),
            started_at,
            ended_at,
            claimed: Some(self.delivery.clone()),
            emits: Emits::default(),
        }
    }
}

/// What one claim did, beyond the deliveries it hands out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimReport {
    /// The deliveries this worker now runs, each under its new lease.
    pub claimed: Vec<Claimed>,
    /// Found with a handled record: their run committed before its worker was
    /// lost, so they are `succeeded` without running again.
    pub succeeded: Vec<DeliveryId>,
    /// Failed at the claim without running: their budget was spent, or their
    /// subscriber is gone from the app. No attempt counted.
    pub gave_up: Vec<DeliveryId>,
    /// Held behind an open breaker on a connection they call, their attempt not
    /// spent.
    pub held: Vec<DeliveryId>,
    /// Of those, the ones whose event is in a trace: what a span of the
    /// hold needs.
    pub held_in_trace: Vec<HeldInTrace>,
    /// Would have run, but a connection's limit had no room: due again at
    /// the time given, no attempt spent.
    pub waiting: Vec<(DeliveryId, Timestamp)>,
    /// Taken over from a worker whose lease ended: their last failure is now
    /// `lease_expired`. Each is also in one of the other lists.
    pub lease_expired: Vec<DeliveryId>,
    /// Every breaker the claim decided with, as it left them (a connection
    /// with no row is closed). The check just before each run uses these
    /// and the breakers this process's own finishes wrote, newest version
    /// first, so it needs no read of its own.
    pub breakers: Vec<jadpo_core::Breaker>,
}

/// A delivery held at its claim, in its event's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldInTrace {
    /// The delivery held.
    pub delivery: DeliveryId,
    /// The connection whose breaker holds it.
    pub connection: String,
    /// Its event's name.
    pub event_name: String,
    /// The trace its event was emitted in.
    pub event_trace: jadpo_core::TraceContext,
}

/// The end of an attempt, for the store to write down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish {
    /// The delivery the attempt was of.
    pub id: DeliveryId,
    /// The lease it was claimed under: the fence of this write.
    pub token: LeaseToken,
    /// The core's decision on how the attempt ended: succeeded, a retry at a
    /// time, failed or parked (docs/retries.md).
    pub outcome: Outcome,
    /// For each connection the attempt called through its real driver, how
    /// the last call ended. Fakes and recordings are not listed.
    pub calls: Vec<(String, CallVerdict)>,
    /// The connections it was the probe of, from its claim.
    pub probe_for: Vec<String>,
    /// The concurrency-limited connections its claim took a slot on: the
    /// finish gives them back.
    pub slots: Vec<String>,
    /// The connections that answered 429, with their `Retry-After`: every
    /// process pauses each until then, or halves its rate for a minute.
    pub rate_limited: Vec<(String, Option<Duration>)>,
    /// When the run started.
    pub started_at: Timestamp,
    /// When the run ended: the attempt's end, the time of its emits and of
    /// whatever its verdicts release or resolve.
    pub ended_at: Timestamp,
    /// The delivery as its claim returned it (`Claimed::delivery`), if the
    /// caller has it: a store may plan the finish from it instead of
    /// reading the row, since while it runs under this lease only this
    /// finish changes it. The write is fenced on the lease either way, and a
    /// store that finds the lease moved reads the row. Anything but the
    /// claim's own row is ignored (`id`, token and state must match).
    pub claimed: Option<jadpo_core::Delivery>,
    /// The events the run emitted: written with the outcome, in its
    /// transaction, only when the run succeeded (and its lease held), so a
    /// rerun after a crash cannot emit twice.
    pub emits: Emits,
}

impl Finish {
    /// The row this finish may be planned from without reading it: the
    /// claim's own row, running under the finish's lease. While it runs
    /// under that lease only this finish changes it, and every store's write
    /// is fenced on the lease, so a row that moved after all fails the fence
    /// and is then read.
    pub fn claimed_row(&self) -> Option<&jadpo_core::Delivery> {
        self.claimed.as_ref().filter(|d| {
            d.id == self.id
                && d.state == jadpo_core::DeliveryState::Running
                && d.lease.as_ref().map(|l| l.token) == Some(self.token)
        })
    }
}

/// A run's emitted events, each with one delivery per subscriber, all at
/// one chain depth (the run's event's depth plus one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Emits {
    /// The chain depth of the events: the run's event's depth plus one.
    pub depth: u32,
    /// The events, each with the subscribers that get a delivery of it.
    pub events: Vec<NewEvent>,
}

/// What a finish did beyond writing the delivery's own row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinishReport {
    /// Each breaker the attempt's calls opened, reopened or closed, by
    /// connection.
    pub transitions: Vec<(String, Transition)>,
    /// How many held deliveries it released, due now, because a breaker it
    /// closed was holding them.
    pub released: usize,
    /// The breakers this finish changed, as it left them.
    pub breakers: Vec<jadpo_core::Breaker>,
    /// The events its run emitted, as written.
    pub emitted: Vec<Emitted>,
    /// Its end gave its key's slot up (docs/retries.md, "Order per key"):
    /// the key's next queued delivery, if it has one, is due now, and a
    /// worker that found nothing due should look again.
    pub freed_slot: bool,
}

/// What one sweep of the tick did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Held deliveries woken to be a probe.
    pub woken: Vec<DeliveryId>,
    /// Held deliveries released because their breaker is closed.
    pub released: usize,
    /// The outage alerts this sweep raised: one per outage, kept as alert
    /// messages.
    pub alerts: Vec<Alert>,
}

/// An event as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// Its id in this store.
    pub id: EventId,
    /// See [`Emitted::public_id`].
    pub public_id: String,
    /// The event's name, as the app declares it.
    pub name: String,
    /// The event's JSON. Kept for the action; never logged.
    pub payload: String,
    /// When it was emitted (engine time).
    pub emitted_at: Timestamp,
    /// The trace it was emitted in ([`NewEvent::trace`]).
    pub trace: Option<jadpo_core::TraceContext>,
}

/// An alert message as kept (`jadpo_alerts`), newest first in listings,
/// with its sends to the app's alert route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertRecord {
    /// Its id in this store, in the order messages were kept: a send's end
    /// names it.
    pub id: i64,
    /// Unique across stores: the `webhook-id` of its sends derives from it.
    pub public_id: String,
    /// What it says: an outage raised or resolved, or a schedule failing.
    pub message: AlertMessage,
    /// Its sends to the app's alert route: how many, when the next is due, how
    /// they ended.
    pub sends: Sends,
}

/// One count of the per-minute summary (`jadpo_minutes`): what happened in
/// the minute starting at `minute` (engine time), by series: an outcome
/// (`succeeded`, `retried`, `failed`, `parked`, `held`), a connection's
/// calls (`calls:NAME`, `unavailable:NAME`) or a breaker's changes
/// (`opened:NAME`, `probe:NAME`, `closed:NAME`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MinuteCount {
    /// The minute's start.
    pub minute: Timestamp,
    /// The series: `succeeded`, `calls:NAME`, `opened:NAME` and so on.
    pub series: String,
    /// How many, summed over every process that added to it.
    pub n: u64,
}

/// The start of the minute `t` is in.
pub fn minute_of(t: Timestamp) -> Timestamp {
    Timestamp::from_millis(t.as_millis().div_euclid(60_000) * 60_000)
}

/// A breaker as listed, with the number of deliveries it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerView {
    /// The breaker's row (`jadpo_circuit_breakers`).
    pub breaker: jadpo_core::Breaker,
    /// How many deliveries it holds now.
    pub held: u64,
}

/// What `/metrics` asks a store for, beside the counts by state: every
/// figure a bounded read, whatever the store holds.
#[derive(Clone, Copy, Debug)]
pub struct GaugeQuery<'a> {
    /// The subscribers whose oldest due delivery to find: the app knows
    /// them, so each is one indexed probe rather than a walk of the queue.
    pub subscribers: &'a [String],
    /// The connections whose waiting deliveries to count.
    pub connections: &'a [String],
    /// A delivery is late when it is due at `now` (engine time).
    pub now: Timestamp,
    /// The most any count reads: a count of `cap` means "`cap` or more".
    pub cap: u64,
}

/// What [`crate::Store::gauges`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Every breaker row, by connection, its held deliveries counted up to
    /// the cap.
    pub breakers: Vec<BreakerView>,
    /// Due deliveries waiting for room on each connection asked about, up
    /// to the cap; absent when none.
    pub waiting: std::collections::BTreeMap<String, u64>,
    /// For each subscriber asked about with a delivery due at `now`, the
    /// earliest `due_at` of those; absent when none is due. A delivery
    /// waiting out its backoff (due later) is not late.
    pub oldest_due: std::collections::BTreeMap<String, Timestamp>,
}

/// One attempt in a delivery's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The delivery it was an attempt of.
    pub delivery: DeliveryId,
    /// Its number: 1 for the delivery's first attempt, counted at its claim.
    pub attempt: u32,
    /// When the run started.
    pub started_at: Timestamp,
    /// When the run ended.
    pub ended_at: Timestamp,
    /// The state it left the delivery in: `due` for a retry, else `succeeded`,
    /// `failed` or `parked`.
    pub state: DeliveryState,
    /// Why it failed, when it did not succeed.
    pub failure: Option<FailureRecord>,
}

/// Which deliveries a listing shows ([`Store::list`](crate::Store::list)):
/// every field set narrows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    /// Only deliveries in this state.
    pub state: Option<DeliveryState>,
    /// Only this subscriber's deliveries.
    pub subscriber: Option<String>,
    /// Only deliveries held behind this connection's breaker.
    pub connection: Option<String>,
    /// Only the deliveries of this event.
    pub event: Option<EventId>,
    /// Only the deliveries with this key (their subscriber's `key:`).
    pub key: Option<String>,
    /// Only deliveries older than this one (smaller ids): the next page of
    /// a listing, newest first.
    pub before: Option<DeliveryId>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl DeliveryFilter {
    /// Whether `d` passes every field of the filter but `limit`, which the
    /// caller applies.
    pub fn matches(&self, d: &Delivery) -> bool {
        self.state.is_none_or(|s| d.state == s)
            && self.before.is_none_or(|b| d.id < b)
            && self.subscriber.as_deref().is_none_or(|s| d.subscriber == s)
            && self.event.is_none_or(|e| d.event_id == e)
            && self
                .key
                .as_deref()
                .is_none_or(|k| d.key.as_ref().is_some_and(|dk| dk.as_str() == k))
            && self
                .connection
                .as_deref()
                .is_none_or(|c| d.held.as_ref().is_some_and(|h| h.connection == c))
    }
}

/// Why a store's method failed: each has a stable code ([`StoreError::code`])
/// and a message that says what happened. More may come: match the ones
/// you handle and keep an arm for the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The write names a lease that is no longer the delivery's: another
    /// worker took it over, or it finished. Nothing was changed.
    LeaseLost(DeliveryId),
    /// The same, for a schedule's run.
    ScheduleLeaseLost(String),
    /// The write names a delivery that does not exist: never made, or pruned.
    NotFound(DeliveryId),
    /// The store could not be reached, or failed before anything committed.
    Unavailable(String),
    /// The store's URL is malformed: a configuration mistake to fix, not a
    /// fault to retry.
    InvalidUrl(String),
    /// An event of this name was emitted under the same idempotency key
    /// with another payload. Nothing was made.
    IdempotencyConflict(String),
    /// `store.transaction_pooling`: the URL leads to connections that do
    /// not keep a session of their own (PgBouncer in transaction or
    /// statement mode), which a PostgreSQL store needs. Refused when the
    /// store is opened, before anything is written; the message names the
    /// fix.
    TransactionPooling(String),
    /// The store's schema and this build do not go together: the schema is
    /// newer than this build runs on, or a migration would stop builds that
    /// may still be running (`crate::upgrade`). A deploy to finish, not a
    /// fault to retry.
    Schema(crate::upgrade::Refusal),
}

impl StoreError {
    /// The stable error code a command, the API or a log line shows for it.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "store.unavailable",
            StoreError::InvalidUrl(_) => "store.url_invalid",
            StoreError::TransactionPooling(_) => "store.transaction_pooling",
            StoreError::Schema(refusal) => refusal.code(),
            StoreError::IdempotencyConflict(_) => "event.idempotency_conflict",
            StoreError::LeaseLost(_) | StoreError::ScheduleLeaseLost(_) | StoreError::NotFound(_) => "store.failed",
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::LeaseLost(id) => write!(f, "delivery {id}: its lease was taken over; nothing was written"),
            StoreError::ScheduleLeaseLost(name) => {
                write!(f, "schedule {name}: its lease was taken over; nothing was written")
            }
            StoreError::NotFound(id) => write!(f, "delivery {id} does not exist"),
            StoreError::Unavailable(why) => write!(f, "the store is unavailable: {why}"),
            StoreError::InvalidUrl(why) => write!(f, "the store URL is not valid: {why}"),
            StoreError::Schema(refusal) => write!(f, "{refusal}"),
            StoreError::IdempotencyConflict(name) => write!(
                f,
                "a {name} event was emitted with this idempotency key and another payload; \
                 send the same payload, or another key"
            ),
            StoreError::TransactionPooling(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StoreError {}
