//! The stores a [`crate::Jadpo`] runs on, and what their reads return:
//! SQLite ([`sqlite`], one process) and PostgreSQL ([`postgres`], many
//! processes on many machines).
//!
//! ```no_run
//! # async fn example() -> Result<(), jadpo::store::StoreError> {
//! use jadpo::store::{DeliveryFilter, Store};
//! let store = jadpo::store::sqlite::SqliteStore::open("sqlite:.jadpo/jadpo.db").await?;
//! let deliveries = store.list(&DeliveryFilter::default()).await?;
//! # drop(deliveries); Ok(()) }
//! ```

pub use jadpo_store::upgrade::Standing;
pub use jadpo_store::{BreakerView, DeliveryFilter, Emitted, NewEvent, ScheduleStore, Store, StoreError, MAX_BATCH};

/// The SQLite store (`sqlite:PATH`): one file, one writing process.
#[cfg(feature = "sqlite")]
pub mod sqlite {
    use jadpo_core::Timestamp;
    pub use jadpo_store::sqlite::{SqliteOptions, SqliteStore};
    use jadpo_store::{Emitted, NewEvent, StoreError};

    /// Emits events prepared by [`crate::Jadpo::prepare`] at `now` in the
    /// caller's open transaction; wakes no worker ([`crate::Jadpo::wake`]).
    ///
    /// # Panics
    /// Outside a transaction, or with more than
    /// [`MAX_BATCH`](super::MAX_BATCH) events.
    #[cfg(feature = "rusqlite")]
    #[deprecated(note = "use `Jadpo::emit_in(&mut tx, ...)`: one call that checks, times and wakes")]
    pub fn emit_in(
        conn: &rusqlite::Connection,
        events: &[NewEvent],
        now: Timestamp,
    ) -> Result<Vec<Emitted>, StoreError> {
        jadpo_store::sqlite::emit_in(conn, events, now)
    }
}

/// The PostgreSQL store (`postgres://...`): many processes share its work.
#[cfg(feature = "postgres")]
pub mod postgres {
    use jadpo_core::Timestamp;
    pub use jadpo_store::postgres::{Options, PgStore};
    use jadpo_store::{Emitted, NewEvent, StoreError};

    /// Emits events prepared by [`crate::Jadpo::prepare`] at `now` in the
    /// caller's transaction; its commit wakes every engine.
    #[cfg(feature = "tokio-postgres")]
    #[deprecated(note = "use `Jadpo::emit_in(&mut tx, ...)`: one call that checks, times and wakes")]
    pub async fn emit_in(
        tx: &tokio_postgres::Transaction<'_>,
        events: &[NewEvent],
        now: Timestamp,
    ) -> Result<Vec<Emitted>, StoreError> {
        jadpo_store::postgres::emit_in(tx, events, now).await
    }
}
