//! The writes of the interface, each run inside one `BEGIN IMMEDIATE`
//! transaction: read the rows, let [`plan`] decide, write what it returned.

use super::pool::Fault;
use super::rows::{self, delivery_columns, Stored, DELIVERY_COLUMNS};
use crate::limits::LimitStates;
use crate::plan::{self, Breakers, Candidate};
use crate::types::*;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{claim, BreakerPolicy, Delivery, DeliveryId, EventId, LeaseToken, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

/// Due rows, oldest due first, with what the claim decides from: the event
/// (for the action) and whether the row has its handled record.
const DUE: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    ", e.name, e.payload, d.handled_at IS NOT NULL, e.public_id, e.depth \
     FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id \
     WHERE d.state = 'due' AND d.due_at <= ?1 ORDER BY d.due_at, d.id LIMIT ?2"
);

/// Running rows whose lease ended, the longest lost first.
const LOST: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    ", e.name, e.payload, d.handled_at IS NOT NULL, e.public_id, e.depth \
     FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id \
     WHERE d.state = 'running' AND d.lease_until <= ?1 ORDER BY d.lease_until, d.id LIMIT ?2"
);

struct Row {
    stored: Stored,
    candidate: (String, String, bool, String, i64),
}

fn candidates(c: &Connection, sql: &str, now: Timestamp, limit: usize) -> Result<Vec<Row>, Fault> {
    let rows = c
        .prepare_cached(sql)?
        .query_map(params![now.as_millis(), limit as i64], |r| {
            Ok(Row {
                stored: rows::delivery(r)?,
                candidate: (
                    r.get(DELIVERY_COLUMNS)?,
                    r.get(DELIVERY_COLUMNS + 1)?,
                    r.get(DELIVERY_COLUMNS + 2)?,
                    r.get(DELIVERY_COLUMNS + 3)?,
                    r.get(DELIVERY_COLUMNS + 4)?,
                ),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Claims up to `req.limit` rows: due ones and lost ones merged by time, so a
/// lost run waits no longer than a due one (as the in-memory store does).
pub(crate) fn claim(c: &Connection, req: &ClaimRequest<'_>) -> Result<ClaimReport, Fault> {
    let due = candidates(c, DUE, req.now, req.limit)?;
    let lost = candidates(c, LOST, req.now, req.limit)?;
    let key = |r: &Row, lost: bool| {
        let d = &r.stored.delivery;
        let at = match (&d.lease, lost) {
            (Some(l), true) => l.until,
            _ => d.due_at,
        };
        (at, d.id)
    };
    let mut due = due.into_iter().peekable();
    let mut lost = lost.into_iter().peekable();
    let mut picked = Vec::with_capacity(req.limit);
    while picked.len() < req.limit {
        let take_lost = match (due.peek(), lost.peek()) {
            (Some(a), Some(b)) => key(b, true) < key(a, false),
            (None, Some(_)) => true,
            (_, None) => false,
        };
        match if take_lost { lost.next() } else { due.next() } {
            Some(r) => picked.push(r),
            None => break,
        }
    }
    let tokens: HashMap<DeliveryId, i64> = picked.iter().map(|r| (r.stored.delivery.id, r.stored.token)).collect();
    let candidates = picked
        .into_iter()
        .map(|r| {
            let (event_name, payload, handled, event_public_id, depth) = r.candidate;
            Candidate {
                delivery: r.stored.delivery,
                handled,
                event_name,
                payload,
                event_public_id,
                event_depth: u32::try_from(depth).unwrap_or(0),
            }
        })
        .collect();
    let mut breakers = Breakers::new(rows::all_breakers(c)?);
    // Every row, limited or not: a 429's pause holds any connection.
    let limit_rows = super::limits::all(c)?;
    let mut limits = LimitStates::new(req.routes.limits(), limit_rows);
    let plan = plan::claim(candidates, &mut breakers, &mut limits, req, |d| {
        LeaseToken(tokens[&d.id] + 1)
    });
    for d in &plan.deliveries {
        rows::update(c, d, None, None)?;
    }
    rows::write_breakers(c, &plan.breakers)?;
    super::limits::write(c, &plan.limits)?;
    Ok(plan.report)
}

/// Reads a delivery and checks it is still running under `token`.
fn fenced(c: &Connection, id: DeliveryId, token: LeaseToken) -> Result<Delivery, Fault> {
    let stored = rows::get(c, id)?;
    let d = plan::check_lease(stored.as_ref().map(|s| &s.delivery), id, token)?;
    Ok(d.clone())
}

/// Writes `d` only if it is still running under `token`; `handled` as
/// [`rows::update`].
fn write_fenced(c: &Connection, d: &Delivery, token: LeaseToken, handled: Option<Timestamp>) -> Result<(), Fault> {
    match rows::update(c, d, Some(token), handled)? {
        1 => Ok(()),
        _ => Err(Fault::Store(StoreError::LeaseLost(d.id))),
    }
}

/// Gives back the probe places `id` holds: only rows naming it can change.
fn unprobe(c: &Connection, id: DeliveryId) -> Result<(), Fault> {
    let rows = c
        .prepare_cached(concat!(
            "SELECT ",
            rows::breaker_columns!(),
            " FROM jadpo_circuit_breakers WHERE probe_delivery = ?1"
        ))?
        .query_map([id.0], rows::breaker)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut breakers = Breakers::new(rows);
    rows::write_breakers(c, &plan::unprobe(&mut breakers, id))
}

pub(crate) fn hold_claimed(
    c: &Connection,
    id: DeliveryId,
    token: LeaseToken,
    connection: &str,
    now: Timestamp,
) -> Result<(), Fault> {
    let mut d = fenced(c, id, token)?;
    claim::hold_claimed(&mut d, connection, now);
    write_fenced(c, &d, token, None)?;
    super::limits::settle(c, &[(id, None, now)], &[])?;
    unprobe(c, id)
}

pub(crate) fn give_back(c: &Connection, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), Fault> {
    let mut d = fenced(c, id, token)?;
    claim::give_back(&mut d, now);
    write_fenced(c, &d, token, None)?;
    super::limits::settle(c, &[(id, None, now)], &[])?;
    unprobe(c, id)
}

/// Each finish fenced on its own lease: a lost one is `Err` in its place and
/// writes nothing; the others are written. An `Err(Fault)` means the whole
/// transaction must not commit.
pub(crate) fn finish_batch(
    c: &Connection,
    batch: &[Finish],
    policy: &BreakerPolicy,
) -> Result<Vec<Result<FinishReport, StoreError>>, Fault> {
    let mut out = Vec::with_capacity(batch.len());
    for f in batch {
        out.push(match finish(c, f, policy) {
            Ok(r) => Ok(r),
            Err(Fault::Store(e @ (StoreError::LeaseLost(_) | StoreError::NotFound(_)))) => Err(e),
            Err(fault) => return Err(fault),
        });
    }
    Ok(out)
}

fn finish(c: &Connection, f: &Finish, policy: &BreakerPolicy) -> Result<FinishReport, Fault> {
    let d = fenced(c, f.id, f.token)?;
    let (releases, answers) = crate::limits::of_finish(f);
    super::limits::settle(c, &releases, &answers)?;
    // Most finishes touch no breaker: read only the rows this one may move.
    let touched: Vec<&str> = f
        .calls
        .iter()
        .map(|(conn, _)| conn.as_str())
        .chain(f.probe_for.iter().map(String::as_str))
        .collect();
    let rows = if touched.is_empty() {
        Vec::new()
    } else {
        rows::breakers_of(c, touched)?
    };
    let mut breakers = Breakers::new(rows);
    let plan = plan::finish(&d, &mut breakers, f, policy);
    write_fenced(c, &plan.delivery, f.token, plan.handled.then_some(f.now))?;
    let emitted = if plan.handled && !f.emits.events.is_empty() {
        emit_at_depth(c, &f.emits, f.now)?
    } else {
        Vec::new()
    };
    rows::insert_attempt(c, &plan.attempt)?;
    rows::write_breakers(c, &plan.breakers)?;
    let mut released = 0;
    for conn in &plan.release {
        let n = rows::release_all(c, conn, f.now)?;
        if let Some((_, since)) = plan.resolved.iter().find(|(r, _)| r == conn) {
            super::alerts::insert(c, &[AlertMessage::resolved(conn, *since, f.now, n as u64)])?;
        }
        released += n;
    }
    Ok(FinishReport {
        transitions: plan.transitions,
        released,
        breakers: plan.breakers.into_iter().map(|w| w.breaker).collect(),
        emitted,
    })
}

/// A run's emits, in its finish's transaction, marked with their depth.
fn emit_at_depth(c: &Connection, emits: &Emits, now: Timestamp) -> Result<Vec<Emitted>, Fault> {
    let emitted = emit(c, &emits.events, now)?;
    let mut mark = c.prepare_cached("UPDATE jadpo_events SET depth = ?2 WHERE id = ?1")?;
    for e in emitted.iter().filter(|e| !e.duplicate) {
        mark.execute(params![e.event_id.0, emits.depth])?;
    }
    Ok(emitted)
}

/// An operator's retry: failed and parked rows only. The row keeps its
/// lease token, so the next claim's token is still new for it.
pub(crate) fn retry(c: &Connection, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, Fault> {
    let mut retried = Vec::new();
    for &(id, due_at) in due {
        let Some(Stored { mut delivery, .. }) = rows::get(c, id)? else {
            continue;
        };
        if delivery.retryable_by_operator() {
            delivery.operator_retry(due_at, now);
            rows::update(c, &delivery, None, None)?;
            retried.push(id);
        }
    }
    Ok(retried)
}

/// An event emitted before under this name and idempotency key: its id,
/// payload and public id.
fn keyed(c: &Connection, name: &str, key: &str) -> Result<Option<(EventId, String, String)>, Fault> {
    Ok(
        c.prepare_cached("SELECT id, payload, public_id FROM jadpo_events WHERE name = ?1 AND idempotency_key = ?2")?
            .query_row(params![name, key], |r| Ok((EventId(r.get(0)?), r.get(1)?, r.get(2)?)))
            .optional()?,
    )
}

/// Writes the events and one due delivery per subscriber, on `c`, which is
/// inside a transaction (the store's or the caller's). An idempotency key
/// used before returns that event; used with another payload, it refuses
/// the whole call before anything is written.
pub(crate) fn emit(c: &Connection, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, Fault> {
    let mut first: HashMap<(&str, &str), &str> = HashMap::new();
    for e in events {
        let Some(key) = &e.idempotency_key else { continue };
        let before = keyed(c, &e.name, key)?;
        let payload = match &before {
            Some((_, payload, _)) => payload.as_str(),
            None => *first
                .entry((e.name.as_str(), key.as_str()))
                .or_insert(e.payload.as_str()),
        };
        if payload != e.payload {
            return Err(Fault::Store(StoreError::IdempotencyConflict(e.name.clone())));
        }
    }
    let mut event = c.prepare_cached(
        "INSERT INTO jadpo_events (name, payload, emitted_at, public_id, idempotency_key) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut delivery = c.prepare_cached(
        "INSERT INTO jadpo_deliveries (event_id, subscriber, state, attempts, due_at, \
         budget_from, held_for_ms, lease_token, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9)",
    )?;
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        if let Some(key) = &e.idempotency_key {
            if let Some((event_id, _, public_id)) = keyed(c, &e.name, key)? {
                let deliveries = c
                    .prepare_cached("SELECT id FROM jadpo_deliveries WHERE event_id = ?1 ORDER BY id")?
                    .query_map([event_id.0], |r| Ok(DeliveryId(r.get(0)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                out.push(Emitted {
                    event_id,
                    public_id,
                    deliveries,
                    duplicate: true,
                });
                continue;
            }
        }
        let public_id = crate::types::new_public_id();
        event.execute(params![
            e.name,
            e.payload,
            now.as_millis(),
            public_id,
            e.idempotency_key
        ])?;
        let event_id = EventId(c.last_insert_rowid());
        let mut ids = Vec::with_capacity(e.subscribers.len());
        for s in &e.subscribers {
            // The core says what a new delivery is; this only writes it down.
            let d = Delivery::new(DeliveryId(0), event_id, s.as_str(), now);
            delivery.execute(params![
                event_id.0,
                d.subscriber,
                d.state.as_str(),
                d.attempts,
                rows::ts(d.due_at),
                rows::ts(d.budget_from),
                rows::ms(d.held_for),
                rows::ts(d.created_at),
                rows::ts(d.updated_at),
            ])?;
            ids.push(DeliveryId(c.last_insert_rowid()));
        }
        out.push(Emitted {
            event_id,
            public_id,
            deliveries: ids,
            duplicate: false,
        });
    }
    Ok(out)
}
