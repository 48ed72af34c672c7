//! The simulation's event loop: virtual time, workers, providers, the tick.
//!
//! Every piece of Jadpo that decides anything runs here for real: the
//! core's rules inside the in-memory store, and the worker's own step
//! around each run (`jadpo_store::step`). What is simulated is only what
//! surrounds it: time, providers, workers that get lost or paused, a store
//! that cannot be reached. The run is a pure function of its config's seed.

mod emit;
mod ends;
mod operator;
mod poll;
mod providers;
mod queue;
mod schedules;
mod tick;

use crate::app::{AppRunner, Ran};
use crate::check::Checker;
use crate::config::{SimConfig, SimSubscriber};
use crate::stats::Stats;
use jadpo_core::{AttemptEnd, Backoff, CallVerdict, Timestamp};
use jadpo_store::memory::MemoryStore;
use jadpo_store::{step, Claimed, Emits, Route, Routes, StoreError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Nor may a run take more steps than this without a delivery made or
/// ended: a run that spins shows as a failure however long its traffic.
const MAX_STEPS_WITHOUT_PROGRESS: u64 = 50_000_000;

#[derive(Debug)]
struct Worker {
    /// Changes when the worker is lost: events of an older generation are
    /// those of a process that no longer exists.
    generation: u32,
    /// Its name in the store's leases, for this generation: made once, as
    /// every claim names it.
    name: String,
    busy: usize,
    lost: bool,
    next_poll: Option<Timestamp>,
    /// Claims that found the store down in a row, for its backoff.
    store_faults: u32,
}

/// An attempt under way, from its start to its finish's event. Boxed in
/// the event, as its claim is shared in the start's: an event is moved into
/// the queue, sifted through it and out again, and a run is large.
#[derive(Debug)]
struct Run {
    claimed: Arc<Claimed>,
    started_at: Timestamp,
    end: AttemptEnd,
    calls: Vec<(String, CallVerdict)>,
    /// Writes of its outcome that found the store down, for their backoff.
    store_faults: u32,
    /// An app's run: what it emitted and the 429s it got.
    emits: Emits,
    rate_limited: Vec<(String, Option<Duration>)>,
}

#[derive(Debug)]
enum Event {
    Emit(usize),
    OperatorRetry,
    /// `again`: the skip of everything blocking a `strict` key, every ten
    /// minutes to the end; else one skip of some of it.
    OperatorSkip {
        again: bool,
    },
    Poll {
        worker: usize,
    },
    Start {
        worker: usize,
        generation: u32,
        /// Shared with the run asked at the claim, which reads its event
        /// (on another thread, maybe) without a copy.
        claimed: Arc<Claimed>,
        /// An app's run, asked at the claim ([`AppRunner::run_all`]);
        /// used only if the start runs it.
        ran: Option<Ran>,
    },
    Finish {
        worker: usize,
        generation: u32,
        run: Box<Run>,
    },
    Restart {
        worker: usize,
    },
    /// A crash the config set: the worker dies, back after `back_after`.
    Crash {
        worker: usize,
        back_after: Duration,
    },
    Tick,
    /// A look at schedule number `i`, at a tick.
    ScheduleDue(usize),
    ScheduleFinish {
        worker: usize,
        generation: u32,
        run: Box<schedules::ScheduleRun>,
    },
}

pub struct Sim {
    pub cfg: SimConfig,
    pub store: MemoryStore,
    pub now: Timestamp,
    pub stats: Stats,
    pub(crate) checker: Checker,
    rng: ChaCha8Rng,
    /// The events' keys and the operator's skips draw from a source of
    /// their own, so a seed's system is otherwise the one it was before
    /// keys existed.
    key_rng: ChaCha8Rng,
    queue: queue::EventQueue<Event>,
    workers: Vec<Worker>,
    /// When the next tick is due, if the sweep has anything to do.
    tick_at: Option<Timestamp>,
    subscribers: BTreeMap<String, SimSubscriber>,
    routes: Routes,
    /// The app whose events and actions run, or none for the built-in
    /// scripted subscribers.
    app: Option<Box<dyn AppRunner>>,
    /// When the backlog is next counted: each whole minute.
    next_sample: Timestamp,
    /// An app's finished deliveries, counted, to be forgotten.
    finished: Vec<jadpo_core::DeliveryId>,
    /// Schedule events in the queue: when they are all that is left, the
    /// run ends (unless `schedules_to_horizon`).
    schedule_events: usize,
}

/// A worker's name in the store's leases: a new one for each generation,
/// as a restarted process has.
fn worker_name(worker: usize, generation: u32) -> String {
    format!("w{worker}.{generation}")
}

/// How a simulation ended when it did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub seed: u64,
    pub at: Timestamp,
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "simulation seed {} broke an invariant at t={}s: {}\nreplay: JADPO_SIM_SEED={} cargo test -p jadpo-sim --test seeds replay -- --ignored --nocapture",
            self.seed,
            self.at.as_millis() as f64 / 1000.0,
            self.what,
            self.seed,
        )
    }
}

