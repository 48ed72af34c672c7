//! Setting Jadpo up: the app, its environment, the clock, the workers'
//! settings, doubles and Rust actions, each checked before a store is
//! opened ([`Builder::ready`]), then the store migrated
//! ([`Ready::build`]).

use crate::{Jadpo, Spans, StartError};
use jadpo_core::clock::Wanted;
use jadpo_lang::App;
use jadpo_runtime::alerts::AlertRoute;
use jadpo_runtime::connection::{Connections, Double};
use jadpo_runtime::interpreter::{AppExecutor, RustAction};
use jadpo_runtime::{Catalog, Engine, SharedClock, TickConfig, WorkerConfig};
use jadpo_store::ScheduleStore;
use std::path::Path;
use std::sync::Arc;
type EnvFn = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where engine time comes from: a clock given, or the store's.
#[derive(Clone)]
enum Time {
    Given(SharedClock),
    Store(Wanted),
}

/// Sets Jadpo up; [`Builder::build`] checks everything before anything runs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
/// const APP: &str = r#"
/// event Ping { id: string }
/// action pong(id: string)           // no body: Rust code supplies it
/// subscriber pinger { on: Ping  run: pong(event.id) }
/// "#;
/// #[derive(serde::Deserialize)]
/// struct Pong { id: String }
///
/// let store = jadpo::store::sqlite::SqliteStore::open(&url).await?;
/// let jadpo = jadpo::builder()
///     .app_source("app.jadpo", APP)?
///     .typed_action("pong", |args: Pong, _connections| async move {
///         println!("pong {}", args.id);
///         Ok(())
///     })
///     .build(store)
///     .await?;
/// let running = jadpo.start();
/// jadpo.emit("Ping", &serde_json::json!({"id": "p-1"})).await?;
/// running.stop().await;
/// # Ok(()) }
/// ```
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
    pub(crate) checks: Vec<TypeCheck>,
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

/// Starts setting Jadpo up ([`Builder`]).
///
/// ```
/// let ready = jadpo::builder()
///     .app_source("app.jadpo", "event Ping { id: string }")?
///     .ready()?;
/// assert!(ready.app().events.contains_key("Ping"));
/// # Ok::<(), jadpo::StartError>(())
/// ```
pub fn builder() -> Builder {
    Builder::default()
}

/// Reads and checks an app file.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("app.jadpo");
/// std::fs::write(&path, "event Ping { id: string }").unwrap();
/// let app = jadpo::load_app(&path)?;
/// assert!(app.events.contains_key("Ping"));
/// let missing = jadpo::load_app(dir.path().join("nope.jadpo")).unwrap_err();
/// assert_eq!(missing.code(), "app.unreadable");
/// # Ok::<(), jadpo::StartError>(())
/// ```
pub fn load_app(path: impl AsRef<Path>) -> Result<App, StartError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| StartError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    check_app(&path.display().to_string(), &text)
}

/// Checks an app's text: the app, or every error, each shown with its
/// source line.
///
/// ```
/// let err = jadpo::check_app("app.jadpo", "subscriber s { on: Nope  run: x() }").unwrap_err();
/// assert_eq!(err.code(), "app.invalid");
/// assert!(err.to_string().contains("app.jadpo"), "{err}");
/// ```
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
/// ([`Builder::ready`]). A program that checks before it opens a store (or
/// logs a start) builds in two steps:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
/// let ready = jadpo::builder().app_source("app.jadpo", "event Ping { id: string }")?.ready()?;
/// let store = jadpo::store::sqlite::SqliteStore::open(&url).await?;
/// let jadpo = ready.without_schedules().build(store).await?;
/// # drop(jadpo); Ok(()) }
/// ```
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
