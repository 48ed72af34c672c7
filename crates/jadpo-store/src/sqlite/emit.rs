//! Events and their deliveries, written in the store's transaction or
//! the caller's (`emit_in`).

use super::pool::Abort;
use crate::codec::{at_ms, span_ms};
use crate::types::*;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

/// An event emitted before under this name and idempotency key: its id,
/// payload and public id.
fn keyed(c: &Connection, name: &str, key: &str) -> Result<Option<(EventId, String, String)>, Abort> {
    Ok(
        c.prepare_cached("SELECT id, payload, public_id FROM jadpo_events WHERE name = ?1 AND idempotency_key = ?2")?
            .query_row(params![name, key], |r| Ok((EventId(r.get(0)?), r.get(1)?, r.get(2)?)))
            .optional()?,
    )
}

/// A key given again with another payload, stored or earlier in `events`,
/// refuses the whole call before anything is written.
fn refuse_key_conflicts(c: &Connection, events: &[NewEvent]) -> Result<(), Abort> {
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
            return Err(Abort::Store(StoreError::IdempotencyConflict(e.name.clone())));
        }
    }
    Ok(())
}

/// The event `e`'s idempotency key already names (written before, or
/// earlier in this call), as a duplicate.
fn emitted_before(c: &Connection, e: &NewEvent) -> Result<Option<Emitted>, Abort> {
    let Some(key) = &e.idempotency_key else {
        return Ok(None);
    };
    let Some((event_id, _, public_id)) = keyed(c, &e.name, key)? else {
        return Ok(None);
    };
    let deliveries = c
        .prepare_cached("SELECT id FROM jadpo_deliveries WHERE event_id = ?1 ORDER BY id")?
        .query_map([event_id.0], |r| Ok(DeliveryId(r.get(0)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Some(Emitted {
        event_id,
        public_id,
        deliveries,
        duplicate: true,
    }))
}

/// Writes the events and one delivery per subscriber, due (or queued
/// behind its key: `keys::take_or_queue`), on `c`, which is
/// inside a transaction (the store's or the caller's). An idempotency key
/// used before returns that event; used with another payload, it refuses
/// the whole call before anything is written.
pub(crate) fn emit(c: &Connection, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, Abort> {
    refuse_key_conflicts(c, events)?;
    let mut event = c.prepare_cached(
        "INSERT INTO jadpo_events (name, payload, emitted_at, public_id, idempotency_key, \
         traceparent, tracestate) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    let mut delivery = c.prepare_cached(
        "INSERT INTO jadpo_deliveries (event_id, subscriber, state, attempts, due_at, \
         budget_from, held_for_ms, lease_token, created_at, updated_at, delivery_key, key_rule) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11)",
    )?;
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        if let Some(before) = emitted_before(c, e)? {
            out.push(before);
            continue;
        }
        let public_id = crate::types::new_public_id();
        event.execute(params![
            e.name,
            e.payload,
            now.as_millis(),
            public_id,
            e.idempotency_key,
            e.trace.as_ref().map(|t| t.traceparent()),
            e.trace.as_ref().and_then(|t| t.tracestate())
        ])?;
        let event_id = EventId(c.last_insert_rowid());
        let mut ids = Vec::with_capacity(e.subscribers.len());
        for s in &e.subscribers {
            // The core says what a new delivery is; this only writes it down.
            let mut d = Delivery::new(DeliveryId(0), event_id, s.as_str(), now);
            d.keyed(e.keys.get(s));
            super::keys::take_or_queue(c, &mut d, now)?;
            delivery.execute(params![
                event_id.0,
                d.subscriber,
                d.state.as_str(),
                d.attempts,
                at_ms(d.due_at),
                at_ms(d.budget_from),
                span_ms(d.held_for),
                at_ms(d.created_at),
                at_ms(d.updated_at),
                d.key.as_ref().map(jadpo_core::key::Key::as_str),
                d.key_rule.map(jadpo_core::key_rule::KeyRule::stored),
            ])?;
            d.id = DeliveryId(c.last_insert_rowid());
            ids.push(d.id);
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
