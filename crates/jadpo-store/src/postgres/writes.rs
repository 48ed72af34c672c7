//! Every row write: deliveries, attempts, breakers (compare-and-set on
//! their version), and the release of what a closed breaker holds.
//!
//! Many deliveries go in one statement per shape of change, each an
//! `UPDATE ... FROM unnest(...)` over column arrays.
//!
//! Most rows a claim or finish writes change the same few columns the same
//! way: a claim's runs (`running`, a new lease), a finish's plain successes
//! (`succeeded`, lease cleared, the handled record). Those go as a narrow
//! statement with an array per column that differs between rows (three), not
//! sixteen: the server unpacks a fifth of the arrays for each of them. Every
//! other row goes as a full row. Which rows are narrow is decided by
//! comparing the planned row with the row as read, so `plan.rs` stays the
//! only place that decides what a delivery becomes.

use super::rows::{self, delivery_columns};
use super::Abort;
use crate::codec::{at_ms, span_ms, BreakerRow};
use crate::narrow::{only_ended, only_leased};
use crate::plan::BreakerWrite;
use crate::types::{AttemptRecord, StoreError};
use deadpool_postgres::Transaction;
use jadpo_core::{Delivery, DeliveryState, Timestamp};

const WRITE_ROWS: &str = "
UPDATE jadpo_deliveries AS d SET
    state = u.state, attempts = u.attempts, due_at = u.due_at,
    budget_from = u.budget_from, held_for_ms = u.held_for_ms,
    lease_owner = u.lease_owner, lease_token = u.lease_token, lease_until = u.lease_until,
    last_failure_code = u.code, last_failure_kind = u.kind,
    held_connection = u.held_connection, held_since = u.held_since,
    updated_at = u.updated_at, finished_at = u.finished_at,
    handled_at = coalesce(d.handled_at, u.handled_at),
    waiting_on = u.waiting_on, waiting_for = u.waiting_for,
    skipped_by = u.skipped_by, skipped_at = u.skipped_at
FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[],
            $7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[],
            $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[],
            $18::text[], $19::text[], $20::text[], $21::bigint[])
    AS u(id, state, attempts, due_at, budget_from, held_for_ms, lease_owner, lease_token,
         lease_until, code, kind, held_connection, held_since, updated_at, finished_at, fence,
         handled_at, waiting_on, waiting_for, skipped_by, skipped_at)
WHERE d.id = u.id
  AND (u.fence IS NULL OR CASE WHEN d.state = 'running' THEN d.lease_token = u.fence ELSE false END)";

// The fence's `state = 'running'` sits inside a CASE on purpose: written
// plainly, the planner may match it to the lost-lease index's condition and,
// from statistics taken when nothing ran, walk every running row for each
// row written instead of looking each up by id.

/// A claim's runs: rows this transaction locked, all leased to one worker
/// until one time at one moment.
const WRITE_RUNS: &str = "
UPDATE jadpo_deliveries AS d SET
    state = 'running', attempts = u.attempts, lease_owner = $4, lease_token = u.lease_token,
    lease_until = $5, updated_at = $6
FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS u(id, attempts, lease_token)
WHERE d.id = u.id";

/// A finish's plain ends, fenced on the lease each ran under; a success
/// keeps its attempt on the row (`success_started_at`).
pub(super) const WRITE_ENDS: &str = "
UPDATE jadpo_deliveries AS d SET
    state = u.state, lease_owner = NULL, lease_until = NULL, updated_at = u.at, finished_at = u.at,
    handled_at = coalesce(d.handled_at, u.handled_at), success_started_at = u.started_at
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[])
    AS u(id, fence, at, state, handled_at, started_at)
WHERE d.id = u.id AND CASE WHEN d.state = 'running' THEN d.lease_token = u.fence ELSE false END";

/// Each write joins its arrays to the deliveries by id, and must look each
/// row up by the primary key. Left to its statistics, the planner may hash
/// every delivery instead once the table is analyzed: seen on a finish of
/// 1,000 rows at 100,000 deliveries, a sequential scan taking 37 ms of its
/// 41. Pinned so, the generic plan is the plan, used at once rather than
/// planned again per write (see `claim::PIN_PLAN`). For the rest of the
/// transaction only, sent in the write's own round trip.
pub(crate) const PIN_JOINS: &str =
    "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan";

/// Rows written whole, as column arrays. A row pushed with a fence is
/// written only if it is still running under that lease token.
#[derive(Default)]
struct Rows<'a> {
    id: Vec<i64>,
    fence: Vec<Option<i64>>,
    state: Vec<&'static str>,
    attempts: Vec<i32>,
    due_at: Vec<i64>,
    budget_from: Vec<i64>,
    held_for_ms: Vec<i64>,
    lease_owner: Vec<Option<&'a str>>,
    lease_token: Vec<i64>,
    lease_until: Vec<Option<i64>>,
    code: Vec<Option<&'a str>>,
    kind: Vec<Option<&'static str>>,
    held_connection: Vec<Option<&'a str>>,
    held_since: Vec<Option<i64>>,
    updated_at: Vec<i64>,
    finished_at: Vec<Option<i64>>,
    handled_at: Vec<Option<i64>>,
    waiting_on: Vec<Option<&'a str>>,
    waiting_for: Vec<Option<&'static str>>,
    skipped_by: Vec<Option<&'a str>>,
    skipped_at: Vec<Option<i64>>,
}

