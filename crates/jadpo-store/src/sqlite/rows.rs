//! Rows to the core's types and back, and the writes every operation shares.

use super::pool::Fault;
use crate::plan::BreakerWrite;
use crate::types::*;
use jadpo_core::breaker::{Breaker, BreakerState, Probe};
use jadpo_core::{
    Delivery, DeliveryId, DeliveryState, EventId, FailureKind, FailureRecord, Held, Lease, LeaseToken, Timestamp,
    WaitFor, Waiting,
};
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::time::Duration;

/// The columns of a delivery, aliased `d`, in the order [`delivery`] reads.
macro_rules! delivery_columns {
    () => {
        "d.id, d.event_id, d.subscriber, d.state, d.attempts, d.due_at, d.budget_from, \
         d.held_for_ms, d.lease_owner, d.lease_token, d.lease_until, d.last_failure_code, \
         d.last_failure_kind, d.held_connection, d.held_since, d.created_at, d.updated_at, \
         d.finished_at, d.waiting_on, d.waiting_for"
    };
}
pub(crate) use delivery_columns;

/// How many columns `delivery_columns!` has: what a query selects after them
/// starts here.
pub(crate) const DELIVERY_COLUMNS: usize = 20;

/// A delivery row, with the lease token the row keeps after its lease ended
/// (the core's `Delivery` forgets it): the next claim issues this plus one,
/// so a row's tokens never repeat.
pub(crate) struct Stored {
    pub delivery: Delivery,
    pub token: i64,
}

