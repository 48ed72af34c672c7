//! What `jadpo deliveries`, `jadpo breakers` and the HTTP API show, computed
//! and serialized in one place so the command line and the API cannot
//! disagree. The JSON shapes are documented in docs/cli.md.
//!
//! A payload is never part of any of them: only ids, names, states, codes,
//! kinds and times.

use crate::output::time_json;
use jadpo_core::{Breaker, Delivery, DeliveryId, DeliveryState, EventId, WaitFor, Waiting};
use jadpo_lang::App;
use jadpo_store::{AttemptRecord, BreakerView, DeliveryFilter, EventRecord, Store, StoreError};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Rows listed when no limit is given.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// The most rows one listing returns.
pub(crate) const MAX_LIMIT: usize = 10_000;

/// `--limit N`: 1 to [`MAX_LIMIT`].
pub(crate) fn parse_limit(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| format!("{s:?} is not a number from 1 to {MAX_LIMIT}"))
}

/// The filters of `jadpo deliveries` and `GET /deliveries`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeliveryQuery {
    pub state: Option<DeliveryState>,
    pub subscriber: Option<String>,
    /// Deliveries whose subscriber's action may call this connection
    /// (known from the app), or held on it.
    pub connection: Option<String>,
    pub event: Option<EventId>,
    /// Only the deliveries with this key (their subscriber's `key:`).
    pub key: Option<String>,
    /// Only those older than this delivery: the next page.
    pub before: Option<DeliveryId>,
    /// At most [`MAX_LIMIT`].
    pub limit: usize,
}

/// The query of `GET /deliveries` and the console's lists: `state`,
/// `subscriber`, `connection`, `event`, `key`, `before`, `limit`. `Err` is the
/// message of the `query.invalid` answer.
pub(crate) fn parse_query(params: &BTreeMap<String, String>) -> Result<DeliveryQuery, String> {
    let mut q = DeliveryQuery {
        limit: DEFAULT_LIMIT,
        ..DeliveryQuery::default()
    };
    for (key, value) in params {
        match key.as_str() {
            "state" => {
                q.state = Some(DeliveryState::parse(value).ok_or_else(|| {
                    let states: Vec<&str> = DeliveryState::ALL.iter().map(|s| s.as_str()).collect();
                    format!("`state` is one of {}; not {value:?}", states.join(", "))
                })?)
            }
            "subscriber" => q.subscriber = Some(value.clone()),
            "connection" => q.connection = Some(value.clone()),
            "key" => q.key = Some(value.clone()),
            "event" => {
                q.event =
                    Some(EventId(value.parse().map_err(|_| {
                        format!("`event` is an event id (a number), not {value:?}")
                    })?))
            }
            "before" => {
                q.before =
                    Some(DeliveryId(value.parse().map_err(|_| {
                        format!("`before` is a delivery id (a number), not {value:?}")
                    })?))
            }
            "limit" => {
                q.limit = parse_limit(value)
                    .map_err(|_| format!("`limit` is a number from 1 to {MAX_LIMIT}, not {value:?}"))?
            }
            other => {
                return Err(format!(
                    "unknown parameter `{other}`; known: state, subscriber, connection, event, key, before, limit"
                ))
            }
        }
    }
    Ok(q)
}

/// The subscribers whose action may call `connection`, itself or through
/// the actions it runs.
pub(crate) fn subscribers_calling(app: &App, connection: &str) -> Vec<String> {
    app.subscribers
        .values()
        .filter(|s| {
            app.actions
                .get(&s.run.action)
                .is_some_and(|a| a.connections().contains(connection))
        })
        .map(|s| s.name.clone())
        .collect()
}

/// Lists deliveries, newest first. With a connection: those held on it,
/// and, when the app is known, those of every subscriber whose action may
/// call it. Each query is bounded by the limit, so this reads at most
/// (subscribers + 1) × limit rows.
pub(crate) async fn list<S: Store>(
    store: &S,
    app: Option<&App>,
    q: &DeliveryQuery,
) -> Result<Vec<Delivery>, StoreError> {
    list_at_most(store, app, q, q.limit.clamp(1, MAX_LIMIT)).await
}

/// [`list`], and whether more deliveries match than it returns: one more
/// is read to know, so a list that is exactly as long as the limit is not
/// said to have stopped there.
pub(crate) async fn page<S: Store>(
    store: &S,
    app: Option<&App>,
    q: &DeliveryQuery,
) -> Result<(Vec<Delivery>, bool), StoreError> {
    let limit = q.limit.clamp(1, MAX_LIMIT);
    let mut found = list_at_most(store, app, q, limit + 1).await?;
    let more = found.len() > limit;
    found.truncate(limit);
    Ok((found, more))
}

