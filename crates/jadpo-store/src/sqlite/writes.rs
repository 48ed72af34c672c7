//! Every row write: deliveries, attempts, breakers (compare-and-set on
//! their version), and the release of what a closed breaker holds.
//!
//! Delivery rows: a claim's runs and a finish's plain ends,
//! most of every drain, set only the columns they change
//! ([`crate::narrow`]); every other row is written whole. A narrow write
//! took half the time of a whole one, measured on a copy of a bench store:
//! SQLite maintains every index whose columns a statement sets, and binds
//! every parameter, whatever the values.

use super::pool::Abort;
use super::rows;
use crate::codec::{at_ms, BreakerRow, DeliveryRow};
use crate::narrow::{only_ended, only_leased};
use crate::plan::BreakerWrite;
use crate::types::AttemptRecord;
use jadpo_core::{Delivery, LeaseToken, Timestamp};
use rusqlite::{params, CachedStatement, Connection};

/// Every column a rule may change.
const WHOLE: &str = "UPDATE jadpo_deliveries SET state = ?1, attempts = ?2, due_at = ?3, \
         budget_from = ?4, held_for_ms = ?5, lease_owner = ?6, \
         lease_token = COALESCE(?7, lease_token), lease_until = ?8, last_failure_code = ?9, \
         last_failure_kind = ?10, held_connection = ?11, held_since = ?12, updated_at = ?13, \
         finished_at = ?14, handled_at = COALESCE(handled_at, ?17), waiting_on = ?18, \
         waiting_for = ?19, success_started_at = COALESCE(?20, success_started_at), \
         skipped_by = ?21, skipped_at = ?22 \
         WHERE id = ?15 AND (?16 IS NULL OR (state = 'running' AND lease_token = ?16))";

/// A claim's run: `running` under a new lease.
const RUN: &str = "UPDATE jadpo_deliveries SET state = 'running', attempts = ?2, lease_owner = ?3, \
         lease_token = ?4, lease_until = ?5, updated_at = ?6 WHERE id = ?1";

/// A plain end, fenced on the lease it ran under.
const END: &str = "UPDATE jadpo_deliveries SET state = ?2, lease_owner = NULL, lease_until = NULL, \
         updated_at = ?3, finished_at = ?3, handled_at = COALESCE(handled_at, ?4), \
         success_started_at = COALESCE(?5, success_started_at) \
         WHERE id = ?1 AND state = 'running' AND lease_token = ?6";

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
    execute_whole(&mut c.prepare_cached(WHOLE)?, d, fence, handled, succeeded_from)
}

fn execute_whole(
    stmt: &mut CachedStatement<'_>,
    d: &Delivery,
    fence: Option<LeaseToken>,
    handled: Option<Timestamp>,
    succeeded_from: Option<Timestamp>,
) -> rusqlite::Result<usize> {
    let r = DeliveryRow::encode(d, 0);
    stmt.execute(params![
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
        r.skipped_by,
        r.skipped_at,
    ])
}

/// The statement kept in `slot`, taken from `c`'s cache the first time
/// only: a batch's writes and hand-ons keep theirs for every row.
pub(super) fn prepared<'s, 'c>(
    slot: &'s mut Option<CachedStatement<'c>>,
    c: &'c Connection,
    sql: &str,
) -> rusqlite::Result<&'s mut CachedStatement<'c>> {
    if slot.is_none() {
        *slot = Some(c.prepare_cached(sql)?);
    }
    Ok(slot.as_mut().expect("prepared just above"))
}

/// The rows of one claim or one finish batch. Each statement is prepared
/// once for the batch rather than taken from the connection's cache for
/// every row: taking a statement from the cache and giving it back hashes
/// its text twice, an eighth of a row's write in a profile of the drain.
pub(crate) struct Writes<'c> {
    c: &'c Connection,
    whole: Option<CachedStatement<'c>>,
    run: Option<CachedStatement<'c>>,
    end: Option<CachedStatement<'c>>,
}

