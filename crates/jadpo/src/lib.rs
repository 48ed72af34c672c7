//! Jadpo embedded in a Rust program.
//!
//! Load an app file (or its text), open a store, supply the actions Rust
//! code provides, emit events, and run the workers and the tick in your own
//! tokio runtime:
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use jadpo::store::sqlite::SqliteStore;
//! let store = SqliteStore::open("sqlite:.jadpo/jadpo.db").await?;
//! let jadpo = jadpo::builder().app_file("app.jadpo")?.build(store).await?;
//! let running = jadpo.start();
//! jadpo.emit("PaymentReceived", &serde_json::json!({"payment_id": "p1", "amount_cents": 100})).await?;
//! running.stop().await;
//! # Ok(()) }
//! ```
//!
//! To emit inside your own transaction (the transactional outbox: the event
//! exists if and only if your transaction commits), pass it to
//! [`Jadpo::emit_in`]: a `rusqlite`, `tokio-postgres` or `sqlx` (PostgreSQL
//! or SQLite) transaction of your own connection or pool ([`EmitIn`]). A service that only emits, or an
//! operator's tool, uses a [`Client`], which starts no workers and needs
//! none of the app's secrets or Rust actions.
//!
//! Every error this crate returns ([`StartError`], [`EmitError`],
//! [`SkipError`], [`RouteError`]) has a `code()`, the same stable code the
//! command line and the HTTP API give (`event.invalid`,
//! `event.idempotency_conflict`, `store.unavailable`, ...), and the error it
//! wraps as its `source()`; their text says what happened and what to fix,
//! without the code (print `error[{code}]: {text}` to show both, as the
//! command line does). They are `#[non_exhaustive]`: match the variants you
//! handle and keep an arm for the rest.
//!
//! Events and Rust actions can be types of your own ([`Event`],
//! [`Jadpo::emit_event`], [`Builder::typed_action`]), checked against the
//! app file by `build()` (docs/embedded.md).
//!
//! The features `sqlite` and `postgres` (both on by default) choose which
//! stores, and which database drivers, are built: turn off the defaults
//! and keep the one you use to compile only its driver. `rusqlite` and
//! `tokio-postgres` (on by default too) give [`EmitIn`] to those drivers'
//! transactions; `sqlx-postgres` and `sqlx-sqlite` (off by default) to
//! sqlx 0.9's.

#![warn(missing_docs)]

pub mod core;
pub mod lang;
pub mod runtime;
pub mod store;

mod builder;
mod client;
mod emit_in;
mod errors;
mod health;
mod operator;
mod options;
mod route;
mod typed;
pub use builder::{builder, check_app, load_app, Builder, Ready};
pub use client::Client;
pub use emit_in::{EmitIn, OnCommit};
pub use errors::{EmitError, StartError};
pub use health::Unready;
pub use jadpo_runtime::connection::{Setting, StartupError};
/// ```
/// let builder = jadpo::builder().spans(jadpo::Spans::global());
/// # drop(builder);
/// ```
pub use jadpo_runtime::spans::Spans;
pub use operator::SkipError;
pub use options::EmitOptions;
pub use route::{RouteError, RouteOutcome};
pub use typed::{Event, TypeMismatch};

