//! Rows to values and back: the delivery and breaker columns and their
//! decoding (through the codec every store shares), the breaker's
//! compare-and-set, and the release of what a closed breaker holds. The
//! bulk write of many deliveries is in `writes.rs`.

use super::Abort;
use crate::codec::{self, BreakerRow, Corrupt, DeliveryRow};
use crate::plan::BreakerWrite;
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::breaker::Breaker;
use jadpo_core::{Delivery, DeliveryState, FailureRecord, Timestamp};
use tokio_postgres::Row;

/// The delivery columns, in the order [`delivery`] reads them.
macro_rules! delivery_columns {
    () => {
        "id, event_id, subscriber, state, attempts, due_at, budget_from, held_for_ms, \
         lease_owner, lease_token, lease_until, last_failure_code, last_failure_kind, \
         held_connection, held_since, created_at, updated_at, finished_at, waiting_on, \
         waiting_for"
    };
}
pub(crate) use delivery_columns;

/// How many columns [`delivery_columns`] lists: what follows them in a row.
pub(crate) const DELIVERY_COLUMNS: usize = 20;

/// The breaker columns, in the order [`breaker`] reads them.
macro_rules! breaker_columns {
    () => {
        "connection, state, consecutive_unavailable, opened_at, outage_since, pause_ms, \
         probe_delivery, probe_until, alert_raised, version"
    };
}
pub(crate) use breaker_columns;

pub(crate) use crate::codec::at_ms;

pub(crate) fn corrupt(what: &str, value: &str) -> Abort {
    Abort::Store(StoreError::Unavailable(format!("unreadable row: {what} {value:?}")))
}

fn unreadable(e: Corrupt) -> Abort {
    Abort::Store(StoreError::Unavailable(e.to_string()))
}

pub(crate) fn failure(code: Option<String>, kind: Option<String>) -> Result<Option<FailureRecord>, Abort> {
    codec::failure_of(code, kind).map_err(unreadable)
}

pub(crate) fn state(s: &str) -> Result<DeliveryState, Abort> {
    codec::state_of(s).map_err(unreadable)
}

/// A delivery from the first [`DELIVERY_COLUMNS`] columns of `row`, decoded
/// by the codec every store shares, with its stored lease token: kept after
/// the lease ends, so the next claim can issue the one after it.
pub(crate) fn delivery(row: &Row) -> Result<(Delivery, i64), Abort> {
    let r = DeliveryRow {
        id: row.try_get(0)?,
        event_id: row.try_get(1)?,
        subscriber: row.try_get(2)?,
        state: row.try_get(3)?,
        attempts: i64::from(row.try_get::<_, i32>(4)?),
        due_at: row.try_get(5)?,
        budget_from: row.try_get(6)?,
        held_for_ms: row.try_get(7)?,
        lease_owner: row.try_get(8)?,
        lease_token: row.try_get(9)?,
        lease_until: row.try_get(10)?,
        last_failure_code: row.try_get(11)?,
        last_failure_kind: row.try_get(12)?,
        held_connection: row.try_get(13)?,
        held_since: row.try_get(14)?,
        created_at: row.try_get(15)?,
        updated_at: row.try_get(16)?,
        finished_at: row.try_get(17)?,
        waiting_on: row.try_get(18)?,
        waiting_for: row.try_get(19)?,
    };
    r.decode().map_err(unreadable)
}

pub(crate) fn breaker(row: &Row) -> Result<Breaker, Abort> {
    let r = BreakerRow {
        connection: row.try_get(0)?,
        state: row.try_get(1)?,
        consecutive_unavailable: i64::from(row.try_get::<_, i32>(2)?),
        opened_at: row.try_get(3)?,
        outage_since: row.try_get(4)?,
        pause_ms: row.try_get(5)?,
        probe_delivery: row.try_get(6)?,
        probe_until: row.try_get(7)?,
        alert_raised: row.try_get(8)?,
        version: row.try_get(9)?,
    };
    r.decode().map_err(unreadable)
}

pub(crate) fn breakers(rows: &[Row]) -> Result<Vec<Breaker>, Abort> {
    rows.iter().map(breaker).collect()
}

