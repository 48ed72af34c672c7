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
use std::sync::Arc;
use std::time::Duration;

/// What stands for an app's code in a simulation.
pub trait AppRunner {
    /// The events of emission number `index` (`emission.events` of them,
    /// at `emission.at`), each with its subscribers and keys.
    fn events(&mut self, index: usize, emission: &Emission) -> Vec<NewEvent>;

    /// Runs the action of each of `runs` (its event's name and payload are
    /// on its claim), started at its `now` and cut `limit` after: now, or
    /// on another thread while the simulation goes on ([`Ran::Later`]).
    /// How a run goes depends on those and the seed alone, never on the
    /// runs before it, so a run asked ahead is the one its start would
    /// make. The simulation asks at the claim, for the starts the claim
    /// set: some of these runs are never used (held at their start, or
    /// their worker lost first).
    fn run_all(&mut self, runs: &[RunOf<'_>]) -> Vec<Ran>;

    /// The simulation used `run` (its start came and it was not held), so
    /// what it sent counts ([`AppRun::sent`]).
    fn used(&mut self, run: &AppRun);

    /// Runs the schedule `name`'s action (it has no event), started at
    /// `now` and cut `limit` after. Its emits are written only if it
    /// succeeded.
    fn run_schedule(&mut self, name: &str, now: Timestamp, limit: Duration) -> AppRun;
}

/// One run asked of [`AppRunner::run_all`].
#[derive(Clone, Copy, Debug)]
pub struct RunOf<'a> {
    /// Shared, so a run made on another thread reads it without a copy.
    pub claimed: &'a Arc<Claimed>,
    pub now: Timestamp,
    pub limit: Duration,
}

/// A run asked ahead of its start: made, or being made elsewhere.
pub enum Ran {
    Done(Box<AppRun>),
    /// Waits for the run, made on another thread; dropped unasked, the
    /// run is thrown away.
    Later(Box<dyn FnOnce() -> AppRun>),
}

impl Ran {
    /// The run, once made.
    pub fn wait(self) -> AppRun {
        match self {
            Ran::Done(run) => *run,
            Ran::Later(wait) => wait(),
        }
    }
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ran::Done(run) => f.debug_tuple("Done").field(run).finish(),
            Ran::Later(_) => f.write_str("Later"),
        }
    }
}

/// A send of a run, as the runner counts it for its report: which
/// connection, which phase of its timeline, and whether in the first
/// minute after an outage. Counted only once the run is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    pub connection: u32,
    pub phase: u32,
    pub first_minute: bool,
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
    /// Its sends, handed back to [`AppRunner::used`] if the run is used.
    pub sent: Vec<Sent>,
}
