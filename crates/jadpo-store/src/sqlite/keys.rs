//! Each ordered key's slots (docs/decisions.md, "Per-key order"): a
//! delivery about to be due takes one or waits queued; one that gives its
//! slot up hands it to the key's queued delivery with the lowest id. One
//! process writes at a time, so each is a statement or two in the
//! caller's transaction.

use super::pool::Abort;
use jadpo_core::{Delivery, DeliveryId, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};

/// `d`, written as due (its emit, or an operator's retry that takes a
/// slot again), takes a slot of its key and becomes its holder, or, when
/// the key has none free, is queued. One statement when it takes one:
/// the upsert counts it and names it, and says whether it did. Nothing for
/// a delivery without an ordered key.
pub(crate) fn take(c: &Connection, d: &mut Delivery, now: Timestamp) -> Result<(), Abort> {
    let (Some(rule), Some(key)) = (d.key_rule, &d.key) else {
        return Ok(());
    };
    let took: bool = c
        .prepare_cached(
            "INSERT INTO jadpo_keys (subscriber, delivery_key, taken, holder) VALUES (?1, ?2, 1, ?3) \
             ON CONFLICT (subscriber, delivery_key) DO UPDATE SET \
                 taken = taken + (taken < ?4), \
                 holder = CASE WHEN taken < ?4 THEN ?3 ELSE holder END \
             RETURNING holder IS ?3",
        )?
        .query_row(params![d.subscriber, key.as_str(), d.id.0, rule.slots()], |r| r.get(0))?;
    if !took {
        d.queue(now);
        c.prepare_cached("UPDATE jadpo_deliveries SET state = 'queued', updated_at = ?2 WHERE id = ?1")?
            .execute(params![d.id.0, now.as_millis()])?;
    }
    Ok(())
}

/// `d` took a slot of its key last: what the key's queued deliveries now
/// wait for.
fn held_by(c: &Connection, d: &Delivery) -> Result<(), Abort> {
    if let Some(key) = &d.key {
        c.prepare_cached("UPDATE jadpo_keys SET holder = ?3 WHERE subscriber = ?1 AND delivery_key = ?2")?
            .execute(params![d.subscriber, key.as_str(), d.id.0])?;
    }
    Ok(())
}

/// What the queued delivery `id` waits for: its key's holder.
pub(crate) fn waits_for(c: &Connection, id: DeliveryId) -> Result<Option<DeliveryId>, Abort> {
    let holder: Option<Option<i64>> = c
        .prepare_cached(
            "SELECT k.holder FROM jadpo_deliveries d JOIN jadpo_keys k \
             ON k.subscriber = d.subscriber AND k.delivery_key = d.delivery_key \
             WHERE d.id = ?1 AND d.state = 'queued'",
        )?
        .query_row([id.0], |r| r.get(0))
        .optional()?;
    Ok(holder.flatten().map(DeliveryId))
}

/// `d` gave up its key's slot: the key's queued delivery with the lowest
/// id (the earliest emitted) is promoted, due now, in its place; with none
/// queued, the key has a slot more.
/// Returns the delivery promoted.
pub(crate) fn free(c: &Connection, d: &Delivery, now: Timestamp) -> Result<Option<DeliveryId>, Abort> {
    let Some(key) = &d.key else {
        return Ok(None);
    };
    let next: Option<i64> = c
        .prepare_cached(
            "SELECT id FROM jadpo_deliveries WHERE state = 'queued' AND subscriber = ?1 AND delivery_key = ?2 \
             ORDER BY id LIMIT 1",
        )?
        .query_row(params![d.subscriber, key.as_str()], |r| r.get(0))
        .optional()?;
    if let Some(id) = next {
        let mut promoted = super::rows::get(c, DeliveryId(id))?
            .expect("read in this transaction")
            .delivery;
        promoted.promote(now);
        super::writes::update(c, &promoted, None, None, None)?;
        held_by(c, &promoted)?;
        return Ok(Some(promoted.id));
    }
    let freed = c
        .prepare_cached(
            "UPDATE jadpo_keys SET taken = taken - 1 WHERE subscriber = ?1 AND delivery_key = ?2 AND taken > 0",
        )?
        .execute(params![d.subscriber, key.as_str()])?;
    assert_eq!(freed, 1, "a slot freed was taken");
    // A row left at zero stays for the key's next delivery, rather than
    // being deleted and written again; retention deletes it (`forget`).
    Ok(None)
}

/// Frees `after`'s slot when the change from `before` gave it up (an end
/// under its rule, or an operator's skip).
pub(crate) fn settle(c: &Connection, before: &Delivery, after: &Delivery) -> Result<(), Abort> {
    if after.gave_slot_up(before) {
        free(c, after, after.updated_at)?;
    }
    Ok(())
}

/// Retention: up to `batch` keys with no slot taken, which the next
/// delivery of the key would write again.
pub(crate) fn forget(c: &Connection, batch: usize) -> Result<(), Abort> {
    c.prepare_cached(
        "DELETE FROM jadpo_keys WHERE (subscriber, delivery_key) IN \
         (SELECT subscriber, delivery_key FROM jadpo_keys WHERE taken = 0 LIMIT ?1)",
    )?
    .execute([batch as i64])?;
    Ok(())
}