const INSERT_BREAKER: &str = "
INSERT INTO jadpo_circuit_breakers (connection, state, consecutive_unavailable, opened_at,
    outage_since, pause_ms, probe_delivery, probe_until, alert_raised, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (connection) DO NOTHING";

const UPDATE_BREAKER: &str = "
UPDATE jadpo_circuit_breakers SET state = $2, consecutive_unavailable = $3, opened_at = $4,
    outage_since = $5, pause_ms = $6, probe_delivery = $7, probe_until = $8,
    alert_raised = $9, version = $10
WHERE connection = $1 AND version = $11";

/// Writes each breaker only if its row is still at the version read (or
/// still absent). Any that moved meanwhile: [`Abort::Conflict`], so the
/// caller rolls back and redoes the whole method. The writes come sorted by
/// connection, so two transactions lock breaker rows in the same order.
pub(crate) async fn write_breakers(tx: &Transaction<'_>, writes: &[BreakerWrite]) -> Result<(), Abort> {
    for w in writes {
        let r = BreakerRow::encode(&w.breaker);
        let consecutive = i32::try_from(r.consecutive_unavailable).unwrap_or(i32::MAX);
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
            &r.connection,
            &r.state,
            &consecutive,
            &r.opened_at,
            &r.outage_since,
            &r.pause_ms,
            &r.probe_delivery,
            &r.probe_until,
            &r.alert_raised,
            &r.version,
        ];
        // A row that was absent is inserted only if still absent; one that
        // was read is updated only if still at the version read.
        let sql = if w.read_version == 0 {
            INSERT_BREAKER
        } else {
            params.push(&w.read_version);
            UPDATE_BREAKER
        };
        let stmt = tx.prepare_cached(sql).await?;
        let n = tx.execute(&stmt, &params).await?;
        if n != 1 {
            return Err(Abort::Conflict);
        }
    }
    Ok(())
}

/// The held deliveries behind each connection whose breaker is closed or
/// absent, seen at this statement's start, locked in id order: a hold that
/// raced a close is left to the next sweep rather than released under a
/// breaker another process just reopened.
const HELD_BEHIND_CLOSED: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    " FROM jadpo_deliveries AS d
    WHERE d.state = 'held' AND d.held_connection = ANY($1)
      AND NOT EXISTS (SELECT 1 FROM jadpo_circuit_breakers b
                      WHERE b.connection = d.held_connection AND b.state <> 'closed')
    ORDER BY d.id FOR UPDATE OF d"
);

/// Releases everything held behind each connection; how many for each.
/// Each row is released by `Delivery::release`, the rule every store
/// shares, and written back whole. What it released is due now: idle
/// workers in every process are woken when the transaction commits.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    connections: &[(&str, Timestamp)],
) -> Result<Vec<(String, usize)>, Abort> {
    if connections.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = connections.iter().map(|(c, _)| *c).collect();
    let stmt = tx.prepare_cached(HELD_BEHIND_CLOSED).await?;
    let found = tx.query(&stmt, &[&names]).await?;
    let mut released = Vec::with_capacity(found.len());
    let mut counts: Vec<(String, usize)> = Vec::new();
    for row in &found {
        let (mut d, token) = delivery(row)?;
        let connection = d.held.as_ref().map(|h| h.connection.clone()).unwrap_or_default();
        let Some(&(_, now)) = connections.iter().find(|(c, _)| *c == connection) else {
            return Err(Abort::Store(StoreError::Unavailable(format!(
                "released delivery {} is held behind {connection:?}, not asked for",
                d.id.0
            ))));
        };
        d.release(now);
        match counts.iter_mut().find(|(c, _)| *c == connection) {
            Some((_, n)) => *n += 1,
            None => counts.push((connection, 1)),
        }
        released.push((d, token));
    }
    write_released(tx, &released).await?;
    Ok(counts)
}

/// Writes rows this transaction locked and released, and wakes idle
/// workers everywhere on commit: they are due now.
pub(crate) async fn write_released(tx: &Transaction<'_>, released: &[(Delivery, i64)]) -> Result<(), Abort> {
    if released.is_empty() {
        return Ok(());
    }
    let mut writes = super::writes::DeliveryWrites::default();
    for (d, token) in released {
        writes.push(d, *token);
    }
    tokio::try_join!(writes.write(tx), super::listen::notify(tx))?;
    Ok(())
}
