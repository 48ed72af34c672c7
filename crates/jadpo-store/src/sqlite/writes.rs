//! Writes of delivery rows. A claim's runs and a finish's plain ends,
//! most of every drain, set only the columns they change
//! ([`crate::narrow`]); every other row is written whole. Half the time of a
//! row written whole, measured: SQLite checks every index whose columns a
//! statement sets, and binds every parameter, whatever the values.

use crate::codec::{at_ms, DeliveryRow};
use crate::narrow::{only_ended, only_leased};
use jadpo_core::{Delivery, LeaseToken, Timestamp};
use rusqlite::{params, Connection};

/// Writes every column a rule may change. `lease_token` changes only with a
/// new lease: the row keeps the last one issued. `fence`: only if the row is
/// still running under that token (every write after a claim). Returns the
/// rows changed: 0 when the fence refused it. `handled`: the run committed,
/// so the row gets its handled record (one there already is kept).
/// `succeeded_from`: the attempt that succeeded, started then, is kept on
/// the row (`success_started_at`) instead of as a row of `jadpo_attempts`:
/// the last attempt of a delivery, one write fewer on every success.
pub(crate) fn update(
    c: &Connection,
    d: &Delivery,
    fence: Option<LeaseToken>,
    handled: Option<Timestamp>,
    succeeded_from: Option<Timestamp>,
) -> rusqlite::Result<usize> {
    let r = DeliveryRow::encode(d, 0);
    c.prepare_cached(
        "UPDATE jadpo_deliveries SET state = ?1, attempts = ?2, due_at = ?3, \
         budget_from = ?4, held_for_ms = ?5, lease_owner = ?6, \
         lease_token = COALESCE(?7, lease_token), lease_until = ?8, last_failure_code = ?9, \
         last_failure_kind = ?10, held_connection = ?11, held_since = ?12, updated_at = ?13, \
         finished_at = ?14, handled_at = COALESCE(handled_at, ?17), waiting_on = ?18, \
         waiting_for = ?19, success_started_at = COALESCE(?20, success_started_at) \
         WHERE id = ?15 AND (?16 IS NULL OR (state = 'running' AND lease_token = ?16))",
    )?
    .execute(params![
        r.state,
        r.attempts,
        r.due_at,
        r.budget_from,
        r.held_for_ms,
        r.lease_owner,
        // A new lease's token; without one the row keeps its last.
        d.lease.as_ref().map(|_| r.lease_token),
        r.lease_until,
        r.last_failure_code,
        r.last_failure_kind,
        r.held_connection,
        r.held_since,
        r.updated_at,
        r.finished_at,
        r.id,
        fence.map(|t| t.0),
        handled.map(at_ms),
        r.waiting_on,
        r.waiting_for,
        succeeded_from.map(at_ms),
    ])
}

/// A claim's row: `after` is what the claim planned for the row read as
/// `before`, in the claim's own transaction.
pub(crate) fn claimed(c: &Connection, before: &Delivery, after: &Delivery) -> rusqlite::Result<usize> {
    let Some(lease) = after.lease.as_ref().filter(|_| only_leased(before, after)) else {
        return update(c, after, None, None, None);
    };
    c.prepare_cached(
        "UPDATE jadpo_deliveries SET state = 'running', attempts = ?2, lease_owner = ?3, \
         lease_token = ?4, lease_until = ?5, updated_at = ?6 WHERE id = ?1",
    )?
    .execute(params![
        after.id.0,
        after.attempts,
        lease.owner,
        lease.token.0,
        at_ms(lease.until),
        at_ms(after.updated_at),
    ])
}

/// A finished attempt's row, `after` planned from `before` (the row it ran
/// as), written only if still running under `fence`; `handled` and
/// `succeeded_from` as [`update`]. Returns the rows changed: 0 when the
/// fence refused it.
pub(crate) fn finished(
    c: &Connection,
    before: &Delivery,
    after: &Delivery,
    fence: LeaseToken,
    handled: Option<Timestamp>,
    succeeded_from: Option<Timestamp>,
) -> rusqlite::Result<usize> {
    if !only_ended(before, after) {
        return update(c, after, Some(fence), handled, succeeded_from);
    }
    c.prepare_cached(
        "UPDATE jadpo_deliveries SET state = ?2, lease_owner = NULL, lease_until = NULL, \
         updated_at = ?3, finished_at = ?3, handled_at = COALESCE(handled_at, ?4), \
         success_started_at = COALESCE(?5, success_started_at) \
         WHERE id = ?1 AND state = 'running' AND lease_token = ?6",
    )?
    .execute(params![
        after.id.0,
        after.state.as_str(),
        at_ms(after.updated_at),
        handled.map(at_ms),
        succeeded_from.map(at_ms),
        fence.0,
    ])
}
