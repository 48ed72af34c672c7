//! Retention: finished deliveries, their events and old alert messages,
//! deleted in bounded batches.

use super::rows::{self};
use super::Abort;
use deadpool_postgres::Transaction;
use jadpo_core::Timestamp;

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

/// Alert messages raised before the retention, oldest first (their sends
/// ended within an hour of them), deleted by their ids as the orphan events
/// are.
const PRUNE_ALERTS: &str = "
DELETE FROM jadpo_alerts WHERE id = ANY(ARRAY(
  SELECT id FROM jadpo_alerts WHERE raised_at < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED))";

pub(crate) async fn prune(tx: &Transaction<'_>, before: Timestamp, batch: usize) -> Result<usize, Abort> {
    let stmt = tx.prepare_cached(PRUNE).await?;
    let row = tx.query_one(&stmt, &[&rows::at_ms(before), &(batch as i64)]).await?;
    let deleted: i64 = row.try_get(0)?;
    let events: Vec<i64> = row.try_get(1)?;
    if !events.is_empty() {
        let stmt = tx.prepare_cached(PRUNE_EVENTS).await?;
        tx.execute(&stmt, &[&events, &rows::at_ms(before)]).await?;
    }
    let stmt = tx.prepare_cached(PRUNE_ORPHAN_EVENTS).await?;
    tx.execute(&stmt, &[&rows::at_ms(before), &(batch as i64)]).await?;
    let stmt = tx.prepare_cached(PRUNE_ALERTS).await?;
    tx.execute(&stmt, &[&rows::at_ms(before), &(batch as i64)]).await?;
    Ok(deleted as usize)
}
