//! What runs a delivery's action: the [`Executor`] the workers call,
//! `execute` (one run under its time limit, a panic a defect), and the
//! record of the calls an attempt made, for the breakers.

use futures::FutureExt;
use jadpo_core::AttemptEnd;
use jadpo_core::{CallVerdict, DeliveryId, Failure, Timestamp};
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a run is for: a subscriber's delivery, a schedule's run or a
/// route's request. Only a delivery has an id and attempts, so only its
/// variant carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Delivery {
        id: DeliveryId,
        /// This attempt's number, 1 for the first.
        attempt: u32,
    },
    /// A schedule has no event: `payload` is null.
    Schedule,
    /// A route's request (`/app/...`): `payload` is its input, `path` its
    /// path parameters, `subscriber` the route's name. Its calls never
    /// count for a breaker; Jadpo never retries it.
    Route,
}

/// How deep a chain of emits may go: an event emitted by an action that
/// runs for an event emitted by an action ... at most this many times.
/// Deeper is a defect (`emit.depth_exceeded`): a cycle of events that never
/// ends would otherwise fill the store.
pub const MAX_EMIT_DEPTH: u32 = 16;

/// The events a run emitted, in order: written only when the run
/// succeeded, in the transaction that records its outcome.
#[derive(Clone, Debug, Default)]
pub struct EmitLog(Arc<Mutex<Vec<(String, serde_json::Value)>>>);

impl EmitLog {
    /// `event` with `payload`, emitted by a run whose own event is `depth`
    /// emits deep (0 for an event from outside).
    pub fn push(&self, event: &str, payload: serde_json::Value, depth: u32) -> Result<(), Failure> {
        if depth >= MAX_EMIT_DEPTH {
            return Err(
                Failure::new("emit.depth_exceeded", jadpo_core::FailureKind::InternalFault).with_field("event", event),
            );
        }
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((event.to_owned(), payload));
        Ok(())
    }

    /// What was emitted, leaving the log empty.
    pub fn take(&self) -> Vec<(String, serde_json::Value)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Everything an action's run may know.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub kind: RunKind,
    /// The subscriber's name, the schedule's or the route's.
    pub subscriber: String,
    pub event_name: String,
    /// The event's public id, unique across stores (empty for a schedule's
    /// run): signed calls' `webhook-id` derive from it.
    pub event_public_id: String,
    pub payload: serde_json::Value,
    /// Engine time when the run started.
    pub started_at: Timestamp,
    /// The run's time limit, in real time.
    pub deadline: tokio::time::Instant,
    /// The calls it makes through real drivers, for the breakers.
    pub calls: CallLog,
    /// A route's path parameters; empty otherwise.
    pub path: BTreeMap<String, String>,
    /// How many emits deep its event is: 0 for an event from outside.
    pub depth: u32,
    /// The events its `emit` statements made.
    pub emits: EmitLog,
    /// The trace it belongs to: its event's, or its route request's. Its
    /// calls carry it on.
    pub trace: Option<jadpo_core::TraceContext>,
    /// Where the spans of its calls go: its engine's.
    pub spans: crate::spans::Spans,
}

impl RunContext {
    /// The delivery it runs, if it runs one.
    pub fn delivery(&self) -> Option<DeliveryId> {
        match self.kind {
            RunKind::Delivery { id, .. } => Some(id),
            RunKind::Schedule | RunKind::Route => None,
        }
    }
}

/// Runs the action of a claimed delivery. `Ok` is success; an `Err` carries
/// the failure whose kind decides what happens next. The worker enforces
/// the time limit and catches panics: an executor need not.
pub trait Executor: Send + Sync + 'static {
    fn run(&self, ctx: RunContext) -> impl Future<Output = Result<(), Failure>> + Send;
}

/// An executor from an async function: for tests, and for an embedded
/// program whose subscribers all run one Rust function.
pub struct FnExecutor<F>(pub F);

impl<F, Fut> Executor for FnExecutor<F>
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Failure>> + Send,
{
    fn run(&self, ctx: RunContext) -> impl Future<Output = Result<(), Failure>> + Send {
        (self.0)(ctx)
    }
}

/// Per connection, how the last real call of an attempt ended, and the call
/// under way if the run's limit stops it mid-call.
#[derive(Clone, Debug, Default)]
pub struct CallLog(Arc<Mutex<CallLogState>>);

#[derive(Debug, Default)]
struct CallLogState {
    order: Vec<String>,
    last: BTreeMap<String, CallVerdict>,
    in_flight: Option<String>,
    /// Every connection called through its real driver, in order, whatever
    /// the answer: the attempt-duration histogram's labels.
    called: Vec<String>,
    /// Connections that answered 429, with the longest `Retry-After`.
    rate_limited: BTreeMap<String, Option<Duration>>,
}

