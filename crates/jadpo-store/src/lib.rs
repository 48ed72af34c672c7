//! Where deliveries and breakers live.
//!
//! A store keeps events, deliveries, handled records, attempts and the
//! `jadpo_circuit_breakers` rows, and applies the core's decisions to them
//! atomically. It decides nothing itself: [`plan`] turns the rows a store
//! read into the rows it must write, with `jadpo_core`'s rules, so the
//! in-memory store and the durable ones cannot disagree.
//!
//! - [`Store`]: the interface.
//! - [`memory`]: in-process, for the simulation and tests
//!   ([`SharedMemoryStore`] behind the interface).
//! - [`AnyStore`]: a SQLite or PostgreSQL store chosen at run time.
//! - `conformance`: the scenarios every store must pass (feature
//!   `testing`).
//! - [`step`]: a claimed delivery's step around its run, shared by the
//!   worker and the simulation.
//! - [`redact_url`]: a store URL without its password, for every message
//!   and log line that shows one.
//!
//! Features: `sqlite` and `postgres` (both by default) build each
//! database's store and driver; `testing` adds what tests of other crates
//! share (the conformance suite, `postgres::testing`).

#![warn(missing_docs)]

pub mod alerts;
pub mod any;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod codec;
#[cfg(feature = "testing")]
pub mod conformance;
mod footprint;
pub mod limits;
pub mod memory;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod narrow;
pub mod plan;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod redact;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod step;
mod store;
mod types;
pub mod upgrade;

pub use any::AnyStore;
pub use footprint::{Footprint, TableFootprint};
pub use memory::SharedMemoryStore;
pub use redact::redact_url;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use store::MAX_BATCH;
pub use store::{ScheduleStore, Store};
pub use types::*;