pub(crate) fn ts(t: Timestamp) -> i64 {
    t.as_millis()
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn duration(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn bad(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, Type::Text, what.into())
}

fn state(row: &Row<'_>, col: usize) -> rusqlite::Result<DeliveryState> {
    let s: String = row.get(col)?;
    DeliveryState::parse(&s).ok_or_else(|| bad(col, format!("unknown delivery state {s:?}")))
}

fn failure(row: &Row<'_>, col: usize) -> rusqlite::Result<Option<FailureRecord>> {
    let code: Option<String> = row.get(col)?;
    let kind: Option<String> = row.get(col + 1)?;
    match (code, kind) {
        (Some(code), Some(kind)) => {
            let kind =
                FailureKind::parse(&kind).ok_or_else(|| bad(col + 1, format!("unknown failure kind {kind:?}")))?;
            Ok(Some(FailureRecord { code, kind }))
        }
        _ => Ok(None),
    }
}

fn waiting(row: &Row<'_>, col: usize) -> rusqlite::Result<Option<Waiting>> {
    let connection: Option<String> = row.get(col)?;
    let reason: Option<String> = row.get(col + 1)?;
    match (connection, reason) {
        (Some(connection), Some(reason)) => {
            let reason =
                WaitFor::parse(&reason).ok_or_else(|| bad(col + 1, format!("unknown waiting reason {reason:?}")))?;
            Ok(Some(Waiting { connection, reason }))
        }
        _ => Ok(None),
    }
}

pub(crate) fn delivery(row: &Row<'_>) -> rusqlite::Result<Stored> {
    let token: i64 = row.get(9)?;
    let owner: Option<String> = row.get(8)?;
    let until: Option<i64> = row.get(10)?;
    let conn: Option<String> = row.get(13)?;
    let since: Option<i64> = row.get(14)?;
    let attempts: i64 = row.get(4)?;
    let delivery = Delivery {
        id: DeliveryId(row.get(0)?),
        event_id: EventId(row.get(1)?),
        subscriber: row.get(2)?,
        state: state(row, 3)?,
        attempts: u32::try_from(attempts).map_err(|_| bad(4, format!("attempts {attempts}")))?,
        due_at: Timestamp::from_millis(row.get(5)?),
        budget_from: Timestamp::from_millis(row.get(6)?),
        held_for: duration(row.get(7)?),
        lease: owner.zip(until).map(|(owner, until)| Lease {
            owner,
            token: LeaseToken(token),
            until: Timestamp::from_millis(until),
        }),
        last_failure: failure(row, 11)?,
        held: conn.zip(since).map(|(connection, since)| Held {
            connection,
            since: Timestamp::from_millis(since),
        }),
        created_at: Timestamp::from_millis(row.get(15)?),
        updated_at: Timestamp::from_millis(row.get(16)?),
        finished_at: row.get::<_, Option<i64>>(17)?.map(Timestamp::from_millis),
        waiting: waiting(row, 18)?,
    };
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

/// Writes every column a rule may change. `lease_token` changes only with a
/// new lease: the row keeps the last one issued. `fence`: only if the row is
/// still running under that token (every write after a claim). Returns the
/// rows changed: 0 when the fence refused it. `handled`: the run committed,
/// so the row gets its handled record (one there already is kept).
pub(crate) fn update(
    c: &Connection,
    d: &Delivery,
    fence: Option<LeaseToken>,
    handled: Option<Timestamp>,
) -> rusqlite::Result<usize> {
    let lease = d.lease.as_ref();
    let failure = d.last_failure.as_ref();
    let held = d.held.as_ref();
    c.prepare_cached(
        "UPDATE jadpo_deliveries SET state = ?1, attempts = ?2, due_at = ?3, \
         budget_from = ?4, held_for_ms = ?5, lease_owner = ?6, \
         lease_token = COALESCE(?7, lease_token), lease_until = ?8, last_failure_code = ?9, \
         last_failure_kind = ?10, held_connection = ?11, held_since = ?12, updated_at = ?13, \
         finished_at = ?14, handled_at = COALESCE(handled_at, ?17), waiting_on = ?18, \
         waiting_for = ?19 \
         WHERE id = ?15 AND (?16 IS NULL OR (state = 'running' AND lease_token = ?16))",
    )?
    .execute(params![
        d.state.as_str(),
        d.attempts,
        ts(d.due_at),
        ts(d.budget_from),
        ms(d.held_for),
        lease.map(|l| l.owner.as_str()),
        lease.map(|l| l.token.0),
        lease.map(|l| ts(l.until)),
        failure.map(|f| f.code.as_str()),
        failure.map(|f| f.kind.as_str()),
        held.map(|h| h.connection.as_str()),
        held.map(|h| ts(h.since)),
        ts(d.updated_at),
        d.finished_at.map(ts),
        d.id.0,
        fence.map(|t| t.0),
        handled.map(ts),
        d.waiting.as_ref().map(|w| w.connection.as_str()),
        d.waiting.as_ref().map(|w| w.reason.as_str()),
    ])
}

/// Held deliveries of `connection` become due now, each through the core's
/// `Delivery::release`. Returns how many.
pub(crate) fn release_all(c: &Connection, connection: &str, now: Timestamp) -> Result<usize, Fault> {
    let held: Vec<Stored> = c
        .prepare_cached(concat!(
            "SELECT ",
            delivery_columns!(),
            " FROM jadpo_deliveries d WHERE d.state = 'held' AND d.held_connection = ?1 \
             ORDER BY d.held_since, d.id"
        ))?
        .query_map([connection], delivery)?
        .collect::<rusqlite::Result<_>>()?;
    for s in &held {
        let mut d = s.delivery.clone();
        d.release(now);
        update(c, &d, None, None)?;
    }
    Ok(held.len())
}

pub(crate) fn insert_attempt(c: &Connection, a: &AttemptRecord) -> rusqlite::Result<()> {
    c.prepare_cached(
        "INSERT INTO jadpo_attempts \
         (delivery_id, attempt, started_at, ended_at, state, failure_code, failure_kind) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        a.delivery.0,
        a.attempt,
        ts(a.started_at),
        ts(a.ended_at),
        a.state.as_str(),
        a.failure.as_ref().map(|f| f.code.as_str()),
        a.failure.as_ref().map(|f| f.kind.as_str()),
    ])?;
    Ok(())
}

pub(crate) fn attempt(row: &Row<'_>) -> rusqlite::Result<AttemptRecord> {
    let n: i64 = row.get(1)?;
    Ok(AttemptRecord {
        delivery: DeliveryId(row.get(0)?),
        attempt: u32::try_from(n).map_err(|_| bad(1, format!("attempt {n}")))?,
        started_at: Timestamp::from_millis(row.get(2)?),
        ended_at: Timestamp::from_millis(row.get(3)?),
        state: state(row, 4)?,
        failure: failure(row, 5)?,
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
    let s: String = row.get(1)?;
    let n: i64 = row.get(2)?;
    let probe_delivery: Option<i64> = row.get(6)?;
    let probe_until: Option<i64> = row.get(7)?;
    Ok(Breaker {
        connection: row.get(0)?,
        state: BreakerState::parse(&s).ok_or_else(|| bad(1, format!("breaker state {s:?}")))?,
        consecutive_unavailable: u32::try_from(n).map_err(|_| bad(2, format!("count {n}")))?,
        opened_at: row.get::<_, Option<i64>>(3)?.map(Timestamp::from_millis),
        outage_since: row.get::<_, Option<i64>>(4)?.map(Timestamp::from_millis),
        pause: duration(row.get(5)?),
        probe: probe_delivery.zip(probe_until).map(|(d, u)| Probe {
            delivery: DeliveryId(d),
            until: Timestamp::from_millis(u),
        }),
        alert_raised: row.get(8)?,
        version: row.get(9)?,
    })
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

/// Each write is one statement conditional on the version read: an UPDATE
/// `WHERE version = read`, or an INSERT that does nothing if a row appeared.
/// Nothing changed means another process moved the breaker first:
/// `Fault::Conflict`, and the caller redoes the whole transaction.
pub(crate) fn write_breakers(c: &Connection, writes: &[BreakerWrite]) -> Result<(), Fault> {
    for w in writes {
        let b = &w.breaker;
        let probe = b.probe.as_ref();
        let p = params![
            b.connection.as_str(),
            b.state.as_str(),
            b.consecutive_unavailable,
            b.opened_at.map(ts),
            b.outage_since.map(ts),
            ms(b.pause),
            probe.map(|p| p.delivery.0),
            probe.map(|p| ts(p.until)),
            b.alert_raised,
            b.version,
        ];
        let changed = if w.read_version == 0 {
            c.prepare_cached(concat!(
                "INSERT INTO jadpo_circuit_breakers (",
                breaker_columns!(),
                ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                 ON CONFLICT (connection) DO NOTHING"
            ))?
            .execute(p)?
        } else {
            let mut stmt = c.prepare_cached(
                "UPDATE jadpo_circuit_breakers SET state = ?2, consecutive_unavailable = ?3, \
                 opened_at = ?4, outage_since = ?5, pause_ms = ?6, probe_delivery = ?7, \
                 probe_until = ?8, alert_raised = ?9, version = ?10 \
                 WHERE connection = ?1 AND version = ?11",
            )?;
            for (i, v) in p.iter().enumerate() {
                stmt.raw_bind_parameter(i + 1, v)?;
            }
            stmt.raw_bind_parameter(11, w.read_version)?;
            stmt.raw_execute()?
        };
        if changed != 1 {
            return Err(Fault::Conflict);
        }
    }
    Ok(())
}

pub(crate) fn event(row: &Row<'_>) -> rusqlite::Result<EventRecord> {
    Ok(EventRecord {
        id: EventId(row.get(0)?),
        name: row.get(1)?,
        payload: row.get(2)?,
        emitted_at: Timestamp::from_millis(row.get(3)?),
        public_id: row.get(4)?,
    })
}
