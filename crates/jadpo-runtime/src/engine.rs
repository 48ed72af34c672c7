//! The engine: built from its settings (`config.rs`) into its state
//! (`state.rs`), it starts the workers, the tick, the listener and the
//! alert sender, each a loop of its own over that state.

use crate::alerts::{self, AlertRoute};
use crate::clock::SharedClock;
use crate::config::{TickConfig, WorkerConfig};
use crate::run::{Catalog, Executor, RunContext};
use crate::state::EngineState;
use crate::tick;
use crate::wake;
use crate::worker;
use jadpo_core::{AttemptEnd, Failure};
use jadpo_store::{Emitted, NewEvent, ScheduleStore, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::Instrument;

pub struct Engine<S: ScheduleStore, E: Executor> {
    state: Arc<EngineState<S, E>>,
}

impl<S: ScheduleStore, E: Executor> Clone for Engine<S, E> {
    fn clone(&self) -> Self {
        Engine {
            state: self.state.clone(),
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
    /// For tests of what a crash leaves behind (`testing` feature only).
    #[cfg(feature = "testing")]
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
        let timings = crate::metrics::TimingCells::new(catalog.connections());
        Engine {
            state: Arc::new(EngineState {
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
                claims: Default::default(),
                timings,
                span: Default::default(),
                liveness: Default::default(),
                refusals: Default::default(),
                spans: Default::default(),
            }),
        }
    }

    /// Sends alert messages to `route` once started (see `alerts.rs`).
    /// Only before the engine is cloned or started.
    pub fn route_alerts(mut self, route: AlertRoute) -> Self {
        Arc::get_mut(&mut self.state)
            .expect("alerts are routed before the engine is shared")
            .alert_route = Some(route);
        self
    }

    /// Sets what the tick does beyond its sweep (retention). Only before
    /// the engine is cloned or started.
    pub fn tick(mut self, config: TickConfig) -> Self {
        Arc::get_mut(&mut self.state)
            .expect("the tick is set before the engine is shared")
            .tick = config;
        self
    }

    /// Records spans of emits, attempts, calls, holds and schedule runs
    /// (docs/observability.md). Off unless set. Only before the engine is
    /// cloned or started.
    pub fn spans(mut self, spans: crate::spans::Spans) -> Self {
        Arc::get_mut(&mut self.state)
            .expect("spans are set before the engine is shared")
            .spans = spans;
        self
    }

    /// Where this engine's spans go.
    pub fn span_recorder(&self) -> &crate::spans::Spans {
        &self.state.spans
    }

    pub fn store(&self) -> &Arc<S> {
        &self.state.store
    }

    pub fn clock(&self) -> &SharedClock {
        &self.state.clock
    }

    pub fn catalog(&self) -> &Catalog {
        &self.state.catalog
    }

    /// Runs one action now, outside the workers, as a worker would: under
    /// `limit` (`deadline_exceeded` past it) with a panic caught as a
    /// defect. For a route's request, whose caller waits for the answer:
    /// nothing is claimed or recorded here, and what `ctx.calls` and
    /// `ctx.emits` gather is the caller's to use or drop.
    pub async fn execute(&self, ctx: RunContext, limit: Duration) -> Result<(), Failure> {
        match crate::run::execute(&*self.state.executor, ctx, limit).await.0 {
            AttemptEnd::Succeeded => Ok(()),
            AttemptEnd::Failed(f) => Err(f),
        }
    }

    /// Starts the claim loop, the tick and the store's listener on the
    /// current tokio runtime, each inside the span current at the first
    /// start (see [`Engine::span`]).
    pub fn start(&self) -> Running {
        let (shutdown, rx) = watch::channel(false);
        let s = &self.state;
        let span = s.span.get_or_init(tracing::Span::current).clone();
        let mut tasks = vec![
            tokio::spawn(worker::run(s.clone(), rx.clone()).instrument(span.clone())),
            tokio::spawn(tick::run(s.clone(), rx.clone()).instrument(span.clone())),
            tokio::spawn(wake::listen(s.store.clone(), s.wake.clone(), rx.clone()).instrument(span.clone())),
        ];
        if let Some(route) = &s.alert_route {
            tasks.push(tokio::spawn(
                alerts::run(
                    s.store.clone(),
                    s.clock.clone(),
                    route.clone(),
                    s.alert_wake.clone(),
                    rx,
                )
                .instrument(span),
            ));
        }
        Running { shutdown, tasks }
    }

    /// The span this engine logs in: the one current at its first start,
    /// none before.
    pub fn span(&self) -> tracing::Span {
        self.state.span.get().cloned().unwrap_or_else(tracing::Span::none)
    }

    /// Whether this engine's loops still turn (see `liveness.rs`).
    pub fn liveness(&self) -> &Arc<crate::liveness::Liveness> {
        &self.state.liveness
    }

    /// How long this engine's claims have taken so far.
    pub fn claims(&self) -> crate::metrics::Claims {
        self.state.claims.read()
    }

    /// This engine's claims, attempts and first starts as histograms.
    pub fn timings(&self) -> crate::metrics::Timings {
        self.state.timings.read()
    }

    /// Wakes this process's worker: something may be due. A worker busy
    /// right now looks again as soon as it is idle: wake-ups are never lost,
    /// and many of them in a row make one.
    pub fn wake(&self) {
        self.state.wake.notify_one();
    }

    /// Emits events now, and wakes this process's worker. A store fault is
    /// logged here with the store's reason, rate-limited: the caller only
    /// answers `store.unavailable`, and an operator must learn why.
    pub async fn emit(&self, events: &[NewEvent]) -> Result<Vec<Emitted>, StoreError> {
        if self.state.spans.is_on() {
            // Each event keeps its emit span's context: a copy to change.
            return self.emit_owned(events.to_vec()).await;
        }
        self.emit_under(events, Vec::new()).await
    }

    /// [`Engine::emit`], for events the caller has no more use for: each
    /// keeps its emit span's context without a copy.
    pub async fn emit_owned(&self, mut events: Vec<NewEvent>) -> Result<Vec<Emitted>, StoreError> {
        let mut emits = Vec::new();
        if self.state.spans.is_on() {
            emits.reserve(events.len());
            for e in &mut events {
                let (span, kept) = self.state.spans.emit(&e.name, e.trace.as_ref());
                e.trace = kept;
                emits.push(span);
            }
        }
        self.emit_under(&events, emits).await
    }

    async fn emit_under(
        &self,
        events: &[NewEvent],
        mut emits: Vec<crate::spans::Recording>,
    ) -> Result<Vec<Emitted>, StoreError> {
        let emitted = match self.state.store.emit(events, self.state.clock.now()).await {
            Ok(emitted) => emitted,
            Err(e) => {
                for span in &mut emits {
                    span.failed(e.code());
                }
                self.state.in_span(|| self.state.refusals.refused("emit", &e));
                return Err(e);
            }
        };
        for (span, e) in emits.iter_mut().zip(&emitted) {
            span.set("messaging.message.id", e.public_id.clone());
        }
        drop(emits);
        self.state.in_span(|| {
            for e in &emitted {
                tracing::info!(
                    event_id = e.event_id.0,
                    deliveries = e.deliveries.len(),
                    "event.emitted"
                );
            }
        });
        self.state.wake.notify_one();
        Ok(emitted)
    }
}