impl CallLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, CallLogState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call through `connection`'s real driver starts.
    pub fn started(&self, connection: &str) {
        let mut s = self.lock();
        s.in_flight = Some(connection.to_owned());
        if !s.called.iter().any(|c| c == connection) {
            s.called.push(connection.to_owned());
        }
    }

    /// Every connection the run called through its real driver.
    pub fn called(&self) -> Vec<String> {
        self.lock().called.clone()
    }

    /// It ended; `verdict` is `None` for a fake's or a recording's answer,
    /// which never counts.
    pub fn ended(&self, connection: &str, verdict: Option<CallVerdict>) {
        let mut s = self.lock();
        s.in_flight = None;
        if let Some(v) = verdict {
            if !s.last.contains_key(connection) {
                s.order.push(connection.to_owned());
            }
            s.last.insert(connection.to_owned(), v);
        }
    }

    /// `connection`'s provider answered 429, asking to wait `retry_after`.
    pub fn rate_limited(&self, connection: &str, retry_after: Option<Duration>) {
        let mut s = self.lock();
        let entry = s.rate_limited.entry(connection.to_owned()).or_insert(retry_after);
        *entry = (*entry).max(retry_after);
    }

    /// The connections that answered 429 in this run.
    pub fn rate_limits(&self) -> Vec<(String, Option<Duration>)> {
        self.lock().rate_limited.iter().map(|(c, r)| (c.clone(), *r)).collect()
    }

    /// One verdict per connection, by its last call. A call still in flight
    /// when the run was stopped got no answer: unavailable.
    pub fn verdicts(&self, stopped: bool) -> Vec<(String, CallVerdict)> {
        let mut s = self.lock();
        if stopped {
            if let Some(c) = s.in_flight.take() {
                if !s.last.contains_key(&c) {
                    s.order.push(c.clone());
                }
                s.last.insert(c, CallVerdict::Unavailable);
            }
        }
        s.order.iter().map(|c| (c.clone(), s.last[c])).collect()
    }
}

/// The subscribers the engine serves: each one's budget, connections and
/// time limit.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub routes: jadpo_store::Routes,
    timeouts: BTreeMap<String, Duration>,
    /// Each event's subscribers, for the events actions emit.
    subscribers: BTreeMap<String, Vec<String>>,
    /// Each keyed subscriber's `key:`, the fields after `event`, and its
    /// `order:` or `concurrency_per_key:`.
    key_paths: BTreeMap<String, (Vec<String>, Option<jadpo_core::key_rule::KeyRule>)>,
    pub schedules: Vec<ScheduleSpec>,
    /// Every connection a subscriber may call or the app declares: the
    /// labels of the per-connection histograms, made once.
    connections: std::collections::BTreeSet<String>,
}

/// A schedule the engine starts when due.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleSpec {
    pub name: String,
    pub trigger: jadpo_lang::Trigger,
    pub timeout: Duration,
}

impl Catalog {
    pub fn new() -> Catalog {
        Catalog::default()
    }

    pub fn add(&mut self, subscriber: &str, route: jadpo_store::Route, timeout: Duration) {
        self.connections.extend(route.connections.iter().cloned());
        self.routes.insert(subscriber, route);
        self.timeouts.insert(subscriber.to_owned(), timeout);
    }

    /// The subscribers of a checked app.
    pub fn from_app(app: &jadpo_lang::App) -> Catalog {
        let mut c = Catalog::new();
        for e in app.events.keys() {
            let subscribers = app.subscribers_of(e).map(|s| s.name.clone()).collect();
            c.subscribers.insert(e.clone(), subscribers);
        }
        for s in app.subscribers.values() {
            if let Some(path) = &s.key {
                c.key_paths.insert(s.name.clone(), (path.clone(), s.key_rule));
            }
            // An action's or a capability's: the capabilities' fillers
            // included, so the breaker of any of them holds the delivery.
            let connections = app
                .runnable(&s.run.action)
                .map(|a| a.connections().iter().cloned().collect())
                .unwrap_or_default();
            c.add(
                &s.name,
                jadpo_store::Route {
                    budget: s.budget,
                    connections,
                },
                s.timeout,
            );
        }
        for (name, conn) in &app.connections {
            c.connections.insert(name.clone());
            c.routes.limit(name, conn.limits());
        }
        c.schedules = app
            .schedules
            .values()
            .map(|s| ScheduleSpec {
                name: s.name.clone(),
                trigger: s.trigger.clone(),
                timeout: s.timeout,
            })
            .collect();
        c
    }

    /// The keys of an event an action emitted. The run has succeeded and
    /// its emits are written with its end, so a value that cannot be a key
    /// (the app file checked its type; an empty or over-long string is
    /// left) leaves that delivery without one, logged, rather than losing
    /// the run's work.
    fn keys(
        &self,
        event: &str,
        subscribers: &[String],
        payload: &serde_json::Value,
    ) -> BTreeMap<String, jadpo_core::key::Keyed> {
        let mut keys = BTreeMap::new();
        for s in subscribers {
            let Some((path, rule)) = self.key_paths.get(s) else {
                continue;
            };
            match crate::emit::delivery_key(path, payload) {
                Ok(key) => {
                    keys.insert(s.clone(), jadpo_core::key::Keyed { key, rule: *rule });
                }
                Err(e) => tracing::warn!(
                    event,
                    subscriber = %s,
                    field = %path.join("."),
                    reason = %e,
                    "emit.key_invalid"
                ),
            }
        }
        keys
    }

