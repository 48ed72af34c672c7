//! A worker's poll: claims while it has free slots and the store hands it
//! anything to decide, then looks again at the next due time, as the
//! engine's worker loop does (`jadpo_runtime`'s `worker` and `wake`).

use super::{Event, Sim};
use crate::app::{Ran, RunOf};
use jadpo_core::{Backoff, Timestamp};
use jadpo_store::ClaimRequest;
use jadpo_store::Claimed;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;

/// The engine's shortest wait before looking again at something due that
/// its claim could not take (`jadpo_runtime`'s `wake::BUSY_WAIT`).
const BUSY_WAIT: Duration = Duration::from_millis(20);

impl Sim {
    pub(super) fn schedule_poll(&mut self, worker: usize, at: Timestamp) {
        let w = &mut self.workers[worker];
        if w.lost || w.next_poll.is_some_and(|p| p <= at) {
            return;
        }
        w.next_poll = Some(at);
        self.push(at, Event::Poll { worker });
    }

    pub(super) fn wake_idle_workers(&mut self) {
        for w in 0..self.workers.len() {
            if self.workers[w].busy < self.cfg.slots {
                self.schedule_poll(w, self.now);
            }
        }
    }

    pub(super) fn poll(&mut self, worker: usize) -> Result<(), String> {
        if self.workers[worker].next_poll != Some(self.now) {
            return Ok(()); // superseded by an earlier poll
        }
        self.workers[worker].next_poll = None;
        if self.workers[worker].lost {
            return Ok(());
        }
        if self.roll(self.cfg.faults.store_down) {
            // The store can't be reached: reconnect after a backoff.
            self.stats.store_faults += 1;
            let faults = &mut self.workers[worker].store_faults;
            *faults = faults.saturating_add(1);
            let wait = Backoff::STORE.draw(*faults, None, &mut self.rng);
            self.schedule_poll(worker, self.now.plus(wait));
            return Ok(());
        }
        self.workers[worker].store_faults = 0;
        let lease = self.cfg.lease();
        // Each claim that decides anything moves at least one delivery off
        // "due now" (running, ended, held, or waiting until a later turn),
        // so a poll makes at most one claim per delivery and a last one
        // that finds nothing: an explicit bound, so a bug shows as a
        // failure rather than a hang.
        let max_claims = self.store.delivery_count() + 1;
        for _ in 0..max_claims {
            let free = self.cfg.slots - self.workers[worker].busy;
            if free == 0 {
                return Ok(());
            }
            let report = self.store.claim(&ClaimRequest {
                // Borrowed, not copied: most polls find nothing to claim.
                worker: &self.workers[worker].name,
                routes: &self.routes,
                now: self.now,
                limit: free,
                lease,
            });
            self.checker
                .claimed(&report, &self.cfg, worker, self.workers[worker].generation, self.now)?;
            self.checker.keys.claimed(&self.store, &report.claimed)?;
            // A claim that told deliveries to wait moved them to their turns:
            // what is due behind them is looked at now, as the engine does,
            // not after the turns it just gave have passed.
            let decided = report.claimed.len()
                + report.succeeded.len()
                + report.gave_up.len()
                + report.held.len()
                + report.waiting.len();
            self.stats.ended += (report.succeeded.len() + report.gave_up.len()) as u64;
            for id in report.succeeded.iter().chain(&report.gave_up) {
                self.app_ended(*id);
            }
            // A claimed batch starts within a moment, not at once: the gap
            // in which a breaker may open after the claim.
            let starts: Vec<(Timestamp, Arc<Claimed>)> = report
                .claimed
                .into_iter()
                .map(|claimed| {
                    (
                        self.now.plus(Duration::from_millis(self.rng.random_range(0..=50))),
                        Arc::new(claimed),
                    )
                })
                .collect();
            let mut ran = self.run_ahead(&starts).into_iter();
            let generation = self.workers[worker].generation;
            for (at, claimed) in starts {
                self.workers[worker].busy += 1;
                self.push(
                    at,
                    Event::Start {
                        worker,
                        generation,
                        claimed,
                        ran: ran.next().flatten(),
                    },
                );
            }
            if decided == 0 {
                if let Some(next) = self.store.next_due() {
                    // As the engine's worker with free slots, busy or not:
                    // the next due time (a turn for a token, a retry) is
                    // looked at then, something due that no claim could
                    // take (taken by another process) no sooner than its
                    // busy wait, never in a spin.
                    let at = if next > self.now {
                        next
                    } else {
                        self.now.plus(BUSY_WAIT)
                    };
                    self.schedule_poll(worker, at);
                }
                return Ok(());
            }
        }
        Err(format!(
            "a poll claimed {max_claims} times, more than the store has deliveries"
        ))
    }

    /// An app's runs of a claimed batch, each as it will go at its start,
    /// asked now, so the runner may make them on another thread while the
    /// simulation goes on. A run depends on its delivery, its start and the
    /// seed alone ([`crate::AppRunner::run_all`]), so one made now is the one its
    /// start would make.
    fn run_ahead(&mut self, starts: &[(Timestamp, Arc<Claimed>)]) -> Vec<Option<Ran>> {
        let Some(app) = self.app.as_mut().filter(|_| !starts.is_empty()) else {
            return Vec::new();
        };
        let runs: Vec<RunOf<'_>> = starts
            .iter()
            .map(|(at, claimed)| RunOf {
                claimed,
                now: *at,
                limit: self.subscribers[&claimed.delivery.subscriber].timeout,
            })
            .collect();
        app.run_all(&runs).into_iter().map(Some).collect()
    }
}
