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
    #[cfg(feature = "sqlx-sqlite")]
    pub use jadpo_store::sqlite::emit_in_sqlx;
    pub use jadpo_store::sqlite::{emit_in, SqliteOptions, SqliteStore};
}

/// The PostgreSQL store (`postgres://...`): many processes share its work.
#[cfg(feature = "postgres")]
pub mod postgres {
    #[cfg(feature = "sqlx-postgres")]
    pub use jadpo_store::postgres::emit_in_sqlx;
    pub use jadpo_store::postgres::{emit_in, Options, PgStore};
}
