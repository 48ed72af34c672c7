//! The claim: lock a batch of due rows, decide, write them back.

use super::rows::{self, breaker_columns, delivery_columns, DELIVERY_COLUMNS};
use super::writes::DeliveryWrites;
use super::Abort;
use crate::codec::at_ms;
use crate::limits::LimitStates;
use crate::plan::{self, Breakers, Candidate};
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::{DeliveryId, LeaseToken};
use std::collections::HashMap;

/// One statement takes the batch. Each queue is its own partial-index scan
/// (`jadpo_deliveries_due`, `jadpo_deliveries_lost`) in key order, locking
/// as it goes and skipping rows another claimer holds, so the `LIMIT`
/// counts only rows this transaction got. An `OR` of the two conditions
/// would defeat both indexes. The two queues are then merged by time, as
/// the in-memory store does, and the batch joined with its events. Whether
/// a row's run committed already (its handled record) is on the row itself.
///
/// The rows' values come from the locking scans themselves: under READ
/// COMMITTED a locked row is its newest version, while a re-read through a
/// join would see the statement's older snapshot (an old lease token).
///
/// When both queues have rows, up to twice `limit` rows are locked and the
/// later half left unwritten until commit; lost leases are rare, so this is
/// the price of claiming exactly what the in-memory store would. The two
/// queues are merged by time here, not by the server: each comes in its
/// index's order, and a sort in the statement (over materialized rows, a
/// third of the statement's time at 500 rows) would mostly sort rows
/// already in order.
pub(super) const CLAIM: &str = concat!(
    "WITH due AS (
        SELECT ",
    delivery_columns!(),
    ", due_at AS t, handled_at IS NOT NULL AS handled FROM jadpo_deliveries
        WHERE state = 'due' AND due_at <= $1
        ORDER BY due_at, id LIMIT $2
        FOR UPDATE SKIP LOCKED
    ), lost AS (
        SELECT ",
    delivery_columns!(),
    ", lease_until AS t, handled_at IS NOT NULL AS handled FROM jadpo_deliveries
        WHERE state = 'running' AND lease_until <= $1
        ORDER BY lease_until, id LIMIT $2
        FOR UPDATE SKIP LOCKED
    )
    SELECT p.*, e.name, e.payload, e.public_id, e.depth, e.traceparent, e.tracestate
    FROM (SELECT * FROM due UNION ALL SELECT * FROM lost) AS p JOIN jadpo_events AS e ON e.id = p.event_id"
);

/// The claim must walk its partial indexes in key order and stop at
/// `limit`, whatever the planner believes: on a table never analyzed (a
/// burst of emits before autovacuum's analyze, or a server without
/// autovacuum) it otherwise sorts every due row first, a second per claim at
/// a million due. Without sorts, bitmap scans and sequential scans, the
/// ordered index scans are the cheapest plan left. With the plan's shape
/// pinned, the statement's generic plan is that plan, so it is used from
/// the first run on a connection: a custom plan costs a planning (0.3 ms
/// and up, measured) on every claim until the server chooses the generic
/// one itself, if it does. For this transaction only.
pub(super) const PIN_PLAN: &str = "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan";

/// Every breaker, in the same round trip as the batch: one row per
/// connection, a small set. Only the ones not closed change the claim, but
/// the closed ones come back with it too, with their versions, so the
/// worker's check just before each run knows a breaker closed since it last
/// saw it open, without a read of its own.
const BREAKERS: &str = concat!("SELECT ", breaker_columns!(), " FROM jadpo_circuit_breakers");