impl<'c> Writes<'c> {
    pub(super) fn new(c: &'c Connection) -> Writes<'c> {
        Writes {
            c,
            whole: None,
            run: None,
            end: None,
        }
    }

    fn whole(
        &mut self,
        d: &Delivery,
        fence: Option<LeaseToken>,
        handled: Option<Timestamp>,
        succeeded_from: Option<Timestamp>,
    ) -> rusqlite::Result<usize> {
        let stmt = prepared(&mut self.whole, self.c, WHOLE)?;
        execute_whole(stmt, d, fence, handled, succeeded_from)
    }

    /// A claim's row: `after` is what the claim planned for the row read as
    /// `before`, in the claim's own transaction.
    pub(super) fn claimed(&mut self, before: &Delivery, after: &Delivery) -> rusqlite::Result<usize> {
        let Some(lease) = after.lease.as_ref().filter(|_| only_leased(before, after)) else {
            return self.whole(after, None, None, None);
        };
        let stmt = prepared(&mut self.run, self.c, RUN)?;
        stmt.execute(params![
            after.id.0,
            after.attempts,
            lease.owner,
            lease.token.0,
            at_ms(lease.until),
            at_ms(after.updated_at),
        ])
    }

    /// A finished attempt's row, `after` planned from `before` (the row it
    /// ran as), written only if still running under `fence`; `handled` and
    /// `succeeded_from` as [`update`]. Returns the rows changed: 0 when the
    /// fence refused it.
    pub(super) fn finished(
        &mut self,
        before: &Delivery,
        after: &Delivery,
        fence: LeaseToken,
        handled: Option<Timestamp>,
        succeeded_from: Option<Timestamp>,
    ) -> rusqlite::Result<usize> {
        if !only_ended(before, after) {
            return self.whole(after, Some(fence), handled, succeeded_from);
        }
        let stmt = prepared(&mut self.end, self.c, END)?;
        stmt.execute(params![
            after.id.0,
            after.state.as_str(),
            at_ms(after.updated_at),
            handled.map(at_ms),
            succeeded_from.map(at_ms),
            fence.0,
        ])
    }
}

/// Held deliveries of `connection` become due now, each through the core's
/// `Delivery::release`. Returns how many.
pub(crate) fn release(c: &Connection, connection: &str, now: Timestamp) -> Result<usize, Abort> {
    let held: Vec<rows::Stored> = c
        .prepare_cached(concat!(
            "SELECT ",
            rows::delivery_columns!(),
            " FROM jadpo_deliveries d WHERE d.state = 'held' AND d.held_connection = ?1 \
             ORDER BY d.held_since, d.id"
        ))?
        .query_map([connection], rows::delivery)?
        .collect::<rusqlite::Result<_>>()?;
    for s in &held {
        let mut d = s.delivery.clone();
        d.release(now);
        update(c, &d, None, None, None)?;
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
        at_ms(a.started_at),
        at_ms(a.ended_at),
        a.state.as_str(),
        a.failure.as_ref().map(|f| f.code.as_str()),
        a.failure.as_ref().map(|f| f.kind.as_str()),
    ])?;
    Ok(())
}

/// Each write is one statement conditional on the version read: an UPDATE
/// `WHERE version = read`, or an INSERT that does nothing if a row appeared.
/// Nothing changed means another process moved the breaker first:
/// `Abort::Conflict`, and the caller redoes the whole transaction.
pub(crate) fn write_breakers(c: &Connection, writes: &[BreakerWrite]) -> Result<(), Abort> {
    for w in writes {
        let r = BreakerRow::encode(&w.breaker);
        let p = params![
            r.connection,
            r.state,
            r.consecutive_unavailable,
            r.opened_at,
            r.outage_since,
            r.pause_ms,
            r.probe_delivery,
            r.probe_until,
            r.alert_raised,
            r.version,
        ];
        let changed = if w.read_version == 0 {
            c.prepare_cached(concat!(
                "INSERT INTO jadpo_circuit_breakers (",
                rows::breaker_columns!(),
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
            return Err(Abort::Conflict);
        }
    }
    Ok(())
}
