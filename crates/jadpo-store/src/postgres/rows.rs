//! Rows to values: the delivery and breaker columns and their decoding
//! (through the codec every store shares). Every write is in `writes.rs`.

use super::Abort;
use crate::codec::{self, BreakerRow, Corrupt, DeliveryRow};
use crate::types::*;
use jadpo_core::breaker::Breaker;
use jadpo_core::{Delivery, DeliveryState, FailureRecord};
use tokio_postgres::Row;

/// The delivery columns, in the order [`delivery`] reads them.
macro_rules! delivery_columns {
    () => {
        "id, event_id, subscriber, state, attempts, due_at, budget_from, held_for_ms, \
         lease_owner, lease_token, lease_until, last_failure_code, last_failure_kind, \
         held_connection, held_since, created_at, updated_at, finished_at, waiting_on, \
         waiting_for, delivery_key, key_rule, \
         skipped_by, skipped_at"
    };
}
pub(crate) use delivery_columns;

/// How many columns [`delivery_columns`] lists: what follows them in a row.
pub(crate) const DELIVERY_COLUMNS: usize = 24;

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
        delivery_key: row.try_get(20)?,
        key_rule: row.try_get(21)?,
        skipped_by: row.try_get(22)?,
        skipped_at: row.try_get(23)?,
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
