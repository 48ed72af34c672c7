//! The emit in a caller's `sqlx` SQLite transaction: the store's own emit,
//! run on the caller's connection.
//!
//! This is the one `unsafe` block of the workspace (ARCHITECTURE.md, "No
//! unsafe but one"). sqlx and rusqlite both wrap the same C library, linked
//! once through `libsqlite3-sys` (a second version would not link, and a
//! different `sqlite3` type would not compile), so the handle sqlx lends is
//! a connection rusqlite can run statements on for as long as the loan.
//! Writing the emit a second time over sqlx's async API instead would keep
//! two copies of every statement and every rule of the emit in step.

use crate::types::*;
use jadpo_core::Timestamp;
use sqlx::SqliteConnection;

/// Emits `events` inside a caller's `sqlx` transaction on a migrated file
/// (pass `&mut *tx`): they exist if and only if it commits, as with
/// [`emit_in`](super::emit_in).
///
/// # Panics
/// As [`emit_in`](super::emit_in): outside a transaction, or with more
/// than [`MAX_BATCH`](super::MAX_BATCH) events.
pub async fn emit_in_sqlx(
    conn: &mut SqliteConnection,
    events: &[NewEvent],
    now: Timestamp,
) -> Result<Vec<Emitted>, StoreError> {
    let mut handle = conn
        .lock_handle()
        .await
        .map_err(|e| StoreError::Unavailable(format!("SQLite: {e}")))?;
    let raw = handle.as_raw_handle();
    // SAFETY: `raw` is sqlx's open connection, and `handle` keeps sqlx's
    // worker off it until it drops, after `borrowed`. `from_handle` does
    // not own the handle: dropping `borrowed` finalizes only the statements
    // it prepared and leaves the connection open for sqlx.
    #[allow(unsafe_code)]
    let borrowed = unsafe { rusqlite::Connection::from_handle(raw.as_ptr()) }
        .map_err(|e| StoreError::Unavailable(format!("SQLite: {e}")))?;
    let emitted = super::emit_in(&borrowed, events, now);
    drop(borrowed);
    drop(handle);
    emitted
}
