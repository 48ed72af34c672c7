//! Limited connections' tokens and slots (`jadpo_connection_limits`): one
//! row per connection holding its `LimitState` as JSON, written only at the
//! version read (see [`crate::limits`]). Read without a lock: a write that
//! finds the version moved aborts and the method is redone, as breakers are.

use super::Abort;
use crate::limits::{Answer, LimitWrite, Release};
use crate::StoreError;
use deadpool_postgres::Transaction;
use jadpo_core::limit::LimitState;

pub(crate) const ALL: &str = "SELECT state FROM jadpo_connection_limits ORDER BY connection";

const INSERT: &str = "
INSERT INTO jadpo_connection_limits (connection, state, version) VALUES ($1, $2, $3)
ON CONFLICT (connection) DO NOTHING";

const UPDATE: &str = "
UPDATE jadpo_connection_limits SET state = $2, version = $3 WHERE connection = $1 AND version = $4";

pub(crate) fn states(rows: &[tokio_postgres::Row]) -> Result<Vec<LimitState>, Abort> {
    rows.iter()
        .map(|r| {
            let json: &str = r.try_get(0)?;
            serde_json::from_str(json).map_err(|e| {
                Abort::Store(StoreError::Unavailable(format!(
                    "unreadable row of jadpo_connection_limits: {e}"
                )))
            })
        })
        .collect()
}

pub(crate) async fn all(tx: &Transaction<'_>) -> Result<Vec<LimitState>, Abort> {
    let stmt = tx.prepare_cached(ALL).await?;
    states(&tx.query(&stmt, &[]).await?)
}

/// How many due deliveries wait on each connection, through the index of
/// waiting deliveries.
pub(crate) async fn waiting_counts(tx: &Transaction<'_>) -> Result<std::collections::BTreeMap<String, u64>, Abort> {
    let stmt = tx
        .prepare_cached(
            "SELECT waiting_on, count(*) FROM jadpo_deliveries \
             WHERE waiting_on IS NOT NULL AND state = 'due' GROUP BY waiting_on",
        )
        .await?;
    let mut counts = std::collections::BTreeMap::new();
    for row in tx.query(&stmt, &[]).await? {
        let n: i64 = row.try_get(1)?;
        counts.insert(row.try_get(0)?, n.max(0) as u64);
    }
    Ok(counts)
}

/// Writes each state only if its row is still at the version read (or still
/// absent). The writes come sorted by connection, so two transactions lock
/// the rows in the same order.
pub(crate) async fn write(tx: &Transaction<'_>, writes: &[LimitWrite]) -> Result<(), Abort> {
    for w in writes {
        let json = serde_json::to_string(&w.state).expect("a limit state is plain data");
        let n = if w.read_version == 0 {
            let stmt = tx.prepare_cached(INSERT).await?;
            tx.execute(&stmt, &[&w.state.connection, &json, &w.state.version])
                .await?
        } else {
            let stmt = tx.prepare_cached(UPDATE).await?;
            tx.execute(&stmt, &[&w.state.connection, &json, &w.state.version, &w.read_version])
                .await?
        };
        if n != 1 {
            return Err(Abort::Conflict);
        }
    }
    Ok(())
}

/// Gives slots back and writes 429s (see [`crate::limits::settle`]): one
/// read of the rows, only when there is something to settle.
pub(crate) async fn settle(tx: &Transaction<'_>, releases: &[Release<'_>], answers: &[Answer]) -> Result<(), Abort> {
    if releases.is_empty() && answers.is_empty() {
        return Ok(());
    }
    let rows = all(tx).await?;
    write(tx, &crate::limits::settle(rows, releases, answers)).await
}
