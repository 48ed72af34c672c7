//! Each ordered key's slots (docs/decisions.md, "Per-key order"): a
//! delivery about to be due takes one or waits queued; one that gives its
//! slot up hands it to the key's queued delivery with the lowest id.
//!
//! A key's row in `jadpo_keys` is what two processes take turns on: an
//! emit and an end lock it before they read who waits, so an end never
//! misses a delivery queued by an emit that committed before it, and two
//! emits never both take a key's last slot. Rows are locked in
//! (subscriber, key) order, so two transactions that lock several cannot
//! deadlock. No lock outlives the emit's or the finish's transaction.

use super::listen::wake_channel;
use deadpool_postgres::Transaction;
use jadpo_core::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// Locks each key's row, made with nothing taken if absent, and reads how
/// many of its slots are taken. `DO UPDATE` rather than `DO NOTHING`: the
/// row is locked and returned whether it was there or not.
pub(super) const LOCK: &str = "
INSERT INTO jadpo_keys AS k (subscriber, delivery_key, taken)
SELECT s, key, 0 FROM unnest($1::text[], $2::text[]) AS u(s, key) ORDER BY s, key
ON CONFLICT (subscriber, delivery_key) DO UPDATE SET taken = k.taken
RETURNING subscriber, delivery_key, taken";

/// Sets each key's slots taken.
const SET_TAKEN: &str = "
UPDATE jadpo_keys AS k SET taken = u.taken
FROM unnest($1::text[], $2::text[], $3::int[]) AS u(subscriber, delivery_key, taken)
WHERE k.subscriber = u.subscriber AND k.delivery_key = u.delivery_key";

/// The queued delivery `$1`'s subscriber and key, and its key's first
/// queued delivery (through `jadpo_deliveries_queued`).
const QUEUED_HEAD: &str = "
SELECT d.subscriber, d.delivery_key,
    (SELECT q.id FROM jadpo_deliveries AS q
     WHERE q.state = 'queued' AND q.subscriber = d.subscriber AND q.delivery_key = d.delivery_key
     ORDER BY q.id LIMIT 1)
FROM jadpo_deliveries AS d WHERE d.id = $1 AND d.state = 'queued'";

/// The most deliveries of one key a walk of [`WALK_DOWN`] steps past.
const MAX_WALK: i32 = 100_000;

/// Subscriber `$1`'s live delivery of key `$2` (one holding a slot: due,
/// running, held, or a `strict` one failed or parked and not skipped) with
/// the highest id below `$3`. The key's deliveries are walked down one at a
/// time through `jadpo_delivery_keys` (each step the index's next entry
/// below, a `max` the planner answers from the index alone, then the
/// delivery by its id), stopping at the first live one: whatever the
/// table's statistics, it never reads the key's whole history.
pub(super) const WALK_DOWN: &str = "
WITH RECURSIVE walk (id, live, steps) AS (
    SELECT $3::bigint, false, 0
    UNION ALL
    SELECT n.id,
        EXISTS (SELECT 1 FROM jadpo_deliveries AS d
                WHERE d.id = n.id AND d.subscriber = $1
                  AND (d.state IN ('due', 'running', 'held')
                       OR (d.state IN ('failed', 'parked') AND d.key_rule = 'strict' AND d.skipped_at IS NULL))),
        walk.steps + 1
    FROM walk, LATERAL (SELECT max(k.delivery_id) AS id FROM jadpo_delivery_keys AS k
                        WHERE k.delivery_key = $2 AND k.delivery_id < walk.id) AS n
    WHERE NOT walk.live AND n.id IS NOT NULL AND walk.steps < $4
)
SELECT id FROM walk WHERE live LIMIT 1";

