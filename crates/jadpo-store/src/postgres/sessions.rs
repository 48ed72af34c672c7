//! Console sign-ins (`jadpo_console_sessions`), by the hash of each
//! session's secret.

use super::Abort;
use deadpool_postgres::Transaction;
use jadpo_core::Timestamp;

/// At most this many expired sign-ins are forgotten by one sign-in: a
/// sign-in's transaction stays small whatever piled up.
const FORGET: i64 = 1_000;

pub(crate) async fn start(
    tx: &Transaction<'_>,
    hash: &str,
    expires_at: Timestamp,
    now: Timestamp,
) -> Result<(), Abort> {
    tx.execute(
        "DELETE FROM jadpo_console_sessions WHERE hash IN \
         (SELECT hash FROM jadpo_console_sessions WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)",
        &[&now.as_millis(), &FORGET],
    )
    .await?;
    tx.execute(
        "INSERT INTO jadpo_console_sessions (hash, created_at, expires_at) VALUES ($1, $2, $3)",
        &[&hash, &now.as_millis(), &expires_at.as_millis()],
    )
    .await?;
    Ok(())
}

pub(crate) async fn alive(tx: &Transaction<'_>, hash: &str, now: Timestamp) -> Result<bool, Abort> {
    let stmt = tx
        .prepare_cached("SELECT 1 FROM jadpo_console_sessions WHERE hash = $1 AND expires_at > $2")
        .await?;
    Ok(tx.query_opt(&stmt, &[&hash, &now.as_millis()]).await?.is_some())
}

pub(crate) async fn end(tx: &Transaction<'_>, hash: &str) -> Result<(), Abort> {
    tx.execute("DELETE FROM jadpo_console_sessions WHERE hash = $1", &[&hash])
        .await?;
    Ok(())
}
