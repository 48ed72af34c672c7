//! The app's own code in a simulation: its events made from the
//! scenario's traffic ([`super::events`]), and its actions run by the real
//! interpreter ([`super::lane`]), on the simulation's thread or on a
//! helper's ([`super::helper`]), their calls answered by the scenario's
//! providers.

use super::events::EventMaker;
use super::helper::{Helper, Slot};
use super::lane::{Job, Lane};
use super::provider::{Tally, Timelines};
use jadpo_core::Timestamp;
use jadpo_lang::App;
use jadpo_sim::{AppRun, AppRunner, Emission, Ran, RunOf};
use jadpo_store::NewEvent;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Runner {
    /// The lane on the simulation's own thread.
    lane: Arc<Lane>,
    /// A lane on a thread of its own, on a machine with a core to spare.
    helper: Option<Helper>,
    tally: Arc<Tally>,
    events: Arc<EventMaker>,
}

impl Runner {
    /// The runner of `app`'s code, its connections answered by
    /// `timelines`, the sends of the runs used counted in `tally`, every
    /// run's answers drawn from `seed`, its events made by `events`.
    /// `helper`: whether a second thread may make runs and events ahead.
    pub(crate) fn new(
        app: Arc<App>,
        timelines: Arc<Timelines>,
        tally: Arc<Tally>,
        seed: u64,
        events: EventMaker,
        helper: bool,
    ) -> Result<Runner, String> {
        let lane = Arc::new(Lane::new(&app, &timelines, seed)?);
        let events = Arc::new(events);
        let helper = if helper {
            Some(Helper::start(app, timelines, seed, events.clone())?)
        } else {
            None
        };
        Ok(Runner {
            lane,
            helper,
            tally,
            events,
        })
    }
}

impl AppRunner for Runner {
    fn events(&mut self, index: usize, _emission: &Emission) -> Vec<NewEvent> {
        if let Some(events) = self.helper.as_ref().and_then(|h| h.events(index)) {
            return events;
        }
        self.events.make(index)
    }

    /// With a helper, the runs are put where it can take them, and the
    /// simulation goes on with its store, its checks and its queue while
    /// the helper makes them, the latest start first. At a start, a run
    /// the helper has not taken is made on this thread, and one it is
    /// making is waited for. Each run's answers come from a source of its
    /// own, so where and when it is made changes nothing in it.
    fn run_all(&mut self, runs: &[RunOf<'_>]) -> Vec<Ran> {
        let Some(helper) = &self.helper else {
            return runs
                .iter()
                .map(|r| Ran::Done(Box::new(self.lane.run(Job::of(r.claimed, r.now, r.limit)))))
                .collect();
        };
        let slots: Vec<Arc<Slot>> = runs
            .iter()
            .map(|r| Arc::new(Slot::new(Job::of(r.claimed, r.now, r.limit))))
            .collect();
        // The helper takes from the top: the latest start there, the one
        // needed last.
        let mut order: Vec<&Arc<Slot>> = slots.iter().collect();
        order.sort_by_key(|slot| slot.now);
        helper.put(order.into_iter().cloned());
        slots
            .into_iter()
            .map(|slot| {
                let lane = self.lane.clone();
                Ran::Later(Box::new(move || slot.take(&lane)))
            })
            .collect()
    }

    fn run_schedule(&mut self, name: &str, now: Timestamp, limit: Duration) -> AppRun {
        // A schedule has no event; its emits start a chain.
        self.lane.run(Job::schedule(name, now, limit))
    }

    fn used(&mut self, run: &AppRun) {
        self.tally.count(&run.sent);
    }
}
