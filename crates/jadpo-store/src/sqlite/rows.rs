//! Rows to the core's types: the delivery, attempt, breaker and event
//! columns and their decoding. Every write is in `writes.rs`.

use crate::codec::{self, BreakerRow, DeliveryRow};
use crate::types::*;
use jadpo_core::breaker::Breaker;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row};

/// The columns of a delivery, aliased `d`, in the order [`delivery`] reads.
macro_rules! delivery_columns {
    () => {
        "d.id, d.event_id, d.subscriber, d.state, d.attempts, d.due_at, d.budget_from, \
         d.held_for_ms, d.lease_owner, d.lease_token, d.lease_until, d.last_failure_code, \
         d.last_failure_kind, d.held_connection, d.held_since, d.created_at, d.updated_at, \
         d.finished_at, d.waiting_on, d.waiting_for, d.delivery_key, d.key_rule, \
         d.skipped_by, d.skipped_at"
    };
}
pub(crate) use delivery_columns;

/// How many columns `delivery_columns!` has: what a query selects after them
/// starts here.
pub(crate) const DELIVERY_COLUMNS: usize = 24;

/// A delivery row, with the lease token the row keeps after its lease ended
/// (the core's `Delivery` forgets it): the next claim issues this plus one,
/// so a row's tokens never repeat.
pub(crate) struct Stored {
    pub delivery: Delivery,
    pub token: i64,
}

fn bad(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, Type::Text, what.into())
}

/// The first [`DELIVERY_COLUMNS`] columns of `row`, decoded by the codec
/// every store shares.
pub(crate) fn delivery(row: &Row<'_>) -> rusqlite::Result<Stored> {
    let r = DeliveryRow {
        id: row.get(0)?,
        event_id: row.get(1)?,
        subscriber: row.get(2)?,
        state: row.get(3)?,
        attempts: row.get(4)?,
        due_at: row.get(5)?,
        budget_from: row.get(6)?,
        held_for_ms: row.get(7)?,
        lease_owner: row.get(8)?,
        lease_token: row.get(9)?,
        lease_until: row.get(10)?,
        last_failure_code: row.get(11)?,
        last_failure_kind: row.get(12)?,
        held_connection: row.get(13)?,
        held_since: row.get(14)?,
        created_at: row.get(15)?,
        updated_at: row.get(16)?,
        finished_at: row.get(17)?,
        waiting_on: row.get(18)?,
        waiting_for: row.get(19)?,
        delivery_key: row.get(20)?,
        key_rule: row.get(21)?,
        skipped_by: row.get(22)?,
        skipped_at: row.get(23)?,
    };
    let (delivery, token) = r.decode().map_err(|e| bad(0, e.to_string()))?;
    Ok(Stored { delivery, token })
}

pub(crate) fn get(c: &Connection, id: DeliveryId) -> rusqlite::Result<Option<Stored>> {
    c.prepare_cached(concat!(
        "SELECT ",
        delivery_columns!(),
        " FROM jadpo_deliveries d WHERE d.id = ?1"
    ))?
    .query_row([id.0], delivery)
    .optional()
}

pub(crate) fn attempt(row: &Row<'_>) -> rusqlite::Result<AttemptRecord> {
    let corrupt = |e: codec::Corrupt| bad(0, e.to_string());
    Ok(AttemptRecord {
        delivery: DeliveryId(row.get(0)?),
        attempt: codec::count_of("attempt", row.get(1)?).map_err(corrupt)?,
        started_at: Timestamp::from_millis(row.get(2)?),
        ended_at: Timestamp::from_millis(row.get(3)?),
        state: codec::state_of(&row.get::<_, String>(4)?).map_err(corrupt)?,
        failure: codec::failure_of(row.get(5)?, row.get(6)?).map_err(corrupt)?,
    })
}

macro_rules! breaker_columns {
    () => {
        "connection, state, consecutive_unavailable, opened_at, outage_since, pause_ms, \
         probe_delivery, probe_until, alert_raised, version"
    };
}
pub(crate) use breaker_columns;

pub(crate) fn breaker(row: &Row<'_>) -> rusqlite::Result<Breaker> {
    let r = BreakerRow {
        connection: row.get(0)?,
        state: row.get(1)?,
        consecutive_unavailable: row.get(2)?,
        opened_at: row.get(3)?,
        outage_since: row.get(4)?,
        pause_ms: row.get(5)?,
        probe_delivery: row.get(6)?,
        probe_until: row.get(7)?,
        alert_raised: row.get(8)?,
        version: row.get(9)?,
    };
    r.decode().map_err(|e| bad(0, e.to_string()))
}

/// Every breaker row, by connection.
pub(crate) fn all_breakers(c: &Connection) -> rusqlite::Result<Vec<Breaker>> {
    c.prepare_cached(concat!(
        "SELECT ",
        breaker_columns!(),
        " FROM jadpo_circuit_breakers ORDER BY connection"
    ))?
    .query_map([], breaker)?
    .collect()
}

/// The breaker rows of these connections; a connection with none is closed.
pub(crate) fn breakers_of<'a>(
    c: &Connection,
    connections: impl IntoIterator<Item = &'a str>,
) -> rusqlite::Result<Vec<Breaker>> {
    let mut stmt = c.prepare_cached(concat!(
        "SELECT ",
        breaker_columns!(),
        " FROM jadpo_circuit_breakers WHERE connection = ?1"
    ))?;
    let mut out = Vec::new();
    for conn in connections {
        if let Some(b) = stmt.query_row([conn], breaker).optional()? {
            out.push(b);
        }
    }
    Ok(out)
}

pub(crate) fn event(row: &Row<'_>) -> rusqlite::Result<EventRecord> {
    Ok(EventRecord {
        id: EventId(row.get(0)?),
        name: row.get(1)?,
        payload: row.get(2)?,
        emitted_at: Timestamp::from_millis(row.get(3)?),
        public_id: row.get(4)?,
        trace: crate::codec::trace(row.get(5)?, row.get(6)?),
    })
}
