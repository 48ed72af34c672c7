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

pub use jadpo_core as core;
pub use jadpo_lang as lang;
pub use jadpo_runtime as runtime;
pub use jadpo_store as store;

mod client;
mod emit_in;
mod errors;
mod health;
mod operator;
mod options;
mod route;
mod typed;
pub use client::Client;
pub use emit_in::{EmitIn, OnCommit};
pub use errors::{EmitError, StartError};
pub use health::Unready;
pub use jadpo_runtime::connection::{Setting, StartupError};
pub use jadpo_runtime::spans::Spans;
pub use operator::SkipError;
pub use options::EmitOptions;
pub use route::{RouteError, RouteOutcome};
pub use typed::{Event, TypeMismatch};

use jadpo_core::clock::Wanted;
use jadpo_lang::App;
use jadpo_runtime::alerts::AlertRoute;
use jadpo_runtime::connection::{Connections, Double};
use jadpo_runtime::emit::{self, EventError};
use jadpo_runtime::interpreter::{AppExecutor, RustAction};
use jadpo_runtime::{Catalog, Engine, Running, SharedClock, TickConfig, WorkerConfig};
use jadpo_store::{Emitted, NewEvent, ScheduleStore, StoreError};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

type EnvFn = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where engine time comes from: a clock given, or the store's.
#[derive(Clone)]
enum Time {
    Given(SharedClock),
    Store(Wanted),
}

/// Sets Jadpo up; [`Builder::build`] checks everything before anything runs.
pub struct Builder {
    app: Option<App>,
    env: EnvFn,
    time: Time,
    worker: WorkerConfig,
    tick: TickConfig,
    doubles: Vec<(String, Double)>,
    actions: Vec<(String, RustAction)>,
    /// The typed events' and actions' checks against the app, run by
    /// [`Builder::ready`].
    checks: Vec<TypeCheck>,
    spans: Spans,
}

/// A Rust type's check against the app it is built with.
type TypeCheck = Box<dyn FnOnce(&App) -> Result<(), StartError> + Send>;

impl Default for Builder {
    fn default() -> Self {
        Builder {
            app: None,
            env: Box::new(|k| std::env::var(k).ok()),
            time: Time::Store(Wanted::Store),
            worker: WorkerConfig::default(),
            tick: TickConfig::default(),
            doubles: Vec::new(),
            actions: Vec::new(),
            checks: Vec::new(),
            spans: Spans::off(),
        }
    }
}

/// Starts setting Jadpo up.
pub fn builder() -> Builder {
    Builder::default()
}

/// Reads and checks an app file.
pub fn load_app(path: impl AsRef<Path>) -> Result<App, StartError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| StartError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    check_app(&path.display().to_string(), &text)
}

/// Checks an app's text.
pub fn check_app(name: &str, text: &str) -> Result<App, StartError> {
    let checked = jadpo_lang::check(name, text);
    let count = checked.diagnostics.len();
    let rendered = checked.render(text);
    checked.app.ok_or(StartError::Invalid { rendered, count })
}

impl Builder {
    /// The app to run, already checked ([`load_app`], [`check_app`]).
    pub fn app(mut self, app: App) -> Self {
        self.app = Some(app);
        self
    }

    /// Reads and checks the app file at `path` ([`load_app`]).
    pub fn app_file(self, path: impl AsRef<Path>) -> Result<Self, StartError> {
        Ok(self.app(load_app(path)?))
    }

    /// Checks the app's text ([`check_app`]); `name` is the file name its
    /// errors show.
    pub fn app_source(self, name: &str, text: &str) -> Result<Self, StartError> {
        Ok(self.app(check_app(name, text)?))
    }

    /// Where `env("X")` and `secret("X")` are read; the process environment
    /// by default.
    pub fn env(mut self, env: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        self.env = Box::new(env);
        self
    }