async fn list_at_most<S: Store>(
    store: &S,
    app: Option<&App>,
    q: &DeliveryQuery,
    limit: usize,
) -> Result<Vec<Delivery>, StoreError> {
    let base = DeliveryFilter {
        state: q.state,
        subscriber: q.subscriber.clone(),
        connection: None,
        event: q.event,
        key: q.key.clone(),
        before: q.before,
        limit: Some(limit),
    };
    let Some(connection) = &q.connection else {
        return store.list(&base).await;
    };
    let mut found = store
        .list(&DeliveryFilter {
            connection: Some(connection.clone()),
            ..base.clone()
        })
        .await?;
    if let Some(app) = app {
        for subscriber in subscribers_calling(app, connection) {
            if q.subscriber.as_ref().is_some_and(|s| *s != subscriber) {
                continue;
            }
            let filter = DeliveryFilter {
                subscriber: Some(subscriber),
                ..base.clone()
            };
            found.extend(store.list(&filter).await?);
        }
    }
    found.sort_by_key(|d| std::cmp::Reverse(d.id));
    found.dedup_by_key(|d| d.id);
    found.truncate(limit);
    Ok(found)
}

/// The names of the events of `deliveries`, one read per distinct event.
pub(crate) async fn event_names<S: Store>(
    store: &S,
    deliveries: &[Delivery],
) -> Result<BTreeMap<EventId, String>, StoreError> {
    let ids: BTreeSet<EventId> = deliveries.iter().map(|d| d.event_id).collect();
    let mut names = BTreeMap::new();
    for id in ids {
        if let Some(e) = store.event(id).await? {
            names.insert(id, e.name);
        }
    }
    Ok(names)
}

/// Why a due delivery did not start: "waits for a slot on payments".
pub(crate) fn waiting_text(w: &Waiting) -> String {
    let what = match w.reason {
        WaitFor::Token => "its rate",
        WaitFor::Slot => "a slot",
        WaitFor::Pause => "a 429's pause",
    };
    format!("waits for {what} on {}", w.connection)
}

/// One delivery as JSON. `due_at` is set only while it is `due`, and
/// `waiting_on`/`waiting_for` when a connection's limit kept it from
/// starting; a held one has `held_connection` and `held_since`; a finished
/// one `finished_at`; one an operator skipped `skipped_by` and
/// `skipped_at`.
pub(crate) fn delivery_json(d: &Delivery, event: Option<&str>) -> Value {
    let failure = d.last_failure.as_ref();
    let held = d.held.as_ref();
    let waiting = d.waiting.as_ref().filter(|_| d.state == DeliveryState::Due);
    let lease = d.lease.as_ref().filter(|_| d.state == DeliveryState::Running);
    json!({
        "id": d.id.0,
        "event_id": d.event_id.0,
        "event": event,
        "subscriber": d.subscriber,
        "key": d.key.as_ref().map(|k| k.as_str()),
        "key_rule": d.key_rule.map(jadpo_core::key_rule::KeyRule::stored),
        "state": d.state.as_str(),
        "attempts": d.attempts,
        "last_failure_code": failure.map(|f| f.code.as_str()),
        "last_failure_kind": failure.map(|f| f.kind.as_str()),
        "held_connection": held.map(|h| h.connection.as_str()),
        "held_since": time_json(held.map(|h| h.since)),
        "due_at": time_json(Some(d.due_at).filter(|_| d.state == DeliveryState::Due)),
        "waiting_on": waiting.map(|w| w.connection.as_str()),
        "waiting_for": waiting.map(|w| w.reason.as_str()),
        "finished_at": time_json(d.finished_at.filter(|_| d.state.is_finished())),
        "skipped_by": d.skipped.as_ref().map(|s| s.by.as_str()),
        "skipped_at": time_json(d.skipped.as_ref().map(|s| s.at)),
        "lease_owner": lease.map(|l| l.owner.as_str()),
        "lease_until": time_json(lease.map(|l| l.until)),
        "budget_from": time_json(Some(d.budget_from)),
        "held_for_ms": u64::try_from(d.held_for.as_millis()).unwrap_or(u64::MAX),
        "created_at": time_json(Some(d.created_at)),
        "updated_at": time_json(Some(d.updated_at)),
    })
}