use jadpo_lang::App;
use jadpo_runtime::emit::{self, EventError};
use jadpo_runtime::interpreter::AppExecutor;
use jadpo_runtime::{Engine, Running, SharedClock};
use jadpo_store::{Emitted, NewEvent, ScheduleStore, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// A ready Jadpo: emit events, start workers, ask the store.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
/// use jadpo::EmitOptions;
/// use serde_json::json;
/// const APP: &str = r#"
/// event Ping { id: string }
/// action pong(id: string)
/// subscriber pinger { on: Ping  run: pong(event.id) }
/// "#;
/// #[derive(serde::Deserialize)]
/// struct Pong { id: String }
/// let store = jadpo::store::sqlite::SqliteStore::open(&url).await?;
/// let jadpo = jadpo::builder()
///     .app_source("app.jadpo", APP)?
///     .typed_action("pong", |_: Pong, _| async { Ok(()) })
///     .build(store)
///     .await?;
/// let once = EmitOptions::default().idempotency_key("ping-1");
/// let first = jadpo.emit_with("Ping", &json!({"id": "1"}), &once).await?;
/// let again = jadpo.emit_with("Ping", &json!({"id": "1"}), &once).await?;
/// assert!(again.duplicate && again.event_id == first.event_id);
/// assert_eq!(first.deliveries.len(), 1, "one per subscriber");
/// let many = jadpo.emit_many(&[("Ping", json!({"id": "2"})), ("Ping", json!({"id": "3"}))]).await?;
/// assert_eq!(many.len(), 2);
/// # Ok(()) }
/// ```
pub struct Jadpo<S: ScheduleStore> {
    app: Arc<App>,
    store: Arc<S>,
    engine: Engine<S, AppExecutor>,
    clock: SharedClock,
}

impl<S: ScheduleStore> Clone for Jadpo<S> {
    fn clone(&self) -> Self {
        Jadpo {
            app: self.app.clone(),
            store: self.store.clone(),
            engine: self.engine.clone(),
            clock: self.clock.clone(),
        }
    }
}

/// The window an operator's bulk retry is spread over, so retried
/// deliveries don't all reach the provider at once.
///
/// ```
/// # async fn retry_all(jadpo: &jadpo::Jadpo<jadpo::store::sqlite::SqliteStore>)
/// # -> Result<(), jadpo::store::StoreError> {
/// use jadpo::store::{DeliveryFilter, Store};
/// use jadpo::core::DeliveryState;
/// let failed: Vec<_> = jadpo.store().list(&DeliveryFilter::default()).await?
///     .into_iter()
///     .filter(|d| d.state == DeliveryState::Failed)
///     .map(|d| d.id)
///     .collect();
/// jadpo.retry(&failed, jadpo::RETRY_SPREAD).await?;
/// # Ok(()) }
/// ```
pub const RETRY_SPREAD: Duration = Duration::from_secs(30);

impl<S: ScheduleStore> Jadpo<S> {
    /// The app, as checked.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// The store it works: for reads of your own, and for emitting in your own
    /// transaction.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The clock of engine time every decision reads: the one given to
    /// [`Builder::clock`], or the store's.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Starts the workers and the tick on the current tokio runtime. They
    /// log inside the span current at the first start (emits too, once
    /// started): enter one naming the store to tell several engines'
    /// events apart.
    pub fn start(&self) -> Running {
        self.engine.start()
    }

    /// How long this engine's claims have taken so far (for `/metrics`).
    pub fn claims(&self) -> jadpo_runtime::metrics::Claims {
        self.engine.claims()
    }

    /// This engine's claims, attempts and first starts as histograms (for
    /// `/metrics`).
    pub fn timings(&self) -> jadpo_runtime::metrics::Timings {
        self.engine.timings()
    }

    /// Checks a payload against its event and returns what to write, for
    /// emitting inside your own transaction.
    ///
    /// The event joins the caller's trace: the current `tracing` span's
    /// OpenTelemetry context (where `tracing-opentelemetry`'s layer is
    /// installed), else OpenTelemetry's current context, else none
    /// (docs/observability.md). [`Jadpo::emit_with`] names another.
    pub fn prepare(&self, event: &str, payload: &serde_json::Value) -> Result<NewEvent, EventError> {
        let e = emit::prepare(&self.app, event, payload)?;
        Ok(NewEvent {
            trace: callers_trace(),
            ..e
        })
    }

    /// Emits one event of a Rust type now, in its own transaction: its
    /// JSON is checked as [`Jadpo::emit`] checks a payload.
    /// [`Builder::event`] checks the type against the app at `build()`.
    pub async fn emit_event<E: Event>(&self, event: &E) -> Result<Emitted, EmitError> {
        self.emit(E::NAME, &typed::to_payload(event)?).await
    }

    /// Checks and emits one event now, in its own transaction.
    pub async fn emit(&self, event: &str, payload: &serde_json::Value) -> Result<Emitted, EmitError> {
        let e = self.prepare(event, payload).map_err(EmitError::Event)?;
        let mut emitted = self.engine.emit_owned(vec![e]).await.map_err(EmitError::Store)?;
        Ok(emitted.remove(0))
    }

    /// Emits an event under an idempotency key (1 to 255 bytes of visible
    /// ASCII, `jadpo_runtime::emit::idempotency_key`; unique per event name
    /// while the event is kept): a second emit with the same
    /// key and payload returns the first event with `duplicate: true` and
    /// makes nothing; the same key with another payload is refused
    /// (`StoreError::IdempotencyConflict`, making nothing).
    pub async fn emit_idempotent(
        &self,
        event: &str,
        payload: &serde_json::Value,
        idempotency_key: &str,
    ) -> Result<Emitted, EmitError> {
        self.emit_with(event, payload, &EmitOptions::default().idempotency_key(idempotency_key))
            .await
    }

    /// Checks and emits one event now, in its own transaction, with
    /// [`EmitOptions`]: an idempotency key (as [`Jadpo::emit_idempotent`]),
    /// the trace it joins.
    pub async fn emit_with(
        &self,
        event: &str,
        payload: &serde_json::Value,
        options: &EmitOptions,
    ) -> Result<Emitted, EmitError> {
        let e = self.prepare_with(event, payload, options)?;
        let mut emitted = self.engine.emit_owned(vec![e]).await.map_err(EmitError::Store)?;
        Ok(emitted.remove(0))
    }

    /// [`Jadpo::prepare`] with [`EmitOptions`].
    pub(crate) fn prepare_with(
        &self,
        event: &str,
        payload: &serde_json::Value,
        options: &EmitOptions,
    ) -> Result<NewEvent, EmitError> {
        let mut e = self.prepare(event, payload).map_err(EmitError::Event)?;
        if let Some(key) = &options.idempotency_key {
            e.idempotency_key = Some(jadpo_runtime::emit::idempotency_key(key).map_err(EmitError::Event)?);
        }
        if let Some(trace) = &options.trace {
            e.trace = Some(trace.clone());
        }
        Ok(e)
    }

    /// Checks and emits many events in one transaction: all or none.
    pub async fn emit_many(&self, events: &[(&str, serde_json::Value)]) -> Result<Vec<Emitted>, EmitError> {
        // One caller, one trace: looked up once for all of them.
        let trace = callers_trace();
        let prepared = events
            .iter()
            .map(|(name, payload)| {
                emit::prepare(&self.app, name, payload).map(|e| NewEvent {
                    trace: trace.clone(),
                    ..e
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(EmitError::Event)?;
        self.engine.emit_owned(prepared).await.map_err(EmitError::Store)
    }

    /// Emits events already checked ([`Jadpo::prepare`]) in one
    /// transaction: all or none.
    pub async fn emit_prepared(&self, events: &[NewEvent]) -> Result<Vec<Emitted>, StoreError> {
        self.engine.emit(events).await
    }

    /// Wakes this process's workers, after emitting in your own transaction
    /// (on PostgreSQL its commit wakes every process's workers anyway).
    pub fn wake(&self) {
        self.engine.wake();
    }
}

/// The trace the code calling an emit is in, if any.
fn callers_trace() -> Option<jadpo_core::TraceContext> {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    jadpo_runtime::spans::trace_of(&tracing::Span::current().context())
        .or_else(|| jadpo_runtime::spans::trace_of(&opentelemetry::Context::current()))
}