/// Locks the rows of keys whose slots were freed, in order, before
/// `HAND_ON` reads who waits: its snapshot then sees every emit that
/// committed before the lock was granted.
const LOCK_FREED: &str = "
SELECT 1 FROM jadpo_keys
WHERE (subscriber, delivery_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY subscriber, delivery_key FOR UPDATE";

/// Each freed slot goes to its key's queued delivery with the lowest id
/// (`jadpo_deliveries_queued`), due now; a slot nobody waits for is given
/// back to the key, and a key with none taken loses its row (each row is
/// either updated or deleted: one statement cannot change a row twice).
/// What each key gives back is one aggregate over the slots freed and the
/// deliveries promoted, never a join of the two: the planner, expecting
/// ten rows from each array, joined them by nested loop, and at the
/// thousand keys of a full finish batch that comparison of every pair was
/// most of the statement (docs/performance.md). A
/// key whose slot is handed on keeps its row as it is: its count does not
/// change, and rewriting it would cost a quarter of the statement
/// (docs/performance.md). When any was promoted, idle workers everywhere
/// are woken from inside the statement, which saves the finish a round
/// trip. Returns how many were promoted.
pub(super) const HAND_ON: &str = concat!(
    "
WITH freed AS (
    SELECT s, key, count(*) AS n FROM unnest($1::text[], $2::text[]) AS u(s, key) GROUP BY s, key
), next AS (
    SELECT q.id FROM freed CROSS JOIN LATERAL (
        SELECT id FROM jadpo_deliveries
        WHERE state = 'queued' AND subscriber = freed.s AND delivery_key = freed.key
        ORDER BY id LIMIT freed.n
    ) AS q
), promoted AS (
    UPDATE jadpo_deliveries AS d SET state = 'due', due_at = greatest(d.due_at, $3), updated_at = $3
    FROM next WHERE d.id = next.id
    RETURNING d.subscriber, d.delivery_key
), back AS (
    SELECT s, key, sum(n)::bigint AS n FROM (
        SELECT s, key, n FROM freed
        UNION ALL
        SELECT subscriber, delivery_key, -1 FROM promoted
    ) AS u GROUP BY s, key
), given_back AS (
    UPDATE jadpo_keys AS k SET taken = k.taken - back.n FROM back
    WHERE k.subscriber = back.s AND k.delivery_key = back.key AND back.n > 0 AND k.taken > back.n
), emptied AS (
    DELETE FROM jadpo_keys AS k USING back
    WHERE k.subscriber = back.s AND k.delivery_key = back.key AND back.n > 0 AND k.taken = back.n
)
SELECT count(*), CASE WHEN count(*) > 0 THEN pg_notify(",
    wake_channel!(),
    ", '') END IS NULL FROM promoted"
);

/// A key's slots as an emit or a retry changes them: how many are taken.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slots {
    pub taken: i32,
}

impl Slots {
    /// A delivery under `rule` takes a slot if one is free: true, or false
    /// when it must wait queued.
    pub(super) fn take(&mut self, rule: jadpo_core::key_rule::KeyRule) -> bool {
        if rule.starts_due(u32::try_from(self.taken).unwrap_or(u32::MAX)) {
            self.taken += 1;
            true
        } else {
            false
        }
    }
}

/// The slots taken of each (subscriber, key), each row locked until the
/// transaction ends.
///
/// On the caller's own transaction too (`emit_in`), so not a cached
/// statement: only emits with ordered keys pay for preparing it.
pub(super) async fn lock(
    tx: &tokio_postgres::Transaction<'_>,
    keys: &BTreeSet<(&str, &str)>,
) -> Result<BTreeMap<(String, String), Slots>, tokio_postgres::Error> {
    let (subscribers, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
    let rows = tx.query(LOCK, &[&subscribers, &names]).await?;
    rows.iter()
        .map(|r| {
            let slots = Slots { taken: r.try_get(2)? };
            Ok(((r.try_get(0)?, r.try_get(1)?), slots))
        })
        .collect()
}

/// The arrays `slots`' writes take: subscribers, keys, taken.
pub(super) type SlotColumns<'a> = (Vec<&'a str>, Vec<&'a str>, Vec<i32>);

pub(super) fn columns(slots: &BTreeMap<(String, String), Slots>) -> SlotColumns<'_> {
    let mut out: SlotColumns<'_> = Default::default();
    for ((s, k), slot) in slots {
        out.0.push(s.as_str());
        out.1.push(k.as_str());
        out.2.push(slot.taken);
    }
    out
}

/// What the queued delivery `id` waits for.
pub(super) async fn waits_for(
    tx: &Transaction<'_>,
    id: jadpo_core::DeliveryId,
) -> Result<Option<jadpo_core::DeliveryId>, tokio_postgres::Error> {
    let head = tx.prepare_cached(QUEUED_HEAD).await?;
    let Some(row) = tx.query_opt(&head, &[&id.0]).await? else {
        return Ok(None);
    };
    let (subscriber, key, first): (String, String, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    let walk = tx.prepare_cached(WALK_DOWN).await?;
    // Slots are handed on in id order, so the key's holder is its live
    // delivery just before its first queued one; when none is before it
    // (an operator's retry put an old delivery first in line), the key's
    // latest live one.
    for below in [first, i64::MAX] {
        if let Some(r) = tx.query_opt(&walk, &[&subscriber, &key, &below, &MAX_WALK]).await? {
            return Ok(Some(jadpo_core::DeliveryId(r.try_get(0)?)));
        }
    }
    Ok(None)
}

/// Hands each freed slot on (one entry per slot freed, a key as often as
/// it freed one), waking idle workers everywhere when any queued delivery
/// became due. Returns how many did.
pub(super) async fn free(
    tx: &Transaction<'_>,
    freed: &[(String, String)],
    now: Timestamp,
) -> Result<i64, tokio_postgres::Error> {
    if freed.is_empty() {
        return Ok(0);
    }
    let (subscribers, names): (Vec<&str>, Vec<&str>) = freed.iter().map(|(s, k)| (s.as_str(), k.as_str())).unzip();
    let (lock, hand_on) = tokio::try_join!(tx.prepare_cached(LOCK_FREED), tx.prepare_cached(HAND_ON))?;
    // In one round trip: the server runs them in order, and the second
    // takes its snapshot once the first holds the locks.
    let now = crate::codec::at_ms(now);
    let lock_args: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&subscribers, &names];
    let hand_on_args: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&subscribers, &names, &now];
    let (_, promoted) = tokio::try_join!(tx.query(&lock, &lock_args), tx.query_one(&hand_on, &hand_on_args))?;
    promoted.try_get(0)
}

/// Writes each key's slots taken, its row locked by [`lock`].
pub(super) async fn set_taken(
    tx: &Transaction<'_>,
    slots: &BTreeMap<(String, String), Slots>,
) -> Result<(), tokio_postgres::Error> {
    let (subscribers, keys, taken) = columns(slots);
    let stmt = tx.prepare_cached(SET_TAKEN).await?;
    tx.execute(&stmt, &[&subscribers, &keys, &taken]).await?;
    Ok(())
}
