//! Jadpo without workers (docs/embedded.md, "A client without workers"):
//! for a service that only emits, and for an operator's tools, which list,
//! retry and skip deliveries and read breakers. It never runs an action,
//! so it needs none of the app's environment variables, secrets or Rust
//! actions: the command line's operator commands are built on it.

use crate::{EmitError, EmitIn, EmitOptions, Event, Jadpo, SkipError, StartError};
use jadpo_core::{Delivery, DeliveryId, Failure, FailureKind};
use jadpo_lang::{ActionBody, App};
use jadpo_runtime::connection::Fake;
use jadpo_runtime::interpreter::RustAction;
use jadpo_runtime::SharedClock;
use jadpo_store::{BreakerView, DeliveryFilter, Emitted, NewEvent, ScheduleStore, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Emits, reads and operates on a store's deliveries, and starts no
/// workers: the calls of [`Jadpo`] that run nothing.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let app = jadpo::load_app("app.jadpo")?;
/// let store = jadpo::store::postgres::PgStore::open("postgres://localhost/app").await?;
/// let client = jadpo::Client::new(app, store).await?;
/// client.emit("PaymentReceived", &serde_json::json!({"payment_id": "p1", "amount_cents": 100})).await?;
/// # Ok(()) }
/// ```
pub struct Client<S: ScheduleStore> {
    /// A `Jadpo` whose connections are fakes and whose Rust actions are
    /// stubs: never started, so neither is ever called.
    jadpo: Jadpo<S>,
}

impl<S: ScheduleStore> Clone for Client<S> {
    fn clone(&self) -> Self {
        Client {
            jadpo: self.jadpo.clone(),
        }
    }
}

impl<S: ScheduleStore> Client<S> {
    /// A client of `store` for `app`: migrates the store, as
    /// [`crate::Builder::build`] does, and takes the store's clock. It
    /// reads no `env(...)` or `secret(...)` and needs no Rust action.
    pub async fn new(app: App, store: S) -> Result<Client<S>, StartError> {
        let mut builder = crate::Builder::default().env(|_| None);
        for name in app.connections.keys() {
            builder = builder.double(name, Fake::ok());
        }
        for (name, action) in &app.actions {
            if matches!(action.body, ActionBody::Uses(_)) {
                builder = builder.action(name, never_run());
            }
        }
        let jadpo = builder.app(app).ready()?.without_schedules().build(store).await?;
        Ok(Client { jadpo })
    }

    /// The app, as checked.
    pub fn app(&self) -> &App {
        self.jadpo.app()
    }

    /// The store, for reads of your own.
    pub fn store(&self) -> &Arc<S> {
        self.jadpo.store()
    }

    /// The store's clock of engine time.
    pub fn clock(&self) -> &SharedClock {
        self.jadpo.clock()
    }

    /// [`Jadpo::prepare`].
    pub fn prepare(
        &self,
        event: &str,
        payload: &serde_json::Value,
    ) -> Result<NewEvent, jadpo_runtime::emit::EventError> {
        self.jadpo.prepare(event, payload)
    }

    /// [`Jadpo::emit`]: workers of every process on PostgreSQL are woken
    /// by its commit; on SQLite the engine's poll finds it.
    pub async fn emit(&self, event: &str, payload: &serde_json::Value) -> Result<Emitted, EmitError> {
        self.jadpo.emit(event, payload).await
    }

    /// [`Jadpo::emit_with`].
    pub async fn emit_with(
        &self,
        event: &str,
        payload: &serde_json::Value,
        options: &EmitOptions,
    ) -> Result<Emitted, EmitError> {
        self.jadpo.emit_with(event, payload, options).await
    }

    /// [`Jadpo::emit_idempotent`].
    pub async fn emit_idempotent(
        &self,
        event: &str,
        payload: &serde_json::Value,
        idempotency_key: &str,
    ) -> Result<Emitted, EmitError> {
        self.jadpo.emit_idempotent(event, payload, idempotency_key).await
    }

    /// [`Jadpo::emit_many`].
    pub async fn emit_many(&self, events: &[(&str, serde_json::Value)]) -> Result<Vec<Emitted>, EmitError> {
        self.jadpo.emit_many(events).await
    }

    /// [`Jadpo::emit_event`].
    pub async fn emit_event<E: Event>(&self, event: &E) -> Result<Emitted, EmitError> {
        self.jadpo.emit_event(event).await
    }

    /// [`Jadpo::emit_in`].
    pub fn emit_in<'a, T: EmitIn>(&self, tx: &'a mut T, event: &str, payload: &serde_json::Value) -> T::Output<'a> {
        self.jadpo.emit_in(tx, event, payload)
    }

    /// [`Jadpo::emit_in_with`].
    pub fn emit_in_with<'a, T: EmitIn>(
        &self,
        tx: &'a mut T,
        event: &str,
        payload: &serde_json::Value,
        options: &EmitOptions,
    ) -> T::Output<'a> {
        self.jadpo.emit_in_with(tx, event, payload, options)
    }

    /// [`Jadpo::emit_event_in`].
    pub fn emit_event_in<'a, T: EmitIn, E: Event>(&self, tx: &'a mut T, event: &E) -> T::Output<'a> {
        self.jadpo.emit_event_in(tx, event)
    }

    /// Deliveries that match `filter`, newest first.
    pub async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        self.store().list(filter).await
    }

    /// One delivery; `None` when there is none (never made, or pruned).
    pub async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>, StoreError> {
        self.store().delivery(id).await
    }

    /// Every connection's breaker as the store keeps it.
    pub async fn breakers(&self) -> Result<Vec<BreakerView>, StoreError> {
        self.store().breakers().await
    }

    /// [`Jadpo::retry`].
    pub async fn retry(&self, ids: &[DeliveryId], spread: Duration) -> Result<Vec<DeliveryId>, StoreError> {
        self.jadpo.retry(ids, spread).await
    }

    /// [`Jadpo::skip`].
    pub async fn skip(&self, ids: &[DeliveryId], by: &str) -> Result<Vec<DeliveryId>, SkipError> {
        self.jadpo.skip(ids, by).await
    }
}

/// A Rust action a client is given so that its app builds: never called,
/// since a client starts no worker.
fn never_run() -> RustAction {
    Arc::new(|_, _| Box::pin(async { Err(Failure::new("client.action_not_supplied", FailureKind::InternalFault)) }))
}
