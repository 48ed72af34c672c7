//! An operator's retry of failed and parked deliveries.

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
