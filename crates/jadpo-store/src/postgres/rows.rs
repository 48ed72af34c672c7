//! Rows to values and back: the delivery and breaker columns, the bulk
//! write of many deliveries in one statement, and the breaker's
//! compare-and-set.

use super::Abort;
use crate::plan::BreakerWrite;
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::breaker::{Breaker, BreakerState, Probe};
use jadpo_core::{
    Delivery, DeliveryId, DeliveryState, EventId, FailureKind, FailureRecord, Held, Lease, LeaseToken, Timestamp,
    WaitFor, Waiting,
};
use std::time::Duration;
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

pub(crate) fn corrupt(what: &str, value: &str) -> Abort {
    Abort::Store(StoreError::Unavailable(format!("unreadable row: {what} {value:?}")))
}

pub(crate) fn ms(t: Timestamp) -> i64 {
    t.as_millis()
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn duration(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn at(ms: Option<i64>) -> Option<Timestamp> {
    ms.map(Timestamp::from_millis)
}

pub(crate) fn failure(code: Option<String>, kind: Option<String>) -> Result<Option<FailureRecord>, Abort> {
    match (code, kind) {
        (Some(code), Some(kind)) => {
            let kind = FailureKind::parse(&kind).ok_or_else(|| corrupt("failure kind", &kind))?;
            Ok(Some(FailureRecord { code, kind }))
        }
        _ => Ok(None),
    }
}

fn waiting(connection: Option<String>, reason: Option<String>) -> Result<Option<Waiting>, Abort> {
    match (connection, reason) {
        (Some(connection), Some(reason)) => {
            let reason = WaitFor::parse(&reason).ok_or_else(|| corrupt("waiting for", &reason))?;
            Ok(Some(Waiting { connection, reason }))
        }
        _ => Ok(None),
    }
}

pub(crate) fn state(s: &str) -> Result<DeliveryState, Abort> {
    DeliveryState::parse(s).ok_or_else(|| corrupt("delivery state", s))
}

/// A delivery from the first [`DELIVERY_COLUMNS`] columns of `row`, with its
/// stored lease token: kept after the lease ends, so the next claim can
/// issue the one after it.
pub(crate) fn delivery(row: &Row) -> Result<(Delivery, i64), Abort> {
    let token: i64 = row.try_get(9)?;
    let lease = match (row.try_get::<_, Option<String>>(8)?, row.try_get::<_, Option<i64>>(10)?) {
        (Some(owner), Some(until)) => Some(Lease {
            owner,
            token: LeaseToken(token),
            until: Timestamp::from_millis(until),
        }),
        _ => None,
    };
    let held = match (
        row.try_get::<_, Option<String>>(13)?,
        row.try_get::<_, Option<i64>>(14)?,
    ) {
        (Some(connection), Some(since)) => Some(Held {
            connection,
            since: Timestamp::from_millis(since),
        }),
        _ => None,
    };
    let d = Delivery {
        id: DeliveryId(row.try_get(0)?),
        event_id: EventId(row.try_get(1)?),
        subscriber: row.try_get(2)?,
        state: state(row.try_get(3)?)?,
        attempts: u32::try_from(row.try_get::<_, i32>(4)?).unwrap_or(0),
        due_at: Timestamp::from_millis(row.try_get(5)?),
        budget_from: Timestamp::from_millis(row.try_get(6)?),
        held_for: duration(row.try_get(7)?),
        lease,
        last_failure: failure(row.try_get(11)?, row.try_get(12)?)?,
        held,
        created_at: Timestamp::from_millis(row.try_get(15)?),
        updated_at: Timestamp::from_millis(row.try_get(16)?),
        finished_at: at(row.try_get(17)?),
        waiting: waiting(row.try_get(18)?, row.try_get(19)?)?,
    };
    Ok((d, token))
}

pub(crate) fn breaker(row: &Row) -> Result<Breaker, Abort> {
    let state_text: &str = row.try_get(1)?;
    let probe = match (row.try_get::<_, Option<i64>>(6)?, row.try_get::<_, Option<i64>>(7)?) {
        (Some(delivery), Some(until)) => Some(Probe {
            delivery: DeliveryId(delivery),
            until: Timestamp::from_millis(until),
        }),
        _ => None,
    };
    Ok(Breaker {
        connection: row.try_get(0)?,
        state: BreakerState::parse(state_text).ok_or_else(|| corrupt("breaker state", state_text))?,
        consecutive_unavailable: u32::try_from(row.try_get::<_, i32>(2)?).unwrap_or(0),
        opened_at: at(row.try_get(3)?),
        outage_since: at(row.try_get(4)?),
        pause: duration(row.try_get(5)?),
        probe,
        alert_raised: row.try_get(8)?,
        version: row.try_get(9)?,
    })
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
        let b = &w.breaker;
        let consecutive = i32::try_from(b.consecutive_unavailable).unwrap_or(i32::MAX);
        let opened_at = b.opened_at.map(ms);
        let outage_since = b.outage_since.map(ms);
        let pause_ms = duration_ms(b.pause);
        let probe_delivery = b.probe.map(|p| p.delivery.0);
        let probe_until = b.probe.map(|p| ms(p.until));
        let state = b.state.as_str();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
            &b.connection,
            &state,
            &consecutive,
            &opened_at,
            &outage_since,
            &pause_ms,
            &probe_delivery,
            &probe_until,
            &b.alert_raised,
            &b.version,
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

/// Makes held deliveries due at `now`, adding the hold to `held_for_ms`,
/// the way `Delivery::release` does. Only while the breaker of their
/// connection is closed or absent, seen at this statement's start: a hold
/// that raced a close is left to the next sweep rather than released under a
/// breaker another process just reopened.
const RELEASE: &str = "
WITH released AS (
    UPDATE jadpo_deliveries AS d
    SET state = 'due', due_at = r.now, updated_at = r.now,
        held_for_ms = d.held_for_ms + GREATEST(r.now - d.held_since, 0),
        held_connection = NULL, held_since = NULL
    FROM unnest($1::text[], $2::bigint[]) AS r(connection, now)
    WHERE d.state = 'held' AND d.held_connection = r.connection
      AND NOT EXISTS (SELECT 1 FROM jadpo_circuit_breakers b
                      WHERE b.connection = r.connection AND b.state <> 'closed')
    RETURNING r.connection
)
SELECT connection, count(*) FROM released GROUP BY connection";

/// Releases everything held behind each connection; how many for each.
/// What it released is due now: idle workers in every process are woken
/// when the transaction commits.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    connections: &[(&str, Timestamp)],
) -> Result<Vec<(String, usize)>, Abort> {
    if connections.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = connections.iter().map(|(c, _)| *c).collect();
    let nows: Vec<i64> = connections.iter().map(|(_, t)| ms(*t)).collect();
    let stmt = tx.prepare_cached(RELEASE).await?;
    let rows = tx.query(&stmt, &[&names, &nows]).await?;
    if !rows.is_empty() {
        super::listen::notify(tx).await?;
    }
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)? as usize)))
        .collect()
}
