//! A deterministic simulation of Jadpo under injected faults.
//!
//! It runs the real rules (`jadpo-core`) in the real in-memory store
//! (`jadpo-store`) against scripted providers and workers that are lost,
//! paused or cut off from their store, on a virtual clock. After its steps
//! it checks invariants: nothing lost or stuck, no attempt past the budget,
//! no attempt spent while held, one probe and one alert per outage, every
//! record matching the rules of docs/retries.md, and, for keyed
//! subscribers, no key over its slots, none waiting while a slot is free,
//! and no delivery of an ordered key started ahead of an earlier one. A run is a pure function of
//! its seed, so a failing seed replays exactly.

pub mod app;
mod check;
pub mod config;
mod engine;
mod keys;
pub mod outage;
pub mod stats;

pub use app::{AppRun, AppRunner, Ran, RunOf, Sent};
pub use config::{Behaviour, Crash, Emission, Faults, Script, SimConfig, SimKeys, SimSchedule, SimSubscriber};
pub use engine::{Sim, Violation};
pub use stats::Stats;

/// Runs the random system of `seed` and checks it.
pub fn run_seed(seed: u64) -> Result<Sim, Violation> {
    Sim::new(SimConfig::random(seed)).run()
}