/// Runs of one claim: what differs between them.
#[derive(Default)]
struct Runs<'a> {
    /// Lease owner, lease end and the claim's moment, shared by every run.
    shared: Option<(&'a str, i64, i64)>,
    id: Vec<i64>,
    attempts: Vec<i32>,
    lease_token: Vec<i64>,
}

#[derive(Default)]
struct Ends {
    id: Vec<i64>,
    fence: Vec<i64>,
    at: Vec<i64>,
    state: Vec<&'static str>,
    handled_at: Vec<Option<i64>>,
    started_at: Vec<Option<i64>>,
}

/// Many deliveries' new values, written by [`DeliveryWrites::write`] in at
/// most three statements sent in one round trip.
#[derive(Default)]
pub(crate) struct DeliveryWrites<'a> {
    rows: Rows<'a>,
    runs: Runs<'a>,
    ends: Ends,
}

fn attempts(d: &Delivery) -> i32 {
    i32::try_from(d.attempts).unwrap_or(i32::MAX)
}

impl<'a> DeliveryWrites<'a> {
    /// `token` is the row's stored token, kept when `d` holds no lease. For
    /// a row this transaction locked: it must be found.
    pub(super) fn push(&mut self, d: &'a Delivery, token: i64) {
        self.push_row(d, token, None, None);
    }

    /// A row this transaction locked and claimed, `before` as read.
    pub(super) fn push_claimed(&mut self, before: &Delivery, after: &'a Delivery, token: i64) {
        if let Some(lease) = after.lease.as_ref().filter(|_| only_leased(before, after)) {
            let shared = (lease.owner.as_str(), at_ms(lease.until), at_ms(after.updated_at));
            if *self.runs.shared.get_or_insert(shared) == shared {
                self.runs.id.push(after.id.0);
                self.runs.attempts.push(attempts(after));
                self.runs.lease_token.push(lease.token.0);
                return;
            }
        }
        self.push(after, token);
    }

    /// A finished attempt's row, `before` as read without a lock while it
    /// ran under `token`: written only if it still does. If not, the whole
    /// write is [`Abort::Conflict`], so the method is redone from its reads
    /// (and then sees the lease lost). `handled` when its run committed (the
    /// handled record; one there already is kept). Returns true when the
    /// attempt, which started at `started_at`, is kept on the row: a plain
    /// success, which then needs no row of its own in `jadpo_attempts`.
    pub(super) fn push_finished(
        &mut self,
        before: &Delivery,
        after: &'a Delivery,
        token: i64,
        handled: Option<Timestamp>,
        started_at: Timestamp,
    ) -> bool {
        let handled_at = handled.map(at_ms);
        if !only_ended(before, after) {
            self.push_row(after, token, Some(token), handled_at);
            return false;
        }
        let on_row = after.state == DeliveryState::Succeeded;
        self.ends.id.push(after.id.0);
        self.ends.fence.push(token);
        self.ends.at.push(at_ms(after.updated_at));
        self.ends.state.push(after.state.as_str());
        self.ends.handled_at.push(handled_at);
        self.ends.started_at.push(on_row.then(|| at_ms(started_at)));
        on_row
    }

    fn push_row(&mut self, d: &'a Delivery, token: i64, fence: Option<i64>, handled_at: Option<i64>) {
        let r = &mut self.rows;
        r.id.push(d.id.0);
        r.fence.push(fence);
        r.state.push(d.state.as_str());
        r.attempts.push(attempts(d));
        r.due_at.push(at_ms(d.due_at));
        r.budget_from.push(at_ms(d.budget_from));
        r.held_for_ms.push(span_ms(d.held_for));
        r.lease_owner.push(d.lease.as_ref().map(|l| l.owner.as_str()));
        r.lease_token.push(d.lease.as_ref().map_or(token, |l| l.token.0));
        r.lease_until.push(d.lease.as_ref().map(|l| at_ms(l.until)));
        r.code.push(d.last_failure.as_ref().map(|f| f.code.as_str()));
        r.kind.push(d.last_failure.as_ref().map(|f| f.kind.as_str()));
        r.held_connection.push(d.held.as_ref().map(|h| h.connection.as_str()));
        r.held_since.push(d.held.as_ref().map(|h| at_ms(h.since)));
        r.updated_at.push(at_ms(d.updated_at));
        r.finished_at.push(d.finished_at.map(at_ms));
        r.handled_at.push(handled_at);
        r.waiting_on.push(d.waiting.as_ref().map(|w| w.connection.as_str()));
        r.waiting_for.push(d.waiting.as_ref().map(|w| w.reason.as_str()));
        r.skipped_by.push(d.skipped.as_ref().map(|s| s.by.as_str()));
        r.skipped_at.push(d.skipped.as_ref().map(|s| at_ms(s.at)));
    }