pub(crate) async fn claim(tx: &Transaction<'_>, req: &ClaimRequest<'_>) -> Result<ClaimReport, Abort> {
    let (claim, open, limit_rows) = tokio::try_join!(
        tx.prepare_cached(CLAIM),
        tx.prepare_cached(BREAKERS),
        tx.prepare_cached(super::limits::ALL)
    )?;
    let now = at_ms(req.now);
    let limit = req.limit as i64;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&now, &limit];
    // One round trip: the driver sends each request when its future is
    // first polled, and `try_join!` polls them in this order, so the
    // settings reach the server before the claim.
    // Every row, limited or not: a 429's pause holds any connection. In
    // the same round trip as the claim.
    let (_, rows, open, limit_rows) = tokio::try_join!(
        tx.batch_execute(PIN_PLAN),
        tx.query(&claim, &params),
        tx.query(&open, &[]),
        tx.query(&limit_rows, &[])
    )?;
    if rows.is_empty() {
        return Ok(ClaimReport::default());
    }
    // Both queues merged by time (the column after the delivery's), then
    // id, as the in-memory store takes them; past `limit`, rows stay as
    // they are.
    let mut keyed = Vec::with_capacity(rows.len());
    for row in &rows {
        let t: i64 = row.try_get(DELIVERY_COLUMNS)?;
        let id: i64 = row.try_get(0)?;
        keyed.push((t, id, row));
    }
    keyed.sort_unstable_by_key(|(t, id, _)| (*t, *id));
    keyed.truncate(req.limit);
    // Each row as read, with its stored token.
    let mut read: HashMap<DeliveryId, (jadpo_core::Delivery, i64)> = HashMap::with_capacity(keyed.len());
    let mut candidates = Vec::with_capacity(keyed.len());
    for (_, _, row) in keyed {
        let (delivery, token) = rows::delivery(row)?;
        read.insert(delivery.id, (delivery.clone(), token));
        // Columns after the delivery's: t, handled, name, payload, public id,
        // depth, traceparent, tracestate.
        candidates.push(Candidate {
            delivery,
            handled: row.try_get(DELIVERY_COLUMNS + 1)?,
            event_name: row.try_get(DELIVERY_COLUMNS + 2)?,
            payload: row.try_get(DELIVERY_COLUMNS + 3)?,
            event_public_id: row.try_get(DELIVERY_COLUMNS + 4)?,
            event_depth: u32::try_from(row.try_get::<_, i32>(DELIVERY_COLUMNS + 5)?).unwrap_or(0),
            event_trace: crate::codec::trace(row.try_get(DELIVERY_COLUMNS + 6)?, row.try_get(DELIVERY_COLUMNS + 7)?),
        });
    }
    let open = rows::breakers(&open)?;
    let read_versions: HashMap<String, i64> = open.iter().map(|b| (b.connection.clone(), b.version)).collect();
    let mut breakers = Breakers::new(open);
    // Each claim of a row issues the token after the last one it had, so a
    // token never repeats for a row.
    let mut limits = LimitStates::new(req.routes.limits(), super::limits::states(&limit_rows)?);
    let plan = plan::claim(candidates, &mut breakers, &mut limits, req, |d| {
        LeaseToken(read[&d.id].1 + 1)
    });
    confirm_holds(tx, &plan.deliveries, &read_versions).await?;
    let mut writes = DeliveryWrites::default();
    for d in &plan.deliveries {
        let (before, token) = &read[&d.id];
        writes.push_claimed(before, d, *token);
    }
    // A delivery the claim ended (its budget spent, its run committed
    // already, its subscriber gone) hands its key's slot on, as a finish's
    // end does, after its own row is written.
    let freed: Vec<(String, String)> = plan
        .deliveries
        .iter()
        .filter(|d| d.gave_slot_up(&read[&d.id].0))
        .filter_map(|d| Some((d.subscriber.clone(), d.key.as_ref()?.as_str().to_owned())))
        .collect();
    writes.write(tx).await?;
    super::keys::free(tx, &freed, req.now).await?;
    super::writes::write_breakers(tx, &plan.breakers).await?;
    super::limits::write(tx, &plan.limits).await?;
    Ok(plan.report)
}

/// A hold is decided on a breaker read without a lock. Were that breaker
/// closed by another process before this claim commits, its release would
/// not see the rows held here, and they would wait for the next sweep. So the
/// breakers a hold relied on are locked for share and checked unchanged:
/// a close under way finishes first and this claim is redone, and a close
/// that comes later waits for this claim and then releases its holds.
async fn confirm_holds(
    tx: &Transaction<'_>,
    planned: &[jadpo_core::Delivery],
    read_versions: &HashMap<String, i64>,
) -> Result<(), Abort> {
    let mut held_on: Vec<&str> = planned
        .iter()
        .filter(|d| d.state == jadpo_core::DeliveryState::Held)
        .filter_map(|d| d.held.as_ref().map(|h| h.connection.as_str()))
        .collect();
    if held_on.is_empty() {
        return Ok(());
    }
    held_on.sort_unstable();
    held_on.dedup();
    let stmt = tx
        .prepare_cached("SELECT connection, version FROM jadpo_circuit_breakers WHERE connection = ANY($1) ORDER BY connection FOR SHARE")
        .await?;
    let found = tx.query(&stmt, &[&held_on]).await?;
    if found.len() != held_on.len() {
        return Err(Abort::Conflict);
    }
    for row in found {
        let connection: String = row.try_get(0)?;
        let version: i64 = row.try_get(1)?;
        if read_versions.get(&connection) != Some(&version) {
            return Err(Abort::Conflict);
        }
    }
    Ok(())
}