/// One attempt of a delivery's history.
pub(crate) fn attempt_json(a: &AttemptRecord) -> Value {
    let failure = a.failure.as_ref();
    json!({
        "attempt": a.attempt,
        "started_at": time_json(Some(a.started_at)),
        "ended_at": time_json(Some(a.ended_at)),
        "state": a.state.as_str(),
        "code": failure.map(|f| f.code.as_str()),
        "kind": failure.map(|f| f.kind.as_str()),
    })
}

/// What a queued delivery waits for, as the CLI and the console say it.
pub(crate) fn queued_text(d: &Delivery, waits_for: Option<jadpo_core::DeliveryId>) -> String {
    let key = d.key.as_ref().map_or("", |k| k.as_str());
    match waits_for {
        Some(id) => format!("waits for delivery {id}, earlier for key {key}"),
        None => format!("waits for an earlier delivery of key {key}"),
    }
}

/// Who skipped a delivery and when, as the CLI and the console say it.
pub(crate) fn skipped_text(s: &jadpo_core::Skipped) -> String {
    format!("skipped by {} at {}", s.by, crate::output::time_short(s.at))
}

/// A delivery with its attempt history (`jadpo deliveries show --json`,
/// `GET /deliveries/ID`): [`delivery_json`] plus `history`, oldest first,
/// and for a queued one `waits_for_delivery`, the delivery of its key it
/// waits for.
pub(crate) fn delivery_detail_json(
    d: &Delivery,
    event: Option<&EventRecord>,
    attempts: &[AttemptRecord],
    waits_for: Option<jadpo_core::DeliveryId>,
) -> Value {
    let mut v = delivery_json(d, event.map(|e| e.name.as_str()));
    v["waits_for_delivery"] = json!(waits_for.map(|id| id.0));
    v["history"] = Value::Array(attempts.iter().map(attempt_json).collect());
    // The trace its event was emitted in, to find it in the tracing tool.
    v["trace_id"] = json!(event.and_then(|e| e.trace.as_ref()).map(|t| t.trace_id()));
    v
}

/// A list of deliveries with their events' names.
pub(crate) fn deliveries_json(deliveries: &[Delivery], names: &BTreeMap<EventId, String>) -> Value {
    Value::Array(
        deliveries
            .iter()
            .map(|d| delivery_json(d, names.get(&d.event_id).map(String::as_str)))
            .collect(),
    )
}

/// Every breaker: the store's rows, and a closed one for each connection of
/// the app that has no row yet. By connection name.
pub(crate) async fn breakers<S: Store>(store: &S, app: Option<&App>) -> Result<Vec<BreakerView>, StoreError> {
    Ok(with_app_connections(store.breakers().await?, app))
}

/// `rows`, and a closed breaker for each connection of the app that has no
/// row yet. By connection name.
pub(crate) fn with_app_connections(rows: Vec<BreakerView>, app: Option<&App>) -> Vec<BreakerView> {
    let mut found: BTreeMap<String, BreakerView> =
        rows.into_iter().map(|b| (b.breaker.connection.clone(), b)).collect();
    for name in app.into_iter().flat_map(|a| a.connections.keys()) {
        found.entry(name.clone()).or_insert_with(|| BreakerView {
            breaker: Breaker::new(name.clone()),
            held: 0,
        });
    }
    found.into_values().collect()
}

/// One breaker as JSON.
pub(crate) fn breaker_json(v: &BreakerView) -> Value {
    let b = &v.breaker;
    let closed = b.is_closed();
    json!({
        "connection": b.connection,
        "state": b.state.as_str(),
        "consecutive_unavailable": b.consecutive_unavailable,
        "opened_at": time_json(b.opened_at.filter(|_| !closed)),
        "outage_since": time_json(b.outage_since.filter(|_| !closed)),
        "pause_ms": u64::try_from(b.pause.as_millis()).unwrap_or(u64::MAX),
        "probe_due_at": time_json(b.probe_due_at()),
        "probe_delivery": b.probe.map(|p| p.delivery.0),
        "probe_until": time_json(b.probe.map(|p| p.until)),
        "held": v.held,
        "alert_raised": b.alert_raised,
    })
}

/// A rate as the app file writes it: `50/s`, `600/min`, `1/h`.
pub(crate) fn rate_text(r: &jadpo_core::limit::Rate) -> String {
    match r.per.as_secs() {
        1 => format!("{}/s", r.n),
        60 => format!("{}/min", r.n),
        3600 => format!("{}/h", r.n),
        _ => format!("{}/{}ms", r.n, r.per.as_millis()),
    }
}

