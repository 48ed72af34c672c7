//! Emitting in a transaction of your own driver (docs/embedded.md, "Emit in
//! your own transaction"): one call, the payload checked against the app,
//! the time from the engine's clock, and the workers woken once the
//! transaction commits, with nothing more to call.

use crate::{typed, EmitError, EmitOptions, Event, Jadpo};
use jadpo_core::{DeliveryId, Timestamp};
use jadpo_store::{Emitted, NewEvent, ScheduleStore};
use std::time::Duration;

/// A transaction of a database driver that [`crate::Jadpo::emit_in`]
/// writes events in: the event exists if and only if the transaction
/// commits. Each driver's transaction type implements it behind a cargo
/// feature of this crate:
///
/// | feature | transaction | `emit_in` returns |
/// |---|---|---|
/// | `tokio-postgres` | `tokio_postgres::Transaction` (what `deadpool-postgres` hands out, through `&mut *tx`) | a future |
/// | `rusqlite` | `rusqlite::Transaction` | the result, at once |
/// | `sqlx-postgres` | `sqlx::Transaction<'_, sqlx::Postgres>` (sqlx 0.9) | a future |
/// | `sqlx-sqlite` | `sqlx::Transaction<'_, sqlx::Sqlite>` (sqlx 0.9) | a future |
///
/// The transaction must be on the store's database: the same SQLite file,
/// or the same PostgreSQL database with the store's schema on its
/// `search_path`.
///
/// ```no_run
/// # #[cfg(feature = "tokio-postgres")]
/// # async fn example(jadpo: &jadpo::Jadpo<jadpo::store::postgres::PgStore>, db: &mut tokio_postgres::Client)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = db.transaction().await?;
/// tx.execute("INSERT INTO orders (id, total_cents) VALUES ('o-1', 4200)", &[]).await?;
/// jadpo.emit_in(&mut tx, "OrderPlaced", &serde_json::json!({"order_id": "o-1", "total_cents": 4200})).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
pub trait EmitIn {
    /// What `emit_in` returns for this driver: the emitted event, or a
    /// future of it for an async driver.
    type Output<'a>
    where
        Self: 'a;

    /// Writes `event` at `now`, or returns why it was refused before
    /// anything was written. `committed` is called with the event's first
    /// delivery by drivers whose commit wakes no worker by itself.
    #[doc(hidden)]
    fn write_event<'a>(
        &'a mut self,
        event: Result<NewEvent, EmitError>,
        now: Timestamp,
        committed: OnCommit,
    ) -> Self::Output<'a>;
}

/// Wakes the engine's workers once a delivery written in the caller's
/// transaction is there to claim.
#[doc(hidden)]
pub struct OnCommit(pub(crate) Box<dyn FnOnce(DeliveryId) + Send>);

impl<S: ScheduleStore> Jadpo<S> {
    /// Emits one event in a transaction of your own: it exists if and only
    /// if that transaction commits (the transactional outbox). The payload
    /// is checked as [`Jadpo::emit`] checks it, the time is the engine's,
    /// and the workers are woken once it commits. `tx` is a transaction of a
    /// driver this crate was built for ([`EmitIn`]): with `rusqlite` the
    /// result comes at once, with `tokio-postgres` as a future.
    ///
    /// ```no_run
    /// # #[cfg(feature = "rusqlite")]
    /// # fn example(jadpo: &jadpo::Jadpo<jadpo::store::sqlite::SqliteStore>, db: &mut rusqlite::Connection)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = db.transaction()?;
    /// tx.execute("INSERT INTO orders (id, total_cents) VALUES ('o-1', 4200)", [])?;
    /// jadpo.emit_in(&mut tx, "OrderPlaced", &serde_json::json!({"order_id": "o-1", "total_cents": 4200}))?;
    /// tx.commit()?;
    /// # Ok(()) }
    /// ```
    pub fn emit_in<'a, T: EmitIn>(&self, tx: &'a mut T, event: &str, payload: &serde_json::Value) -> T::Output<'a> {
        self.emit_in_with(tx, event, payload, &EmitOptions::default())
    }

    /// [`Jadpo::emit_in`] with [`EmitOptions`]: under an idempotency key, a
    /// second emit with the same key and payload returns the first event,
    /// `duplicate: true`, whether the first is in this transaction or
    /// committed before it.
    pub fn emit_in_with<'a, T: EmitIn>(
        &self,
        tx: &'a mut T,
        event: &str,
        payload: &serde_json::Value,
        options: &EmitOptions,
    ) -> T::Output<'a> {
        let prepared = self.prepare_with(event, payload, options);
        tx.write_event(prepared, self.clock.now(), self.on_commit())
    }

    /// [`Jadpo::emit_in`] for an event of a Rust type ([`Event`]).
    pub fn emit_event_in<'a, T: EmitIn, E: Event>(&self, tx: &'a mut T, event: &E) -> T::Output<'a> {
        let prepared = typed::to_payload(event).and_then(|p| self.prepare_with(E::NAME, &p, &EmitOptions::default()));
        tx.write_event(prepared, self.clock.now(), self.on_commit())
    }

    /// Wakes this engine's workers once a delivery written in a caller's
    /// transaction can be read, looking for it from the current tokio
    /// runtime (none: the workers' poll finds it).
    fn on_commit(&self) -> OnCommit {
        let jadpo = self.clone();
        OnCommit(Box::new(move |id| {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            runtime.spawn(async move {
                let mut wait = Duration::from_millis(1);
                let until = tokio::time::Instant::now() + WATCH;
                while tokio::time::Instant::now() < until {
                    tokio::time::sleep(wait).await;
                    if let Ok(Some(_)) = jadpo.store.delivery(id).await {
                        jadpo.wake();
                        return;
                    }
                    wait = (wait * 2).min(WATCH_STEP);
                }
            });
        }))
    }
}

