//! The engine's settings and handles: how the workers and the tick run,
//! the clock they read, what a Rust action receives, and the doubles and
//! the local provider that tests put in place of real providers.
//!
//! ```
//! use std::time::Duration;
//! let worker = jadpo::runtime::WorkerConfig {
//!     poll: Duration::from_secs(1),
//!     ..Default::default()
//! };
//! let builder = jadpo::builder().worker(worker);
//! # drop(builder);
//! ```

pub use jadpo_runtime::clock::ClockError;
pub use jadpo_runtime::emit::EventError;
pub use jadpo_runtime::liveness::Liveness;
pub use jadpo_runtime::metrics::{Claims, Timings};
pub use jadpo_runtime::spans::Spans;
pub use jadpo_runtime::{Clock, ManualClock, Running, ScaledClock, SharedClock, SystemClock, TickConfig, WorkerConfig};

/// Connections as the engine resolves them at start, and the doubles a
/// test puts in their place ([`crate::Builder::double`]).
pub mod connection {
    pub use jadpo_runtime::connection::{
        Answer, Double, Fake, Received, Recording, RecordingError, Setting, StartupError,
    };
}

/// What a Rust action receives: its arguments and the connections it
/// declared ([`crate::Builder::action`], [`crate::Builder::typed_action`]).
pub mod interpreter {
    pub use jadpo_runtime::interpreter::{ActionArgs, ConnectionHandle, RustAction};
}

/// A local HTTP provider whose answers a test sets: up, down, slow, `429`.
pub mod provider {
    pub use jadpo_runtime::provider::{Behaviour, Recorded, TestProvider};
}