/// Each connection that has limits or a limit state, as JSON at `now`:
/// `rate`, `concurrency`, `tokens`, `slots_in_use`, `waiting` (due
/// deliveries waiting for room on it), `paused_until`, `slowed_until`.
pub(crate) async fn limits<S: Store>(
    store: &S,
    app: Option<&App>,
    now: jadpo_core::Timestamp,
) -> Result<BTreeMap<String, Value>, StoreError> {
    let waiting = store.waiting_counts().await?;
    limits_with(store, app, now, &waiting).await
}

/// [`limits`] with the waiting deliveries already counted (`/metrics`
/// counts them up to a cap).
pub(crate) async fn limits_with<S: Store>(
    store: &S,
    app: Option<&App>,
    now: jadpo_core::Timestamp,
    waiting: &BTreeMap<String, u64>,
) -> Result<BTreeMap<String, Value>, StoreError> {
    let configured: BTreeMap<String, jadpo_core::limit::Limits> = app
        .into_iter()
        .flat_map(|a| a.connections.iter().map(|(n, c)| (n.clone(), c.limits())))
        .filter(|(_, l)| !l.is_none())
        .collect();
    let states: BTreeMap<String, jadpo_core::limit::LimitState> = store
        .limit_states()
        .await?
        .into_iter()
        .map(|s| (s.connection.clone(), s))
        .collect();
    let names: BTreeSet<&String> = configured.keys().chain(states.keys()).collect();
    Ok(names
        .into_iter()
        .map(|name| {
            let limits = configured.get(name).copied().unwrap_or_default();
            let fresh = jadpo_core::limit::LimitState::new(name.clone(), &limits, now);
            let state = states.get(name).unwrap_or(&fresh);
            let v = json!({
                "rate": limits.rate.as_ref().map(rate_text),
                "concurrency": limits.concurrency,
                "tokens": limits.rate.map(|_| state.tokens_at(&limits, now)),
                "slots_in_use": state.slots_in_use(now),
                "waiting": waiting.get(name).copied().unwrap_or(0),
                "paused_until": time_json(state.paused_until.filter(|t| *t > now)),
                "slowed_until": time_json(state.slowed_until.filter(|t| *t > now)),
            });
            (name.clone(), v)
        })
        .collect())
}

/// Breakers as JSON, each with its connection's `limits` (null when it has
/// none).
pub(crate) fn breakers_with_limits_json(list: &[BreakerView], limits: &BTreeMap<String, Value>) -> Value {
    Value::Array(
        list.iter()
            .map(|v| {
                let mut b = breaker_json(v);
                b["limits"] = limits.get(&v.breaker.connection).cloned().unwrap_or(Value::Null);
                b
            })
            .collect(),
    )
}

/// Alerts as `jadpo alerts --json` and `GET /alerts` show them: each
/// message as its route receives it, with where its send stands.
pub(crate) fn alerts_json(list: &[jadpo_store::AlertRecord]) -> Value {
    Value::Array(
        list.iter()
            .map(|a| {
                let mut v = jadpo_runtime::alerts::message_json(a);
                let s = &a.sends;
                v["send"] = json!({
                    "state": s.state().as_str(),
                    "attempts": s.attempts,
                    "next_at": if s.open() && s.attempts > 0 { time_json(s.due_at) } else { Value::Null },
                    "sent_at": time_json(s.sent_at),
                    "failed_at": time_json(s.failed_at),
                    "last_error": s.last_error,
                });
                v
            })
            .collect(),
    )
}

/// The store's clock, for a command that reads times without a `Jadpo`:
/// real time, or the scaled clock a `jadpo dev --time-scale` kept there.
pub(crate) async fn store_clock<S: Store>(store: &S) -> Result<jadpo_runtime::SharedClock, crate::output::CliError> {
    jadpo_runtime::clock::for_store(store, jadpo_core::clock::Wanted::Store)
        .await
        .map_err(|e| crate::output::CliError::environment(e.code(), e.to_string()))
}

/// `Some("scaled 600x since ...")` when `clock` is a store's scaled clock:
/// what a view prints beside engine times, which then run ahead of the wall
/// clock.
pub(crate) fn scaled_note(clock: &jadpo_runtime::SharedClock) -> Option<String> {
    clock.anchor().map(|a| jadpo_runtime::clock::anchor_text(&a))
}