/// How long a SQLite emit's delivery is looked for after `emit_in`
/// returned: a transaction still open after this is woken for by the
/// workers' own poll instead. Rolled-back ones are looked for this long.
pub(crate) const WATCH: Duration = Duration::from_secs(30);

/// The longest wait between two looks.
pub(crate) const WATCH_STEP: Duration = Duration::from_millis(500);

/// What an async driver's `emit_in` returns.
pub(crate) type Pending<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Emitted, EmitError>> + Send + 'a>>;

/// The one event of a one-event emit, its store error as an emit's.
fn only(emitted: Result<Vec<Emitted>, jadpo_store::StoreError>) -> Result<Emitted, EmitError> {
    let mut emitted = emitted.map_err(EmitError::Store)?;
    Ok(emitted.remove(0))
}

/// For a driver whose commit wakes no worker: has `committed` look for a
/// new event's first delivery (a duplicate's is there already).
fn watched(emitted: Emitted, committed: OnCommit) -> Emitted {
    if let (Some(first), false) = (emitted.deliveries.first(), emitted.duplicate) {
        (committed.0)(*first);
    }
    emitted
}

/// PostgreSQL's commit sends the notification every engine listens to,
/// so `committed` is not needed.
#[cfg(feature = "tokio-postgres")]
impl EmitIn for tokio_postgres::Transaction<'_> {
    type Output<'a>
        = Pending<'a>
    where
        Self: 'a;

    fn write_event<'a>(&'a mut self, event: Result<NewEvent, EmitError>, now: Timestamp, _: OnCommit) -> Pending<'a> {
        Box::pin(async move {
            let event = event?;
            only(jadpo_store::postgres::emit_in(self, std::slice::from_ref(&event), now).await)
        })
    }
}

/// SQLite tells no other connection of a commit, and a commit hook needs
/// the connection itself (a transaction only lends it), so the engine looks
/// for the event's first delivery until it is there.
#[cfg(feature = "rusqlite")]
impl EmitIn for rusqlite::Transaction<'_> {
    type Output<'a>
        = Result<Emitted, EmitError>
    where
        Self: 'a;

    fn write_event<'a>(
        &'a mut self,
        event: Result<NewEvent, EmitError>,
        now: Timestamp,
        committed: OnCommit,
    ) -> Self::Output<'a> {
        let event = event?;
        only(jadpo_store::sqlite::emit_in(self, std::slice::from_ref(&event), now)).map(|e| watched(e, committed))
    }
}

/// As `tokio-postgres`: the commit notifies every engine.
#[cfg(feature = "sqlx-postgres")]
impl EmitIn for sqlx::Transaction<'_, sqlx::Postgres> {
    type Output<'a>
        = Pending<'a>
    where
        Self: 'a;

    fn write_event<'a>(&'a mut self, event: Result<NewEvent, EmitError>, now: Timestamp, _: OnCommit) -> Pending<'a> {
        Box::pin(async move {
            let event = event?;
            only(jadpo_store::postgres::emit_in_sqlx(self, std::slice::from_ref(&event), now).await)
        })
    }
}

/// As `rusqlite`: the engine looks for the event's first delivery until
/// the commit shows it.
#[cfg(feature = "sqlx-sqlite")]
impl EmitIn for sqlx::Transaction<'_, sqlx::Sqlite> {
    type Output<'a>
        = Pending<'a>
    where
        Self: 'a;

    fn write_event<'a>(
        &'a mut self,
        event: Result<NewEvent, EmitError>,
        now: Timestamp,
        committed: OnCommit,
    ) -> Pending<'a> {
        Box::pin(async move {
            let event = event?;
            only(jadpo_store::sqlite::emit_in_sqlx(self, std::slice::from_ref(&event), now).await)
                .map(|e| watched(e, committed))
        })
    }
}
