//! The runtime: workers, HTTP connections, the tick and the clock. It feeds
//! `jadpo-core`'s rules and writes what they decide through a
//! `jadpo-store`; it holds no rule of its own.
//!
//! - [`clock`]: the one source of time (system, manual, scaled).
//! - [`run`]: what runs an action ([`run::Executor`]) and the call log the
//!   breakers count from.
//! - [`engine`]: workers and the tick, started together.
//! - [`alerts`]: alert messages sent to the app's alert route.

pub mod alerts;
mod breakers_seen;
pub mod clock;
mod completer;
mod config;
pub mod connection;
pub mod emit;
pub mod engine;
mod faults;
mod histogram;
pub mod interpreter;
pub mod liveness;
mod local_queue;
mod log;
pub mod logfmt;
pub mod metrics;
mod minutes;
pub mod provider;
pub mod run;
pub mod schedules;
mod schema_gate;
pub mod spans;
mod state;
mod tick;
mod wake;
mod worker;

pub use clock::{Clock, ManualClock, ScaledClock, SharedClock, SystemClock};
pub use config::{TickConfig, WorkerConfig};
pub use engine::{Engine, Running};
pub use log::rfc3339;
pub use run::{CallLog, Catalog, Executor, FnExecutor, RunContext, RunKind, ScheduleSpec};
