//! The engine: its shared state (a store, an executor, a clock, the app's
//! catalog, what this process has seen of the breakers) and its settings
//! (`WorkerConfig`, `TickConfig`), running workers and the tick.

use crate::alerts::{self, AlertRoute};
use crate::clock::SharedClock;
use crate::completer::{BreakerCache, PendingVerdicts};
use crate::run::{Catalog, Executor, RunContext};
use crate::tick::{self, TickConfig};
use crate::wake;
use crate::worker;
use jadpo_core::{AttemptEnd, Failure};
use jadpo_store::{Emitted, NewEvent, ScheduleStore, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Names this process's leases.
    pub name: String,
    /// Deliveries run at once.
    pub concurrency: usize,
    /// How long an idle worker waits before looking again, in engine time.
    pub poll: Duration,
    /// Added to the longest run's limit to make a lease, in real time: the
    /// time to write the outcome.
    pub lease_margin: Duration,
    /// The most finishes written in one transaction.
    pub finish_batch: usize,
    /// The most claimed deliveries held waiting for a slot, ahead of the
    /// free ones. The worker holds fewer when runs are slow, so that each
    /// starts well inside its lease (see `local_queue.rs`); 0 claims only
    /// what the free slots can start. The default, 2,000, lets each of the
    /// two claims in flight take a whole store batch (1,000) when runs are
    /// short.
    pub local_queue: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: format!("jadpo-{}", std::process::id()),
            concurrency: 16,
            poll: Duration::from_secs(1),
            lease_margin: Duration::from_secs(30),
            finish_batch: 1_000,
            local_queue: 2_000,
        }
    }
}

/// Shared between the claim loop and the run tasks.
pub(crate) struct Shared<S, E> {
    pub store: Arc<S>,
    pub executor: Arc<E>,
    pub clock: SharedClock,
    pub catalog: Arc<Catalog>,
    pub config: WorkerConfig,
    pub tick: crate::tick::TickConfig,
    /// Breakers as this process last saw them, for the check just before
    /// each run.
    pub breakers: Arc<BreakerCache>,
    /// Unavailable verdicts on their way to the store.
    pub pending: Arc<PendingVerdicts>,
    /// Woken when something may have become due (see `wake.rs`).
    pub wake: Arc<Notify>,
    /// Where alert messages are sent, if the app routes them.
    pub alert_route: Option<crate::alerts::AlertRoute>,
    /// Woken when an alert message may be due for a send.
    pub alert_wake: Arc<Notify>,
    /// This process's counts for the per-minute summary (`minutes.rs`).
    pub minutes: Arc<crate::minutes::Minutes>,
    /// Closed while the store's schema is newer than this build runs on.
    pub schema: crate::schema_gate::SchemaGate,
}

pub struct Engine<S: ScheduleStore, E: Executor> {
    shared: Arc<Shared<S, E>>,
}

impl<S: ScheduleStore, E: Executor> Clone for Engine<S, E> {
    fn clone(&self) -> Self {
        Engine {
            shared: self.shared.clone(),
        }
    }
}

/// A started engine. [`Running::stop`] stops claiming, waits for running
/// deliveries (each within its time limit) and returns.
pub struct Running {
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops at once, as a killed process would: runs under way are dropped
    /// unfinished and their deliveries stay claimed until their leases end.
    /// For tests of what a crash leaves behind.
    pub fn abort(self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

impl<S: ScheduleStore, E: Executor> Engine<S, E> {
    pub fn new(store: Arc<S>, executor: Arc<E>, clock: SharedClock, catalog: Catalog, config: WorkerConfig) -> Self {
        Engine {
            shared: Arc::new(Shared {
                store,
                executor,
                clock,
                catalog: Arc::new(catalog),
                config,
                tick: Default::default(),
                breakers: Default::default(),
                pending: Default::default(),
                wake: Arc::new(Notify::new()),
                alert_route: None,
                alert_wake: Arc::new(Notify::new()),
                minutes: Default::default(),
                schema: Default::default(),
            }),
        }
    }

    /// Sends alert messages to `route` once started (see `alerts.rs`).
    /// Only before the engine is cloned or started.
    pub fn route_alerts(mut self, route: AlertRoute) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("alerts are routed before the engine is shared")
            .alert_route = Some(route);
        self
    }

    /// Sets what the tick does beyond its sweep (retention). Only before
    /// the engine is cloned or started.
    pub fn tick(mut self, config: TickConfig) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("the tick is set before the engine is shared")
            .tick = config;
        self
    }

    pub fn store(&self) -> &Arc<S> {
        &self.shared.store
    }

    pub fn clock(&self) -> &SharedClock {
        &self.shared.clock
    }

    pub fn catalog(&self) -> &Catalog {
        &self.shared.catalog
    }

    /// Runs one action now, outside the workers, as a worker would: under
    /// `limit` (`deadline_exceeded` past it) with a panic caught as a
    /// defect. For a route's request, whose caller waits for the answer:
    /// nothing is claimed or recorded here, and what `ctx.calls` and
    /// `ctx.emits` gather is the caller's to use or drop.
    pub async fn execute(&self, ctx: RunContext, limit: Duration) -> Result<(), Failure> {
        match crate::run::execute(&*self.shared.executor, ctx, limit).await.0 {
            AttemptEnd::Succeeded => Ok(()),
            AttemptEnd::Failed(f) => Err(f),
        }
    }

    /// Starts the claim loop, the tick and the store's listener on the
    /// current tokio runtime.
    pub fn start(&self) -> Running {
        let (shutdown, rx) = watch::channel(false);
        let s = &self.shared;
        let mut tasks = vec![
            tokio::spawn(worker::run(s.clone(), rx.clone())),
            tokio::spawn(tick::run(s.clone(), rx.clone())),
            tokio::spawn(wake::listen(s.clone(), rx.clone())),
        ];
        if let Some(route) = &s.alert_route {
            tasks.push(tokio::spawn(alerts::run(
                s.store.clone(),
                s.clock.clone(),
                route.clone(),
                s.alert_wake.clone(),
                rx,
            )));
        }
        Running { shutdown, tasks }
    }

    /// Wakes this process's worker: something may be due. A worker busy
    /// right now looks again as soon as it is idle: wake-ups are never lost,
    /// and many of them in a row make one.
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Emits events now, and wakes this process's worker.
    pub async fn emit(&self, events: &[NewEvent]) -> Result<Vec<Emitted>, StoreError> {
        let emitted = self.shared.store.emit(events, self.shared.clock.now()).await?;
        for e in &emitted {
            tracing::info!(
                event_id = e.event_id.0,
                deliveries = e.deliveries.len(),
                "event.emitted"
            );
        }
        self.shared.wake.notify_one();
        Ok(emitted)
    }
}
