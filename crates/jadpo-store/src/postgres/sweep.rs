//! The tick's sweep, the operator's retry, and retention.

use super::finish::lock;
use super::rows::{self, breaker_columns};
use super::writes::DeliveryWrites;
use super::Abort;
use crate::plan::{self, Breakers, HeldSummary};
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{DeliveryId, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

const ALL_BREAKERS: &str = concat!("SELECT ", breaker_columns!(), " FROM jadpo_circuit_breakers");

/// For each connection holding deliveries: how many, and the one held
/// longest (the next probe), both from `jadpo_deliveries_held`.
const HELD_SUMMARY: &str = "
SELECT c.held_connection, c.n, l.id
FROM (SELECT held_connection, count(*) AS n FROM jadpo_deliveries
      WHERE state = 'held' GROUP BY held_connection) AS c
CROSS JOIN LATERAL (
    SELECT id FROM jadpo_deliveries
    WHERE state = 'held' AND held_connection = c.held_connection
    ORDER BY held_since, id LIMIT 1) AS l";

/// Wakes held deliveries to be probes: due now, the hold added to
/// `held_for_ms`, as `Delivery::release` does.
const WAKE: &str = "
UPDATE jadpo_deliveries
SET state = 'due', due_at = $2, updated_at = $2,
    held_for_ms = held_for_ms + GREATEST($2 - held_since, 0),
    held_connection = NULL, held_since = NULL
WHERE id = ANY($1) AND state = 'held'";

pub(crate) async fn sweep(tx: &Transaction<'_>, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, Abort> {
    let (all, summary) = tokio::try_join!(tx.prepare_cached(ALL_BREAKERS), tx.prepare_cached(HELD_SUMMARY))?;
    let (read, summary) = tokio::try_join!(tx.query(&all, &[]), tx.query(&summary, &[]))?;
    let mut held = BTreeMap::new();
    for r in &summary {
        let count: i64 = r.try_get(1)?;
        held.insert(
            r.try_get::<_, String>(0)?,
            HeldSummary {
                count: count as u64,
                longest: Some(DeliveryId(r.try_get(2)?)),
            },
        );
    }
    let mut breakers = Breakers::new(rows::breakers(&read)?);
    let plan = plan::sweep(&mut breakers, &held, now, wake_lease);
    // Breakers first: a conflict aborts before any delivery is touched, and
    // every transaction takes breaker rows before held rows.
    rows::write_breakers(tx, &plan.breakers).await?;
    if !plan.wake.is_empty() {
        let ids: Vec<i64> = plan.wake.iter().map(|id| id.0).collect();
        let stmt = tx.prepare_cached(WAKE).await?;
        // The probe is due now: wake idle workers everywhere on commit.
        let (n, ()) = tokio::try_join!(
            async { Ok::<_, Abort>(tx.execute(&stmt, &[&ids, &rows::ms(now)]).await?) },
            super::listen::notify(tx)
        )?;
        if n as usize != ids.len() {
            // The longest held was released or woken by another process
            // since the summary was read.
            return Err(Abort::Conflict);
        }
    }
    let release: Vec<(&str, Timestamp)> = plan.release.iter().map(|c| (c.as_str(), now)).collect();
    let released = rows::release(tx, &release).await?.iter().map(|(_, n)| n).sum();
    let messages: Vec<AlertMessage> = plan.alerts.iter().map(|a| AlertMessage::raised(a, now)).collect();
    super::alerts::insert(tx, &messages).await?;
    Ok(SweepReport {
        woken: plan.wake,
        released,
        alerts: plan.alerts,
    })
}

/// Failed and parked deliveries get a fresh budget, each due at its time.
/// Idle workers everywhere are woken on commit: those due later are then
/// waited for until their time (see `Store::next_due`).
pub(crate) async fn retry(
    tx: &Transaction<'_>,
    due: &[(DeliveryId, Timestamp)],
    now: Timestamp,
) -> Result<Vec<DeliveryId>, Abort> {
    let mut ids: Vec<i64> = due.iter().map(|(id, _)| id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut current = lock(tx, &ids).await?;
    let mut retried = Vec::new();
    for &(id, due_at) in due {
        if let Some((d, _)) = current.get_mut(&id).filter(|(d, _)| d.retryable_by_operator()) {
            d.operator_retry(due_at, now);
            retried.push(id);
        }
    }
    let mut writes = DeliveryWrites::default();
    // Each id is retried once at most: the second time it is due already.
    for id in &retried {
        let (d, token) = &current[id];
        writes.push(d, *token);
    }
    if retried.is_empty() {
        return Ok(retried);
    }
    tokio::try_join!(writes.write(tx), super::listen::notify(tx))?;
    Ok(retried)
}

/// Old finished deliveries, oldest first, with their attempts (the handled
/// record is a column of the row); `jadpo_deliveries_finished` finds them. Rows an operator is
/// retrying right now are skipped, not waited for.
const PRUNE: &str = "
WITH old AS (
    SELECT id FROM jadpo_deliveries
    WHERE state IN ('succeeded', 'failed', 'parked') AND finished_at < $1
    ORDER BY finished_at LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jadpo_deliveries AS d USING old WHERE d.id = old.id
    RETURNING d.id, d.event_id
), attempts AS (
    DELETE FROM jadpo_attempts WHERE delivery_id IN (SELECT id FROM gone)
)
SELECT count(*), coalesce(array_agg(DISTINCT event_id), '{}') FROM gone";

/// The events of pruned deliveries that no delivery refers to any more. A
/// second statement: the first one's deletions are not visible to itself.
///
/// An event's deliveries are looked up by id, between its first and last
/// (`jadpo_deliveries` has no index on `event_id`). `OFFSET 0` keeps the
/// `NOT EXISTS` a lookup per event: turned into an anti-join, the planner
/// may hash every delivery instead (150 ms at 200,000 rows, measured).
const PRUNE_EVENTS: &str = "
DELETE FROM jadpo_events AS e
WHERE e.id = ANY($1) AND e.emitted_at < $2
  AND NOT EXISTS (SELECT 1 FROM jadpo_deliveries AS d
                  WHERE d.id BETWEEN e.first_delivery AND e.last_delivery AND d.event_id = e.id
                  OFFSET 0)";

/// Events no delivery refers to (emitted with no subscriber), oldest first,
/// each delivery looked up as in `PRUNE_EVENTS`. The batch is deleted by
/// its ids: an `IN (subquery)` may be planned as a hash join over every
/// event.
const PRUNE_ORPHAN_EVENTS: &str = "
DELETE FROM jadpo_events WHERE id = ANY(ARRAY(
  SELECT e.id FROM jadpo_events AS e
  WHERE e.emitted_at < $1
    AND NOT EXISTS (SELECT 1 FROM jadpo_deliveries AS d
                    WHERE d.id BETWEEN e.first_delivery AND e.last_delivery AND d.event_id = e.id
                    OFFSET 0)
  ORDER BY e.emitted_at, e.id
  LIMIT $2
  FOR UPDATE SKIP LOCKED))";

pub(crate) async fn prune(tx: &Transaction<'_>, before: Timestamp, batch: usize) -> Result<usize, Abort> {
    let stmt = tx.prepare_cached(PRUNE).await?;
    let row = tx.query_one(&stmt, &[&rows::ms(before), &(batch as i64)]).await?;
    let deleted: i64 = row.try_get(0)?;
    let events: Vec<i64> = row.try_get(1)?;
    if !events.is_empty() {
        let stmt = tx.prepare_cached(PRUNE_EVENTS).await?;
        tx.execute(&stmt, &[&events, &rows::ms(before)]).await?;
    }
    let stmt = tx.prepare_cached(PRUNE_ORPHAN_EVENTS).await?;
    tx.execute(&stmt, &[&rows::ms(before), &(batch as i64)]).await?;
    Ok(deleted as usize)
}