    /// Runs on this clock (a test's manual clock), whatever the store
    /// keeps. Without it, Jadpo runs on the store's clock: real time, or the
    /// scaled clock a process started with a time scale kept in the store,
    /// so every process and command on one store agrees on engine time.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.time = Time::Given(clock);
        self
    }

    /// Runs engine time (backoffs, pauses, budgets, schedules) `scale` times
    /// faster, as `jadpo dev --time-scale` does. The first scaled start on a
    /// store keeps the scale there, engine time starting at that real
    /// instant; later starts at the same scale follow it, and a start at
    /// another scale is refused (`clock.scale_mismatch`). A scale of 1 is
    /// real time.
    pub fn time_scale(mut self, scale: u32) -> Self {
        self.time = Time::Store(Wanted::Scale(scale));
        self
    }

    /// Runs on real time only: a store that keeps a scaled clock is refused
    /// (`clock.store_scaled`), as `jadpo serve` does.
    pub fn real_time(mut self) -> Self {
        self.time = Time::Store(Wanted::Real);
        self
    }

    /// How this process's workers claim and run: the name on their leases, how
    /// many deliveries run at once, how often an idle worker looks, and their
    /// batches (`WorkerConfig`'s defaults otherwise).
    pub fn worker(mut self, config: WorkerConfig) -> Self {
        self.worker = config;
        self
    }

    /// What the tick does beyond its sweep: how long finished deliveries
    /// are kept.
    pub fn tick(mut self, config: TickConfig) -> Self {
        self.tick = config;
        self
    }

    /// How long finished deliveries are kept before the tick prunes them,
    /// with their events and attempts (`None` keeps everything; seven days
    /// by default): the same as `tick(TickConfig { retention })`.
    pub fn retention(mut self, keep: Option<std::time::Duration>) -> Self {
        self.tick.retention = keep;
        self
    }

    /// Records OpenTelemetry spans of every emit, attempt, provider call,
    /// hold, schedule run and route request (docs/observability.md):
    /// `Spans::global()` for the tracer provider your program installed,
    /// `Spans::to(tracer)` for another. Off by default.
    pub fn spans(mut self, spans: Spans) -> Self {
        self.spans = spans;
        self
    }

    /// Replaces a connection with a fake or a recording (for your tests):
    /// its calls never reach a breaker.
    pub fn double(mut self, connection: &str, double: impl Into<Double>) -> Self {
        self.doubles.push((connection.to_owned(), double.into()));
        self
    }

    /// Supplies an action declared with `uses` in the app.
    pub fn action(mut self, name: &str, f: RustAction) -> Self {
        self.actions.push((name.to_owned(), f));
        self
    }

    /// Migrates the store and checks every setting. Nothing runs yet.
    pub async fn build<S: ScheduleStore>(self, store: S) -> Result<Jadpo<S>, StartError> {
        self.ready()?.build(store).await
    }

    /// Checks every setting (the app, its connections' settings and
    /// secrets, the Rust actions it needs), without a store: a start that
    /// fails here has opened, created and logged nothing.
    pub fn ready(self) -> Result<Ready, StartError> {
        let app = Arc::new(
            self.app
                .ok_or_else(|| StartError::Register("no app given: call `app_file` or `app_source`".into()))?,
        );
        let env = &self.env;
        let connections =
            Arc::new(Connections::resolve_with_doubles(&app, env, self.doubles).map_err(StartError::Startup)?);
        let alert_route = app.alerts.as_ref().map(|a| AlertRoute {
            connections: connections.clone(),
            connection: a.connection.clone(),
            path: a.path.clone(),
        });
        let mut executor = AppExecutor::new(app.clone(), connections, env).map_err(StartError::Startup)?;
        for (name, f) in self.actions {
            executor.register(&name, f).map_err(StartError::Register)?;
        }
        let missing = executor.unregistered();
        if !missing.is_empty() {
            return Err(StartError::Unregistered(missing));
        }
        for check in self.checks {
            check(&app)?;
        }
        Ok(Ready {
            app,
            executor,
            alert_route,
            time: self.time,
            worker: self.worker,
            tick: self.tick,
            spans: self.spans,
            schedules: true,
        })
    }
}

/// A set-up whose every setting checked: only the store is left
/// ([`Builder::ready`]).
pub struct Ready {
    app: Arc<App>,
    executor: AppExecutor,
    /// The app's `alerts` block, resolved.
    alert_route: Option<AlertRoute>,
    time: Time,
    worker: WorkerConfig,
    tick: TickConfig,
    spans: Spans,
    /// Whether this store's engine runs the app's schedules: one store of
    /// a process does, or each would run them once more.
    schedules: bool,
}

impl Ready {
    /// The app, as checked.
    pub fn app(&self) -> &App {
        &self.app
    }

    /// Leaves the app's schedules to another store's engine: a process
    /// working several stores runs them with its first store only.
    pub fn without_schedules(mut self) -> Self {
        self.schedules = false;
        self
    }

    /// Migrates the store. Nothing runs yet.
    pub async fn build<S: ScheduleStore>(self, store: S) -> Result<Jadpo<S>, StartError> {
        store.migrate().await.map_err(StartError::Store)?;
        let clock = match self.time {
            Time::Given(clock) => clock,
            Time::Store(wanted) => jadpo_runtime::clock::for_store(&store, wanted)
                .await
                .map_err(StartError::Clock)?,
        };
        let store = Arc::new(store);
        let mut catalog = Catalog::from_app(&self.app);
        if !self.schedules {
            catalog.schedules.clear();
        }
        let mut engine = Engine::new(
            store.clone(),
            Arc::new(self.executor),
            clock.clone(),
            catalog,
            self.worker,
        )
        .tick(self.tick)
        .spans(self.spans);
        if let Some(route) = self.alert_route {
            engine = engine.route_alerts(route);
        }
        Ok(Jadpo {
            app: self.app,
            store,
            engine,
            clock,
        })
    }
}

/// A ready Jadpo: emit events, start workers, ask the store.
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
