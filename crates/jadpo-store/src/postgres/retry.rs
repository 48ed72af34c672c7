//! An operator's retry and skip of failed and parked deliveries.

use super::finish::lock;
use super::writes::DeliveryWrites;
use super::Abort;
use deadpool_postgres::Transaction;
use jadpo_core::{DeliveryId, Timestamp};

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
    let mut taking = Vec::new();
    let mut in_order = due.to_vec();
    in_order.sort_by_key(|(id, _)| *id);
    for (id, due_at) in in_order {
        if let Some((d, _)) = current.get_mut(&id).filter(|(d, _)| d.retryable_by_operator()) {
            let before = d.clone();
            d.operator_retry(due_at, now);
            retried.push(id);
            // Ended under `fifo` or a cap, or skipped, it gave its key's
            // slot up: it takes one again, or waits first in line for one.
            if d.takes_slot(&before) {
                taking.push(id);
            }
        }
    }
    if !taking.is_empty() {
        taking.sort_unstable();
        let keys: std::collections::BTreeSet<(&str, &str)> = taking
            .iter()
            .filter_map(|id| {
                let d = &current[id].0;
                Some((d.subscriber.as_str(), d.key.as_ref()?.as_str()))
            })
            .collect();
        let mut taken = super::keys::lock(tx, &keys).await?;
        for id in &taking {
            let d = &mut current.get_mut(id).expect("retried above").0;
            let (Some(rule), Some(key)) = (d.key_rule, &d.key) else {
                continue;
            };
            let slots = taken
                .get_mut(&(d.subscriber.clone(), key.as_str().to_owned()))
                .expect("every key was locked");
            if !slots.take(rule) {
                d.queue(now);
            }
        }
        super::keys::set_taken(tx, &taken).await?;
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

/// Failed and parked deliveries not skipped yet record who skipped them
/// and when; a `strict` key's slot one held is handed to the key's next
/// queued delivery, and idle workers are woken for it.
pub(crate) async fn skip(
    tx: &Transaction<'_>,
    ids: &[DeliveryId],
    by: &str,
    now: Timestamp,
) -> Result<Vec<DeliveryId>, Abort> {
    let mut sorted: Vec<i64> = ids.iter().map(|id| id.0).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut current = lock(tx, &sorted).await?;
    let mut skipped = Vec::new();
    let mut freed = Vec::new();
    for &id in ids {
        if let Some((d, _)) = current.get_mut(&id).filter(|(d, _)| d.skippable_by_operator()) {
            let before = d.clone();
            d.skip(by, now);
            if let Some(key) = d.key.as_ref().filter(|_| d.gave_slot_up(&before)) {
                freed.push((d.subscriber.clone(), key.as_str().to_owned()));
            }
            skipped.push(id);
        }
    }
    if skipped.is_empty() {
        return Ok(skipped);
    }
    let mut writes = DeliveryWrites::default();
    for id in &skipped {
        let (d, token) = &current[id];
        writes.push(d, *token);
    }
    writes.write(tx).await?;
    super::keys::free(tx, &freed, now).await?;
    Ok(skipped)
}
