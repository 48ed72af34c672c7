//! An operator's retry and skip of failed and parked deliveries.

use super::pool::Abort;
use super::rows::{self, Stored};
use jadpo_core::{DeliveryId, Timestamp};
use rusqlite::Connection;

/// An operator's retry: failed and parked rows only. The row keeps its
/// lease token, so the next claim's token is still new for it.
pub(crate) fn retry(c: &Connection, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, Abort> {
    let mut retried = Vec::new();
    // In id order, so that the earliest of a key takes its slot and the
    // rest queue behind it in emit order, however they were named.
    let mut in_order = due.to_vec();
    in_order.sort_by_key(|(id, _)| *id);
    for (id, due_at) in in_order {
        let Some(Stored { mut delivery, .. }) = rows::get(c, id)? else {
            continue;
        };
        if delivery.retryable_by_operator() {
            let before = delivery.clone();
            delivery.operator_retry(due_at, now);
            // Ended under `fifo` or a cap, or skipped, it gave its key's
            // slot up: it takes one again, or waits first in line for one.
            super::writes::update(c, &delivery, None, None, None)?;
            if delivery.takes_slot(&before) {
                super::keys::take(c, &mut delivery, now)?;
            }
            retried.push(id);
        }
    }
    Ok(retried)
}

/// An operator's skip: failed and parked rows not skipped yet record who
/// and when, and a `strict` key's slot one held goes to the key's next.
pub(crate) fn skip(c: &Connection, ids: &[DeliveryId], by: &str, now: Timestamp) -> Result<Vec<DeliveryId>, Abort> {
    let mut skipped = Vec::new();
    for &id in ids {
        let Some(Stored { mut delivery, .. }) = rows::get(c, id)? else {
            continue;
        };
        if delivery.skippable_by_operator() {
            let before = delivery.clone();
            delivery.skip(by, now);
            super::writes::update(c, &delivery, None, None, None)?;
            super::keys::settle(c, &before, &delivery)?;
            skipped.push(id);
        }
    }
    Ok(skipped)
}
