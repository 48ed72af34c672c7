//! A second thread for a simulation's runs: the runs a claim asks ahead
//! are put where a helper's lane takes them, the latest start first, while
//! the simulation goes on; at a start, the simulation makes a run the
//! helper has not taken itself, and waits for one the helper is making.
//! With no run to make, the helper makes the next emissions' events.

use super::events::EventMaker;
use super::lane::{Job, Lane};
use super::provider::Timelines;
use jadpo_core::Timestamp;
use jadpo_lang::App;
use jadpo_sim::AppRun;
use jadpo_store::NewEvent;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

/// A run asked ahead, which either thread makes: the first to take its
/// job.
pub(crate) struct Slot {
    pub(crate) now: Timestamp,
    job: Mutex<Option<Job>>,
    made: Mutex<Option<AppRun>>,
    /// Set once `made` holds the run.
    done: AtomicBool,
}

impl Slot {
    pub(crate) fn new(job: Job) -> Slot {
        Slot {
            now: job.now,
            job: Mutex::new(Some(job)),
            made: Mutex::new(None),
            done: AtomicBool::new(false),
        }
    }

    fn take_job(&self) -> Option<Job> {
        self.job.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Makes the run on the helper's lane, unless already taken.
    fn make(&self, lane: &Lane) {
        if let Some(job) = self.take_job() {
            // Set however the run ends: a run that panicked would
            // otherwise be waited for for ever.
            let _done = Done(&self.done);
            *self.made.lock().unwrap_or_else(PoisonError::into_inner) = Some(lane.run(job));
        }
    }

    /// The run: made here on `lane` if the helper has not taken it, else
    /// waited for.
    pub(crate) fn take(&self, lane: &Lane) -> AppRun {
        if let Some(job) = self.take_job() {
            return lane.run(job);
        }
        // Being made: a run takes microseconds.
        while !self.done.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect("the simulation's helper thread failed while making a run")
    }
}

/// Sets its flag when dropped, on a panic too.
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A lane on a thread of its own, which makes the runs the simulation
/// asks ahead, while it has not needed them yet, and the events of the
/// emissions to come.
pub(crate) struct Helper {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    /// Runs asked and not taken yet, the next to take on top.
    stack: Mutex<Vec<Arc<Slot>>>,
    /// How many `stack` holds, as last written under its lock.
    waiting: AtomicUsize,
    /// The events of the next emissions, by number, in order.
    ahead: Mutex<VecDeque<(usize, Vec<NewEvent>)>>,
    /// How many `ahead` holds, as last written under its lock.
    made_ahead: AtomicUsize,
    /// The first emission not asked for yet: the helper makes none before.
    next_asked: AtomicUsize,
    open: AtomicBool,
}

/// How many emissions' events the helper makes ahead: an emission is a
/// second's events of each traffic, made in about a run's time each.
const AHEAD: usize = 4;

/// How many times the helper finds nothing to do before it sleeps until
/// woken (about a microsecond). Longer spins measured no faster, and on
/// this VM made one run in three 40 % slower: a spinning thread takes from
/// the other what its core shares (docs/performance.md).
const SPINS: u32 = 500;

impl Helper {
    pub(crate) fn start(
        app: Arc<App>,
        timelines: Arc<Timelines>,
        seed: u64,
        events: Arc<EventMaker>,
    ) -> Result<Helper, String> {
        let shared = Arc::new(Shared {
            stack: Mutex::new(Vec::new()),
            waiting: AtomicUsize::new(0),
            ahead: Mutex::new(VecDeque::new()),
            made_ahead: AtomicUsize::new(0),
            next_asked: AtomicUsize::new(0),
            open: AtomicBool::new(true),
        });
        let (ready, started) = mpsc::channel::<Result<(), String>>();
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("simulate-helper".into())
            .spawn(move || {
                // Made on its own thread: an executor's runtime stays where
                // it was built.
                let lane = match Lane::new(&app, &timelines, seed) {
                    Ok(lane) => {
                        let _ = ready.send(Ok(()));
                        lane
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let mut idle = 0u32;
                let mut next_made = 0usize;
                while theirs.open.load(Ordering::Acquire) {
                    // Read, not locked, while there is nothing: a lock
                    // taken in a spin fights the simulation for its line.
                    let next = if theirs.waiting.load(Ordering::Acquire) == 0 {
                        None
                    } else {
                        let mut stack = theirs.stack.lock().unwrap_or_else(PoisonError::into_inner);
                        let next = stack.pop();
                        theirs.waiting.store(stack.len(), Ordering::Release);
                        next
                    };
                    match next {
                        Some(slot) => {
                            idle = 0;
                            slot.make(&lane);
                        }
                        None if theirs.made_ahead.load(Ordering::Acquire) < AHEAD
                            && next_made.max(theirs.next_asked.load(Ordering::Acquire)) < events.len() =>
                        {
                            idle = 0;
                            let index = next_made.max(theirs.next_asked.load(Ordering::Acquire));
                            let made = events.make(index);
                            let mut ahead = theirs.ahead.lock().unwrap_or_else(PoisonError::into_inner);
                            ahead.push_back((index, made));
                            theirs.made_ahead.store(ahead.len(), Ordering::Release);
                            next_made = index + 1;
                        }
                        None if idle < SPINS => {
                            idle += 1;
                            std::hint::spin_loop();
                        }
                        None => {
                            idle = 0;
                            std::thread::park();
                        }
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        started.recv().map_err(|e| e.to_string())??;
        Ok(Helper {
            shared,
            thread: Some(thread),
        })
    }

    /// Puts `slots` where the helper takes them, the last one first.
    pub(crate) fn put(&self, slots: impl Iterator<Item = Arc<Slot>>) {
        let mut stack = self.shared.stack.lock().unwrap_or_else(PoisonError::into_inner);
        stack.extend(slots);
        self.shared.waiting.store(stack.len(), Ordering::Release);
        drop(stack);
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
    }
}

impl Helper {
    /// The events of emission number `index`, if the helper made them
    /// ahead; `None` and the simulation makes them. Emissions are asked in
    /// order, each once.
    pub(crate) fn events(&self, index: usize) -> Option<Vec<NewEvent>> {
        self.shared.next_asked.store(index + 1, Ordering::Release);
        let mut ahead = self.shared.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        // Made before the simulation made them itself: not needed.
        while ahead.front().is_some_and(|(i, _)| *i < index) {
            ahead.pop_front();
        }
        let made = match ahead.front() {
            Some((i, _)) if *i == index => ahead.pop_front().map(|(_, events)| events),
            _ => None,
        };
        self.shared.made_ahead.store(ahead.len(), Ordering::Release);
        drop(ahead);
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
        made
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.shared.open.store(false, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