    /// Writes them all. A locked row not found is a fault; a fenced row that
    /// moved is a conflict.
    pub(super) async fn write(&self, tx: &Transaction<'_>) -> Result<(), Abort> {
        if self.rows.id.is_empty() && self.runs.id.is_empty() && self.ends.id.is_empty() {
            return Ok(());
        }
        // The settings are polled first, so they reach the server first.
        let (_, rows, runs, ends) = tokio::try_join!(
            async { Ok::<_, Abort>(tx.batch_execute(PIN_JOINS).await?) },
            self.write_rows(tx),
            self.write_runs(tx),
            self.write_ends(tx)
        )?;
        let fenced = self.rows.fence.iter().any(Option::is_some) || !self.ends.id.is_empty();
        let expected = self.rows.id.len() + self.runs.id.len() + self.ends.id.len();
        let written = rows + runs + ends;
        if written != expected && fenced {
            return Err(Abort::Conflict);
        }
        if written != expected {
            return Err(Abort::Store(StoreError::Unavailable(format!(
                "wrote {written} of {expected} locked deliveries"
            ))));
        }
        Ok(())
    }

    async fn write_rows(&self, tx: &Transaction<'_>) -> Result<usize, Abort> {
        let r = &self.rows;
        if r.id.is_empty() {
            return Ok(0);
        }
        let stmt = tx.prepare_cached(WRITE_ROWS).await?;
        let n = tx
            .execute(
                &stmt,
                &[
                    &r.id,
                    &r.state,
                    &r.attempts,
                    &r.due_at,
                    &r.budget_from,
                    &r.held_for_ms,
                    &r.lease_owner,
                    &r.lease_token,
                    &r.lease_until,
                    &r.code,
                    &r.kind,
                    &r.held_connection,
                    &r.held_since,
                    &r.updated_at,
                    &r.finished_at,
                    &r.fence,
                    &r.handled_at,
                    &r.waiting_on,
                    &r.waiting_for,
                    &r.skipped_by,
                    &r.skipped_at,
                ],
            )
            .await?;
        Ok(n as usize)
    }

    async fn write_runs(&self, tx: &Transaction<'_>) -> Result<usize, Abort> {
        let r = &self.runs;
        let Some((owner, until, at)) = r.shared else {
            return Ok(0);
        };
        let stmt = tx.prepare_cached(WRITE_RUNS).await?;
        let n = tx
            .execute(&stmt, &[&r.id, &r.attempts, &r.lease_token, &owner, &until, &at])
            .await?;
        Ok(n as usize)
    }

    async fn write_ends(&self, tx: &Transaction<'_>) -> Result<usize, Abort> {
        let e = &self.ends;
        if e.id.is_empty() {
            return Ok(0);
        }
        let stmt = tx.prepare_cached(WRITE_ENDS).await?;
        let n = tx
            .execute(&stmt, &[&e.id, &e.fence, &e.at, &e.state, &e.handled_at, &e.started_at])
            .await?;
        Ok(n as usize)
    }
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
        let (mut d, token) = rows::delivery(row)?;
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
    let mut writes = DeliveryWrites::default();
    for (d, token) in released {
        writes.push(d, *token);
    }
    tokio::try_join!(writes.write(tx), super::listen::notify(tx))?;
    Ok(())
}

const INSERT_ATTEMPTS: &str = "
INSERT INTO jadpo_attempts (delivery_id, attempt, started_at, ended_at, state, failure_code, failure_kind)
SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[])";

/// The attempts of a finish batch, one statement for all of them.
pub(crate) async fn insert_attempts(tx: &Transaction<'_>, attempts: &[AttemptRecord]) -> Result<(), Abort> {
    if attempts.is_empty() {
        return Ok(());
    }
    let delivery: Vec<i64> = attempts.iter().map(|a| a.delivery.0).collect();
    let attempt: Vec<i32> = attempts.iter().map(|a| a.attempt as i32).collect();
    let started: Vec<i64> = attempts.iter().map(|a| at_ms(a.started_at)).collect();
    let ended: Vec<i64> = attempts.iter().map(|a| at_ms(a.ended_at)).collect();
    let state: Vec<&str> = attempts.iter().map(|a| a.state.as_str()).collect();
    let code: Vec<Option<&str>> = attempts
        .iter()
        .map(|a| a.failure.as_ref().map(|f| f.code.as_str()))
        .collect();
    let kind: Vec<Option<&str>> = attempts
        .iter()
        .map(|a| a.failure.as_ref().map(|f| f.kind.as_str()))
        .collect();
    let stmt = tx.prepare_cached(INSERT_ATTEMPTS).await?;
    tx.execute(&stmt, &[&delivery, &attempt, &started, &ended, &state, &code, &kind])
        .await?;
    Ok(())
}
