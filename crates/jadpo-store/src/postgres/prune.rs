//! Retention: finished deliveries, their events and old alert messages,
//! deleted in bounded batches.

use super::Abort;
use crate::codec::at_ms;
use deadpool_postgres::Transaction;
use jadpo_core::Timestamp;

/// Old finished deliveries, oldest first, with their attempts (the handled
/// record is a column of the row) and keys; `jadpo_deliveries_finished` finds them. Rows an operator is
/// retrying right now are skipped, not waited for.
const PRUNE: &str = "
WITH old AS (
    SELECT id FROM jadpo_deliveries
    WHERE state IN ('succeeded', 'failed', 'parked') AND finished_at < $1
    ORDER BY finished_at LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jadpo_deliveries AS d USING old WHERE d.id = old.id
    RETURNING d.id, d.event_id, d.delivery_key, d.subscriber, d.state, d.key_rule, d.skipped_at
), attempts AS (
    DELETE FROM jadpo_attempts WHERE delivery_id IN (SELECT id FROM gone)
), keys AS (
    DELETE FROM jadpo_delivery_keys AS k USING gone
    WHERE k.delivery_key = gone.delivery_key AND k.delivery_id = gone.id
)
SELECT count(*), coalesce(array_agg(DISTINCT event_id), '{}'),
    coalesce(array_agg(subscriber) FILTER (WHERE key_rule IS NOT NULL AND skipped_at IS NULL), '{}'),
    coalesce(array_agg(delivery_key) FILTER (WHERE key_rule IS NOT NULL AND skipped_at IS NULL), '{}'),
    coalesce(array_agg(state) FILTER (WHERE key_rule IS NOT NULL AND skipped_at IS NULL), '{}'),
    coalesce(array_agg(key_rule) FILTER (WHERE key_rule IS NOT NULL AND skipped_at IS NULL), '{}')
FROM gone";

/// The events of pruned deliveries, locked in id order before
/// `PRUNE_EVENTS` looks at them. Two processes pruning two deliveries of
/// one event at once would each still see the other's delivery and keep
/// the event, for good; with the lock, the second waits for the first to
/// commit and, in its next statement (a new snapshot), sees both gone.
const LOCK_EVENTS: &str = "SELECT id FROM jadpo_events WHERE id = ANY($1) ORDER BY id FOR UPDATE";

/// The events of pruned deliveries that no delivery refers to any more. A
/// statement of its own: the first one's deletions are not visible to
/// itself.
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

/// Old events emitted with no subscriber, oldest first, through their own
/// index (`jadpo_events_unreferenced`): a few rows read per row deleted,
/// however many old events still wait on their deliveries.
const PRUNE_UNREFERENCED_EVENTS: &str = "
DELETE FROM jadpo_events WHERE id = ANY(ARRAY(
  SELECT id FROM jadpo_events
  WHERE first_delivery IS NULL AND emitted_at < $1
  ORDER BY emitted_at, id
  LIMIT $2
  FOR UPDATE SKIP LOCKED))";

/// Old events whose deliveries are all gone but that were kept: what the
/// race `LOCK_EVENTS` closes left behind under builds before it. It reads
/// every old event still waiting on a delivery, so it runs only once a pass
/// has caught up (then those are few). Each delivery is looked up as in
/// `PRUNE_EVENTS`, and the batch is deleted by its ids: an `IN (subquery)`
/// may be planned as a hash join over every event.
const PRUNE_ORPHAN_EVENTS: &str = "
DELETE FROM jadpo_events WHERE id = ANY(ARRAY(
  SELECT e.id FROM jadpo_events AS e
  WHERE e.emitted_at < $1 AND e.first_delivery IS NOT NULL
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
    let before_ms = at_ms(before);
    let limit = batch as i64;
    let stmt = tx.prepare_cached(PRUNE).await?;
    let row = tx.query_one(&stmt, &[&before_ms, &limit]).await?;
    let deleted: i64 = row.try_get(0)?;
    let events: Vec<i64> = row.try_get(1)?;
    // A `strict` key's failed or parked delivery, gone unretried and
    // unskipped (a skip handed its slot on already), no longer blocks its
    // key: its slot is handed on.
    let (subscribers, keys): (Vec<String>, Vec<String>) = (row.try_get(2)?, row.try_get(3)?);
    let (states, rules): (Vec<String>, Vec<String>) = (row.try_get(4)?, row.try_get(5)?);
    let mut freed = Vec::new();
    for (((s, k), state), rule) in subscribers.into_iter().zip(keys).zip(states).zip(rules) {
        let rule = jadpo_core::key_rule::KeyRule::from_stored(&rule);
        let state = jadpo_core::DeliveryState::parse(&state);
        if let (Some(rule), Some(state)) = (rule, state) {
            if rule.holds_slot(state) {
                freed.push((s, k));
            }
        }
    }
    super::keys::free(tx, &freed, before).await?;
    if !events.is_empty() {
        let stmt = tx.prepare_cached(LOCK_EVENTS).await?;
        tx.execute(&stmt, &[&events]).await?;
        let stmt = tx.prepare_cached(PRUNE_EVENTS).await?;
        tx.execute(&stmt, &[&events, &before_ms]).await?;
    }
    let stmt = tx.prepare_cached(PRUNE_UNREFERENCED_EVENTS).await?;
    tx.execute(&stmt, &[&before_ms, &limit]).await?;
    if (deleted as usize) < batch {
        let stmt = tx.prepare_cached(PRUNE_ORPHAN_EVENTS).await?;
        tx.execute(&stmt, &[&before_ms, &limit]).await?;
    }
    let stmt = tx.prepare_cached(PRUNE_ALERTS).await?;
    tx.execute(&stmt, &[&before_ms, &limit]).await?;
    Ok(deleted as usize)
}
