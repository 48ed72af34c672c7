//! Retention: finished deliveries, their events and old alert messages,
//! deleted in bounded batches.

use super::pool::Abort;
use jadpo_core::Timestamp;
use rusqlite::{params, Connection};

/// Deletes up to `batch` deliveries finished before `before` (through the
/// retention index, which holds only rows with a `finished_at`; the state is
/// checked too, so a row is pruned only if finished) and their attempts,
/// then their events if no delivery is left on them.
pub(crate) fn prune(c: &Connection, before: Timestamp, batch: usize) -> Result<usize, Abort> {
    let old: Vec<(i64, i64, bool)> = c
        .prepare_cached(
            "SELECT id, event_id, key_rule IS NOT NULL FROM jadpo_deliveries \
             WHERE state IN ('succeeded', 'failed', 'parked') AND finished_at < ?1 \
             ORDER BY finished_at LIMIT ?2",
        )?
        .query_map(params![before.as_millis(), batch as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    // A `strict` key's failed or parked delivery, gone unretried and
    // unskipped, no longer blocks its key.
    for &(id, _, ordered) in &old {
        if !ordered {
            continue;
        }
        let d = super::rows::get(c, jadpo_core::DeliveryId(id))?
            .expect("listed above")
            .delivery;
        if d.holds_slot() {
            super::keys::free(c, &d, before)?;
        }
    }
    let old: Vec<(i64, i64)> = old.into_iter().map(|(id, event, _)| (id, event)).collect();
    let mut attempts = c.prepare_cached("DELETE FROM jadpo_attempts WHERE delivery_id = ?1")?;
    let mut delivery = c.prepare_cached("DELETE FROM jadpo_deliveries WHERE id = ?1")?;
    let mut event = c.prepare_cached(
        "DELETE FROM jadpo_events WHERE id = ?1 AND emitted_at < ?2 \
         AND NOT EXISTS (SELECT 1 FROM jadpo_deliveries WHERE event_id = ?1)",
    )?;
    for (id, _) in &old {
        attempts.execute([id])?;
        delivery.execute([id])?;
    }
    for (_, event_id) in &old {
        event.execute(params![event_id, before.as_millis()])?;
    }
    super::keys::forget(c, batch)?;
    // Alert messages raised before the retention, oldest first: their sends
    // ended within an hour of them.
    c.prepare_cached(
        "DELETE FROM jadpo_alerts WHERE id IN (SELECT id FROM jadpo_alerts \
         WHERE raised_at < ?1 ORDER BY id LIMIT ?2)",
    )?
    .execute(params![before.as_millis(), batch as i64])?;
    // Events no delivery refers to (emitted with no subscriber), oldest
    // first, as many as a batch. Finding them reads every old event still
    // waiting on a delivery, so only once a pass has caught up: behind a
    // backlog, that is the whole backlog at every batch.
    if old.len() < batch {
        c.prepare_cached(
            "DELETE FROM jadpo_events WHERE id IN (SELECT e.id FROM jadpo_events e \
         WHERE e.emitted_at < ?1 AND NOT EXISTS (SELECT 1 FROM jadpo_deliveries d WHERE d.event_id = e.id) \
         ORDER BY e.emitted_at, e.id LIMIT ?2)",
        )?
        .execute(params![before.as_millis(), batch as i64])?;
    }
    Ok(old.len())
}
