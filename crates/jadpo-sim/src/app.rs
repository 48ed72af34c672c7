//! A simulation of a user's own app (`jadpo simulate`, docs/simulate.md):
//! its events and its actions' runs come from an [`AppRunner`] instead of
//! the built-in scripted subscribers. Everything around a run stays the
//! simulation's: the claim, the holds, the limits, the finish and the tick
//! of the real in-memory store, on the virtual clock, with every invariant
//! checked.
//!
//! The runner lives outside this crate (it runs the app's interpreter,
//! which does I/O in production); it answers here with plain data.

use crate::config::Emission;
use jadpo_core::{AttemptEnd, CallVerdict, Timestamp};
use jadpo_store::{Claimed, Emits, NewEvent};
use std::time::Duration;

/// What stands for an app's code in a simulation.
pub trait AppRunner {
    /// The events of emission number `index` (`emission.events` of them,
    /// at `emission.at`), each with its subscribers and keys.
    fn events(&mut self, index: usize, emission: &Emission) -> Vec<NewEvent>;

    /// Runs the action of `claimed` (its event's name and payload are on
    /// it), started at `now` and cut `limit` after.
    fn run(&mut self, claimed: &Claimed, now: Timestamp, limit: Duration) -> AppRun;

    /// Runs the schedule `name`'s action (it has no event), started at
    /// `now` and cut `limit` after. Its emits are written only if it
    /// succeeded.
    fn run_schedule(&mut self, name: &str, now: Timestamp, limit: Duration) -> AppRun;
}

/// How one run of an app's action went.
#[derive(Debug)]
pub struct AppRun {
    pub end: AttemptEnd,
    /// Per connection called, the verdict of its last call, for its
    /// breaker.
    pub calls: Vec<(String, CallVerdict)>,
    /// How long it ran, on the virtual clock.
    pub took: Duration,
    /// What it emitted: written only if it succeeded.
    pub emits: Emits,
    /// The connections that answered 429, with their `Retry-After`.
    pub rate_limited: Vec<(String, Option<Duration>)>,
}
