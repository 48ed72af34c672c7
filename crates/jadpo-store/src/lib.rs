//! Where deliveries and breakers live.
//!
//! A store keeps events, deliveries, handled records, attempts and the
//! `jadpo_circuit_breakers` rows, and applies the core's decisions to them
//! atomically. It decides nothing itself: every rule is a `jadpo_core`
//! function, so the in-memory store and the durable ones cannot disagree.
//!
//! - [`memory::MemoryStore`]: in-process, for the simulation and tests.

pub mod memory;
mod types;

pub use types::*;
