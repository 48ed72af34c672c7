//! Each ordered key's slots (docs/decisions.md, "Per-key order"): a
//! delivery about to be due takes one or waits queued; one that gives its
//! slot up hands it to the key's queued delivery with the lowest id. One
//! process writes at a time, so each is a statement or two in the
//! caller's transaction.

use super::pool::Abort;
use jadpo_core::{Delivery, DeliveryId, Timestamp};
use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

/// `d`, written as due (an operator's retry that takes a slot again),
/// takes a slot of its key, or, when the key has none free, is queued.
/// Nothing for a delivery without an ordered key.
pub(crate) fn take(c: &Connection, d: &mut Delivery, now: Timestamp) -> Result<(), Abort> {
    if take_or_queue(c, d, now)? {
        c.prepare_cached("UPDATE jadpo_deliveries SET state = 'queued', updated_at = ?2 WHERE id = ?1")?
            .execute(params![d.id.0, now.as_millis()])?;
    }
    Ok(())
}

/// `d`, about to be due, takes a slot of its key, or, when the key has
/// none free, is queued: in `d` only, so an emit writes its row once, as
/// it will stay. True when it was queued. One statement: the upsert counts
/// the slot taken, and returns a row only if it did (a full key's row is
/// left as it is).
pub(crate) fn take_or_queue(c: &Connection, d: &mut Delivery, now: Timestamp) -> Result<bool, Abort> {
    let (Some(rule), Some(key)) = (d.key_rule, &d.key) else {
        return Ok(false);
    };
    let took = c
        .prepare_cached(
            "INSERT INTO jadpo_keys (subscriber, delivery_key, taken) VALUES (?1, ?2, 1) \
             ON CONFLICT (subscriber, delivery_key) DO UPDATE SET taken = taken + 1 WHERE taken < ?3 \
             RETURNING 1",
        )?
        .query_row(params![d.subscriber, key.as_str(), rule.slots()], |_| Ok(()))
        .optional()?
        .is_some();
    if !took {
        d.queue(now);
    }
    Ok(!took)
}

/// A delivery holding a slot of its key, aliased `d`.
macro_rules! live {
    () => {
        "(d.state IN ('due', 'running', 'held') \
         OR (d.state IN ('failed', 'parked') AND d.key_rule = 'strict' AND d.skipped_at IS NULL))"
    };
}

/// See [`waits_for`].
const WAITS_FOR: &str = concat!(
    "WITH me AS (SELECT subscriber, delivery_key FROM jadpo_deliveries WHERE id = ?1 AND state = 'queued'), \
     head AS (SELECT min(q.id) AS id FROM me JOIN jadpo_deliveries q \
         ON q.state = 'queued' AND q.subscriber = me.subscriber AND q.delivery_key = me.delivery_key) \
     SELECT id FROM ( \
         SELECT * FROM (SELECT d.id FROM me, head, jadpo_deliveries d \
             WHERE d.delivery_key = me.delivery_key AND d.id < head.id AND d.subscriber = me.subscriber AND ",
    live!(),
    " ORDER BY d.id DESC LIMIT 1) \
         UNION ALL \
         SELECT * FROM (SELECT d.id FROM me, jadpo_deliveries d \
             WHERE d.delivery_key = me.delivery_key AND d.subscriber = me.subscriber AND ",
    live!(),
    " ORDER BY d.id DESC LIMIT 1)) \
     LIMIT 1"
);

/// What the queued delivery `id` waits for: the delivery of its key that
/// took a slot last, read from the deliveries as PostgreSQL's `WAITS_FOR`
/// does (the live delivery of the key just before its first queued one,
/// else its latest live one), through `jadpo_deliveries_key`.
pub(crate) fn waits_for(c: &Connection, id: DeliveryId) -> Result<Option<DeliveryId>, Abort> {
    let holder: Option<i64> = c
        .prepare_cached(WAITS_FOR)?
        .query_row([id.0], |r| r.get(0))
        .optional()?;
    Ok(holder.map(DeliveryId))
}

/// The key's queued delivery with the lowest id, promoted as
/// `Delivery::promote` does (due at once, or at its own due time if
/// later), in one statement: the row is not read, and only the columns a
/// promotion changes are written, so SQLite maintains only the indexes
/// that read them. A quarter of a `fifo` finish's time went to reading
/// the row and writing it whole (docs/performance.md). No `RETURNING`:
/// SQLite runs one as a trigger, which reads every column of the row.
const PROMOTE: &str = "UPDATE jadpo_deliveries SET state = 'due', due_at = max(due_at, ?3), updated_at = ?3 \
     WHERE id = (SELECT id FROM jadpo_deliveries WHERE state = 'queued' AND subscriber = ?1 \
         AND delivery_key = ?2 ORDER BY id LIMIT 1)";

/// A slot nobody waits for goes back to its key. A row left at zero stays
/// for the key's next delivery, rather than being deleted and written
/// again; retention deletes it (`forget`).
const GIVE_BACK: &str =
    "UPDATE jadpo_keys SET taken = taken - 1 WHERE subscriber = ?1 AND delivery_key = ?2 AND taken > 0";

/// The hand-on's two statements, prepared once for a claim or a finish
/// batch rather than taken from the connection's cache for every row
/// (hashing their text there was a sixth of a hand-on's time).
pub(crate) struct HandOn<'c> {
    c: &'c Connection,
    promote: Option<CachedStatement<'c>>,
    give_back: Option<CachedStatement<'c>>,
}

impl<'c> HandOn<'c> {
    pub(crate) fn new(c: &'c Connection) -> HandOn<'c> {
        HandOn {
            c,
            promote: None,
            give_back: None,
        }
    }

    /// `d` gave up its key's slot: the key's queued delivery with the
    /// lowest id (the earliest emitted) is promoted, due now, in its place;
    /// with none queued, the key has a slot more. Returns whether one was
    /// promoted.
    pub(crate) fn free(&mut self, d: &Delivery, now: Timestamp) -> Result<bool, Abort> {
        let Some(key) = &d.key else {
            return Ok(false);
        };
        let promote = super::writes::prepared(&mut self.promote, self.c, PROMOTE)?;
        if promote.execute(params![d.subscriber, key.as_str(), now.as_millis()])? == 1 {
            return Ok(true);
        }
        let give_back = super::writes::prepared(&mut self.give_back, self.c, GIVE_BACK)?;
        let freed = give_back.execute(params![d.subscriber, key.as_str()])?;
        assert_eq!(freed, 1, "a slot freed was taken");
        Ok(false)
    }

    /// Frees `after`'s slot when the change from `before` gave it up (an
    /// end under its rule, or an operator's skip).
    pub(crate) fn settle(&mut self, before: &Delivery, after: &Delivery) -> Result<(), Abort> {
        if after.gave_slot_up(before) {
            self.free(after, after.updated_at)?;
        }
        Ok(())
    }
}

/// [`HandOn::free`], for a single delivery.
pub(crate) fn free(c: &Connection, d: &Delivery, now: Timestamp) -> Result<bool, Abort> {
    HandOn::new(c).free(d, now)
}

/// [`HandOn::settle`], for a single delivery.
pub(crate) fn settle(c: &Connection, before: &Delivery, after: &Delivery) -> Result<(), Abort> {
    HandOn::new(c).settle(before, after)
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
