//! Console sign-ins (`jadpo_console_sessions`), by the hash of each
//! session's secret.

use super::pool::Abort;
use jadpo_core::Timestamp;
use rusqlite::{params, Connection, OptionalExtension};

/// At most this many expired sign-ins are forgotten by one sign-in: a
/// sign-in's transaction stays small whatever piled up.
const FORGET: i64 = 1_000;

pub(crate) fn start(tx: &Connection, hash: &str, expires_at: Timestamp, now: Timestamp) -> Result<(), Abort> {
    tx.prepare_cached(
        "DELETE FROM jadpo_console_sessions WHERE hash IN \
         (SELECT hash FROM jadpo_console_sessions WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)",
    )?
    .execute(params![now.as_millis(), FORGET])?;
    tx.prepare_cached("INSERT INTO jadpo_console_sessions (hash, created_at, expires_at) VALUES (?1, ?2, ?3)")?
        .execute(params![hash, now.as_millis(), expires_at.as_millis()])?;
    Ok(())
}

pub(crate) fn alive(c: &Connection, hash: &str, now: Timestamp) -> Result<bool, Abort> {
    Ok(
        c.prepare_cached("SELECT 1 FROM jadpo_console_sessions WHERE hash = ?1 AND expires_at > ?2")?
            .query_row(params![hash, now.as_millis()], |_| Ok(()))
            .optional()?
            .is_some(),
    )
}

pub(crate) fn end(tx: &Connection, hash: &str) -> Result<(), Abort> {
    tx.prepare_cached("DELETE FROM jadpo_console_sessions WHERE hash = ?1")?
        .execute(params![hash])?;
    Ok(())
}