impl Sim {
    /// A simulation of `app`'s own events and actions (`jadpo simulate`):
    /// `cfg` gives the subscribers' budgets, time limits and routes, the
    /// workers, the limits and the emissions, which `app` fills in.
    pub fn with_app(cfg: SimConfig, app: Box<dyn AppRunner>) -> Sim {
        let mut sim = Sim::new(cfg);
        sim.app = Some(app);
        sim.start_schedules();
        sim
    }

    pub fn new(cfg: SimConfig) -> Sim {
        let mut routes = Routes::new();
        for s in &cfg.subscribers {
            routes.insert(
                s.name.clone(),
                Route {
                    budget: s.budget,
                    connections: s.connections.clone(),
                },
            );
        }
        for (c, l) in &cfg.limits {
            routes.limit(c.clone(), *l);
        }
        let mut store = MemoryStore::new(cfg.policy);
        // Only a check after every step asks what a step changed.
        store.track_changed(cfg.check_every_step);
        let mut sim = Sim {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            key_rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x6b65_7973),
            store,
            now: Timestamp::EPOCH,
            stats: Stats::default(),
            checker: Checker::default(),
            queue: queue::EventQueue::default(),
            workers: (0..cfg.workers)
                .map(|w| Worker {
                    generation: 0,
                    name: worker_name(w, 0),
                    busy: 0,
                    lost: false,
                    next_poll: None,
                    store_faults: 0,
                })
                .collect(),
            tick_at: None,
            subscribers: cfg.subscribers.iter().map(|s| (s.name.clone(), s.clone())).collect(),
            routes,
            app: None,
            next_sample: Timestamp::EPOCH,
            finished: Vec::new(),
            schedule_events: 0,
            cfg,
        };
        for c in sim.cfg.crashes.clone() {
            sim.push(
                c.at,
                Event::Crash {
                    worker: c.worker,
                    back_after: c.back_after,
                },
            );
        }
        for at in sim.cfg.operator_retries.clone() {
            sim.push(at, Event::OperatorRetry);
        }
        for at in sim.cfg.operator_skips.clone() {
            sim.push(at, Event::OperatorSkip { again: false });
        }
        if !sim.cfg.keyed.is_empty() {
            sim.push(sim.cfg.skip_all_from, Event::OperatorSkip { again: true });
        }
        for i in 0..sim.cfg.emissions.len() {
            sim.push(sim.cfg.emissions[i].at, Event::Emit(i));
        }
        sim
    }

    /// Runs to the end: every delivery finished, or the horizon reached.
    pub fn run(mut self) -> Result<Sim, Violation> {
        let horizon = Timestamp::EPOCH.plus(self.cfg.horizon);
        let mut steps = 0u64;
        let mut steps_since_full = 0u64;
        let mut last_progress = (self.stats.created, self.stats.ended);
        let mut progress_at = 0u64;
        while let Some((at, event)) = self.queue.pop() {
            if at > horizon {
                break;
            }
            if matches!(event, Event::ScheduleDue(_) | Event::ScheduleFinish { .. }) {
                self.schedule_events -= 1;
                // Nothing but schedules left to happen (a run that ends may
                // still emit): they would go on for ever.
                let only_schedules = self.queue.len() == self.schedule_events;
                if only_schedules && matches!(event, Event::ScheduleDue(_)) && !self.cfg.schedules_to_horizon {
                    break;
                }
            }
            debug_assert!(at >= self.now, "time never goes back");
            self.sample_backlog(at);
            self.now = at;
            self.forget_finished();
            let is_tick = matches!(event, Event::Tick);
            self.step(event).map_err(|what| self.violation(what))?;
            self.schedule_tick();
            steps += 1;
            let progress = (self.stats.created, self.stats.ended);
            if progress != last_progress {
                (last_progress, progress_at) = (progress, steps);
            }
            if steps - progress_at > MAX_STEPS_WITHOUT_PROGRESS {
                return Err(self.violation(format!(
                    "more than {MAX_STEPS_WITHOUT_PROGRESS} steps without a delivery made or ended"
                )));
            }
            // After every step, the deliveries it changed; at each tick, and
            // once there have been as many steps as live deliveries (at
            // least 10,000), every one: a check of them all then costs one
            // delivery's check a step, however large the backlog.
            steps_since_full += 1;
            let full = is_tick || steps_since_full >= self.store.delivery_count().max(10_000) as u64;
            if full {
                steps_since_full = 0;
            }
            if full {
                self.store.clear_changed();
                self.check(None).map_err(|what| self.violation(what))?;
            } else if self.cfg.check_every_step {
                let changed = self.store.take_changed();
                self.check(Some(&changed)).map_err(|what| self.violation(what))?;
            } else {
                // Only a step's check reads what it changed.
                self.store.clear_changed();
            }
        }
        self.stats.steps = steps;
        self.stats.ended_at = self.now;
        self.check(None).map_err(|what| self.violation(what))?;
        self.check_end().map_err(|what| self.violation(what))?;
        Ok(self)
    }

    fn violation(&self, what: String) -> Violation {
        Violation {
            seed: self.cfg.seed,
            at: self.now,
            what,
        }
    }

    fn push(&mut self, at: Timestamp, event: Event) {
        self.queue.push(at, event);
    }

    fn step(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Emit(i) => self.emit(i),
            Event::OperatorRetry => self.operator_retry(),
            Event::OperatorSkip { again } => self.operator_skip(again),
            Event::Poll { worker } => self.poll(worker),
            Event::Start {
                worker,
                generation,
                claimed,
                ran,
            } => {
                if self.workers[worker].generation == generation {
                    self.start(worker, claimed, ran)?;
                }
                Ok(())
            }
            Event::Finish {
                worker,
                generation,
                run,
            } => {
                if self.workers[worker].generation == generation {
                    self.finish(worker, run)?;
                }
                Ok(())
            }
            Event::Crash { worker, back_after } => {
                if worker < self.workers.len() && !self.workers[worker].lost {
                    self.lose_worker_until(worker, self.now.plus(back_after));
                }
                Ok(())
            }
            Event::Restart { worker } => {
                let w = &mut self.workers[worker];
                w.lost = false;
                w.busy = 0;
                w.next_poll = None;
                w.store_faults = 0;
                self.schedule_poll(worker, self.now);
                self.look_at_schedules_again();
                Ok(())
            }
            Event::Tick => self.tick(),
            Event::ScheduleDue(i) => self.schedule_due(i),
            Event::ScheduleFinish {
                worker,
                generation,
                run,
            } => {
                if self.workers[worker].generation == generation {
                    self.schedule_finish(*run)?;
                }
                Ok(())
            }
        }
    }

    fn worker_name(&self, worker: usize) -> String {
        self.workers[worker].name.clone()
    }

    fn start(&mut self, worker: usize, claimed: Arc<Claimed>, ran: Option<Ran>) -> Result<(), String> {
        let id = claimed.delivery.id;
        let token = claimed.token();
        let lease_until = claimed
            .delivery
            .lease
            .as_ref()
            .map(|l| l.until)
            .unwrap_or(Timestamp::EPOCH);
        let timeout = self.subscribers[&claimed.delivery.subscriber].timeout;
        if lease_until < self.now.plus(timeout) {
            return Err(format!("delivery {id} would start with a lease shorter than its run"));
        }
        let held = step::holding(&claimed.connections, id, self.now, |c| self.store.breaker(c));
        if let Some(connection) = held {
            self.store
                .hold_claimed(id, token, &connection, self.now)
                .map_err(|e| e.to_string())?;
            self.checker.held_before_run(id, self.now)?;
            self.workers[worker].busy -= 1;
            self.schedule_poll(worker, self.now);
            return Ok(());
        }
        self.checker.starting(&self.store, &claimed)?;
        let (end, calls, ended, emits, rate_limited) = match &mut self.app {
            Some(app) => {
                let ran = ran.expect("an app's start carries the run asked at its claim").wait();
                app.used(&ran);
                // A run of no time still ends after it started.
                let took = ran.took.max(Duration::from_millis(1));
                (ran.end, ran.calls, self.now.plus(took), ran.emits, ran.rate_limited)
            }
            None => {
                let sub = self.subscribers[&claimed.delivery.subscriber].clone();
                let (end, calls, ended) = self.perform(&sub, &claimed);
                (end, calls, ended, Emits::default(), Vec::new())
            }
        };
        let run = Box::new(Run {
            claimed,
            started_at: self.now,
            end,
            calls,
            store_faults: 0,
            emits,
            rate_limited,
        });
        let generation = self.workers[worker].generation;
        if self.roll(self.cfg.faults.lost_after_commit) && run.end == AttemptEnd::Succeeded {
            self.store.commit_handled(id, token).map_err(|e| e.to_string())?;
            self.checker.committed(id);
            self.lose_worker(worker, ended);
        } else if self.roll(self.cfg.faults.lost) {
            self.lose_worker(worker, ended);
        } else if self.roll(self.cfg.faults.paused) {
            let late = lease_until.plus(Duration::from_millis(self.rng.random_range(0..=120_000)));
            self.stats.paused += 1;
            self.push(
                late.max(ended),
                Event::Finish {
                    worker,
                    generation,
                    run,
                },
            );
        } else {
            self.push(
                ended,
                Event::Finish {
                    worker,
                    generation,
                    run,
                },
            );
        }
        Ok(())
    }

    fn lose_worker(&mut self, worker: usize, at: Timestamp) {
        let back = at.plus(Duration::from_millis(self.rng.random_range(1_000..=30_000)));
        self.lose_worker_until(worker, back);
    }

    /// The worker dies now, its runs with it, and starts again at `back`.
    fn lose_worker_until(&mut self, worker: usize, back: Timestamp) {
        self.stats.workers_lost += 1;
        let w = &mut self.workers[worker];
        w.generation += 1;
        w.name = worker_name(worker, w.generation);
        w.lost = true;
        w.busy = 0;
        w.next_poll = None;
        self.push(back, Event::Restart { worker });
    }

    fn finish(&mut self, worker: usize, run: Box<Run>) -> Result<(), String> {
        if self.roll(self.cfg.faults.store_down) {
            // Writing the outcome failed before commit: the worker
            // reconnects and writes it again.
            self.stats.store_faults += 1;
            let mut run = run;
            run.store_faults = run.store_faults.saturating_add(1);
            let at = self
                .now
                .plus(Backoff::STORE.draw(run.store_faults, None, &mut self.rng));
            let generation = self.workers[worker].generation;
            self.push(
                at,
                Event::Finish {
                    worker,
                    generation,
                    run,
                },
            );
            return Ok(());
        }
        let Run {
            claimed,
            started_at,
            end,
            calls,
            emits,
            rate_limited,
            ..
        } = *run;
        // Decided when the write reaches the store: a write the store
        // refused is decided again at its retry, where a worker's completer
        // retries the finish it decided once.
        let ran = step::Ran {
            end: &end,
            started_at,
            ended_at: self.now,
            calls,
            // An app's 429s pause their connection; the scripted
            // providers' pause nothing.
            rate_limited,
        };
        let finish = step::finish(&claimed, &self.routes, ran, || emits, &mut self.rng);
        let outcome = &finish.outcome;
        let result = self.store.finish(&finish);
        self.workers[worker].busy -= 1;
        match result {
            Ok(report) => {
                self.checker
                    .finished(&claimed, outcome, &report, self.now, self.cfg.tick)?;
                // Only a finish that says it released any: the checker's
                // look is over every held delivery. One the store released
                // without saying so still shows, as a hold the check of the
                // changed deliveries finds ended in the store but not here.
                if report.released > 0 {
                    self.checker.released(&self.store, self.now)?;
                }
                self.stats.finished(outcome, self.now);
                if outcome.state().is_finished() {
                    self.app_ended(claimed.delivery.id);
                }
                for e in &report.emitted {
                    self.emitted(e);
                }
                for (connection, t) in &report.transitions {
                    self.stats.transitions.push((self.now, connection.clone(), *t));
                }
                if report.released > 0 {
                    self.wake_idle_workers();
                }
            }
            Err(StoreError::LeaseLost(_)) => {
                self.checker.fenced(&self.store, &claimed)?;
                self.stats.fenced += 1;
            }
            Err(e) => return Err(format!("finish: {e}")),
        }
        self.schedule_poll(worker, self.now);
        Ok(())
    }

    fn roll(&mut self, per_mille: u16) -> bool {
        per_mille > 0 && self.rng.random_range(0..1000) < per_mille
    }

    fn check(&self, which: Option<&[jadpo_core::DeliveryId]>) -> Result<(), String> {
        self.checker
            .check(&self.store, &self.cfg, which, &self.workers_alive(), self.now)
    }

    /// The built-in subscribers all finish by the horizon; an app's may
    /// not (a scenario's `until`, a `strict` key waiting for an operator):
    /// its report counts them as unfinished.
    fn check_end(&self) -> Result<(), String> {
        self.checker.check_end(&self.store, self.app.is_none())
    }

    fn workers_alive(&self) -> Vec<u32> {
        self.workers
            .iter()
            .map(|w| if w.lost { u32::MAX } else { w.generation })
            .collect()
    }
}
