//! The state every loop of one engine shares: its store, executor, clock
//! and catalog, its settings, what this process has seen of the breakers,
//! its wake-ups and its counts. Built by `engine.rs`; read whole by the
//! worker and the tick (with the schedules it starts), which each use all
//! but two or three of its fields. The loops that need little take only
//! that: the listener its store and wake-up, the alert sender its store,
//! clock, route and wake-up.

use crate::breakers_seen::{BreakerCache, PendingVerdicts};
use crate::clock::SharedClock;
use crate::config::{TickConfig, WorkerConfig};
use crate::run::Catalog;
use std::sync::Arc;
use tokio::sync::Notify;

/// One engine's state, shared by its loops and its run tasks.
pub(crate) struct EngineState<S, E> {
    pub store: Arc<S>,
    pub executor: Arc<E>,
    pub clock: SharedClock,
    pub catalog: Arc<Catalog>,
    pub config: WorkerConfig,
    pub tick: TickConfig,
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
    /// How long this engine's claims took, for `/metrics`.
    pub claims: crate::metrics::ClaimTimes,
    /// Claims, attempts and first starts as histograms, for `/metrics`.
    pub timings: crate::metrics::TimingCells,
    /// The span current at the first start: the engine's loops run inside
    /// it, and a run or an emit enters it for the lines `/metrics` counts,
    /// so a process working several stores can tell their events apart.
    pub span: std::sync::OnceLock<tracing::Span>,
    /// Where the OpenTelemetry spans of emits, attempts and calls go.
    pub spans: crate::spans::Spans,
    /// The loops' beats, for `/livez`.
    pub liveness: Arc<crate::liveness::Liveness>,
    /// Work this store refused, logged with its reason, rate-limited.
    pub refusals: crate::faults::Refusals,
}

impl<S, E> EngineState<S, E> {
    /// Runs `f` inside the engine's span (see [`EngineState::span`]): for
    /// a line logged outside the engine's loops that must still count as
    /// this engine's.
    pub(crate) fn in_span<T>(&self, f: impl FnOnce() -> T) -> T {
        match self.span.get() {
            Some(span) => span.in_scope(f),
            None => f(),
        }
    }
}