    /// A successful run's emitted events, each with one delivery per
    /// subscriber of it, at `depth`, in the trace of the event whose
    /// delivery emitted them.
    pub fn emits(
        &self,
        events: Vec<(String, serde_json::Value)>,
        depth: u32,
        trace: Option<&jadpo_core::TraceContext>,
    ) -> jadpo_store::Emits {
        jadpo_store::Emits {
            depth,
            events: events
                .into_iter()
                .map(|(name, payload)| {
                    let subscribers = self.subscribers.get(&name).cloned().unwrap_or_default();
                    let keys = self.keys(&name, &subscribers, &payload);
                    jadpo_store::NewEvent {
                        subscribers,
                        // Written straight into a buffer: `Display` goes
                        // through a formatter for every piece. A value's
                        // keys are text, so it cannot fail.
                        payload: serde_json::to_string(&payload).unwrap_or_default(),
                        name,
                        idempotency_key: None,
                        trace: trace.cloned(),
                        keys,
                    }
                })
                .collect(),
        }
    }

    /// Every connection its subscribers may call or the app declares.
    pub fn connections(&self) -> &std::collections::BTreeSet<String> {
        &self.connections
    }

    pub fn timeout(&self, subscriber: &str) -> Duration {
        self.timeouts
            .get(subscriber)
            .copied()
            .unwrap_or(jadpo_lang::app::DEFAULT_TIMEOUT)
    }

    /// The longest time limit: a claim's lease covers it.
    pub fn longest_timeout(&self) -> Duration {
        self.timeouts
            .values()
            .copied()
            .max()
            .unwrap_or(jadpo_lang::app::DEFAULT_TIMEOUT)
    }
}

/// Runs an action under its time limit. A panic is a defect, never a
/// crashed worker; a run past its limit is `deadline_exceeded`, and `true`
/// says it was stopped mid-run.
pub async fn execute<E: Executor>(executor: &E, ctx: RunContext, limit: Duration) -> (AttemptEnd, bool) {
    let run = AssertUnwindSafe(executor.run(ctx)).catch_unwind();
    match tokio::time::timeout(limit, run).await {
        Ok(Ok(Ok(()))) => (AttemptEnd::Succeeded, false),
        Ok(Ok(Err(failure))) => (AttemptEnd::Failed(failure), false),
        Ok(Err(_panic)) => (AttemptEnd::Failed(Failure::panicked()), false),
        // Dropping the run's future is what stops it: nothing it did is kept.
        Err(_elapsed) => (AttemptEnd::Failed(Failure::deadline_exceeded()), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An action's emit gets its keyed subscribers' keys; a value that
    /// cannot be a key leaves that delivery without one (the run already
    /// succeeded), never the emit lost.
    #[test]
    fn a_runs_emits_carry_their_keys() {
        let src = r#"
            event Paid { id: string }
            action noop() uses c
            connection c { base_url: "http://localhost" }
            subscriber keyed { on: Paid  run: noop()  key: event.id }
            subscriber plain { on: Paid  run: noop() }
        "#;
        let catalog = Catalog::from_app(&jadpo_lang::check("app.jadpo", src).app.unwrap());
        let emits = catalog.emits(
            vec![
                ("Paid".into(), serde_json::json!({"id": "c-42"})),
                ("Paid".into(), serde_json::json!({"id": ""})),
            ],
            1,
            None,
        );
        let keys = |i: usize| -> Vec<(String, String)> {
            emits.events[i]
                .keys
                .iter()
                .map(|(s, k)| (s.clone(), k.key.as_str().to_owned()))
                .collect()
        };
        assert_eq!(keys(0), [("keyed".to_string(), "c-42".to_string())]);
        assert!(keys(1).is_empty());
        assert_eq!(emits.events[1].subscribers, ["keyed", "plain"]);
    }

    #[test]
    fn the_last_call_per_connection_counts_and_fakes_never() {
        let log = CallLog::default();
        log.started("payments");
        log.ended("payments", Some(CallVerdict::Unavailable));
        log.started("crm");
        log.ended("crm", None);
        log.started("payments");
        log.ended("payments", Some(CallVerdict::Answered));
        assert_eq!(
            log.verdicts(false),
            vec![("payments".to_string(), CallVerdict::Answered)]
        );
    }

    #[test]
    fn a_call_cut_off_by_the_limit_counts_as_unavailable() {
        let log = CallLog::default();
        log.started("mailer");
        assert_eq!(log.verdicts(false), vec![]);
        assert_eq!(
            log.verdicts(true),
            vec![("mailer".to_string(), CallVerdict::Unavailable)]
        );
    }
}
