//! An operator's retry of failed and parked deliveries.

use super::pool::Abort;
use super::rows::{self, Stored};
use jadpo_core::{DeliveryId, Timestamp};
use rusqlite::Connection;

/// An operator's retry: failed and parked rows only. The row keeps its
/// lease token, so the next claim's token is still new for it.
pub(crate) fn retry(c: &Connection, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, Abort> {
    let mut retried = Vec::new();
    for &(id, due_at) in due {
        let Some(Stored { mut delivery, .. }) = rows::get(c, id)? else {
            continue;
        };
        if delivery.retryable_by_operator() {
            let from = delivery.state;
            delivery.operator_retry(due_at, now);
            // Ended under `fifo` or a cap, it gave its key's slot up: it
            // takes one again, or waits first in line for one.
            super::writes::update(c, &delivery, None, None, None)?;
            if delivery.key_rule.is_some_and(|r| r.takes_slot(from, delivery.state)) {
                super::keys::take(c, &mut delivery, now)?;
            }
            retried.push(id);
        }
    }
    Ok(retried)
}
