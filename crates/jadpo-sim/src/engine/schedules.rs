//! An app's schedules, run as the engine's tick runs them
//! (`jadpo_runtime::schedules`): claimed from the store by a live process
//! at the first tick on or after their due time, run beside the worker's
//! slots, not in one, their outcome and next due time written fenced on
//! the claim's lease. A run lost with its process is claimed again once its
//! lease has ended, and counts as `run.lease_expired`.

use super::{Event, Sim};
use jadpo_core::schedule::{first_due, next_due};
use jadpo_core::{AttemptEnd, FailureRecord, LeaseToken, Timestamp};
use jadpo_store::{Emits, StoreError};
use std::time::Duration;

/// The margin a schedule's lease has past its run's time limit, as the
/// engine's (`Config::lease_margin`).
const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// A schedule's run, from its claim to the write of its outcome.
#[derive(Debug)]
pub(super) struct ScheduleRun {
    pub schedule: usize,
    pub token: LeaseToken,
    pub due_at: Timestamp,
    pub end: AttemptEnd,
    pub emits: Emits,
}

impl Sim {
    /// Each schedule's first look, at the first tick on or after its first
    /// due time.
    pub(super) fn start_schedules(&mut self) {
        for i in 0..self.cfg.schedules.len() {
            let due = first_due(&self.cfg.schedules[i].trigger, Timestamp::EPOCH);
            self.push_schedule(due, Event::ScheduleDue(i));
        }
    }

    /// After a process comes back: a schedule that fell due while every
    /// process was down is claimed at the next tick.
    pub(super) fn look_at_schedules_again(&mut self) {
        for i in 0..self.cfg.schedules.len() {
            self.push_schedule(self.now, Event::ScheduleDue(i));
        }
    }

    /// A look at schedule `i` at a tick: claimed if it is due (or its
    /// holder's lease has ended), then run.
    pub(super) fn schedule_due(&mut self, i: usize) -> Result<(), String> {
        let alive: Vec<usize> = (0..self.workers.len()).filter(|w| !self.workers[*w].lost).collect();
        if alive.is_empty() {
            return Ok(()); // looked at again when a process comes back
        }
        // Whichever process's tick comes first claims it: taken in turn.
        let worker = alive[usize::try_from(self.queue.pushed()).unwrap_or(0) % alive.len()];
        let spec = self.cfg.schedules[i].clone();
        let first = first_due(&spec.trigger, Timestamp::EPOCH);
        // As the engine's: the longest of its schedules' limits, plus the
        // margin.
        let longest = self.cfg.schedules.iter().map(|s| s.timeout).max().unwrap_or_default();
        let lease = longest + LEASE_MARGIN;
        let name = self.worker_name(worker);
        let claim = self
            .store
            .claim_schedules(&[(spec.name.clone(), first)], &name, self.now, lease)
            .into_iter()
            .next();
        let Some(claim) = claim else {
            return Ok(()); // not due, or still held by a live run
        };
        let ends = self.stats.schedules.entry(spec.name.clone()).or_default();
        if claim.lost_run {
            ends.runs += 1;
            *ends.failed.entry(FailureRecord::lease_expired().code).or_default() += 1;
        }
        ends.alerts += u64::from(claim.alert.is_some());
        let lease = claim.state.lease.as_ref().expect("a claimed schedule has a lease");
        let (token, until) = (lease.token, lease.until);
        // Should this run be lost with its process, the next tick after its
        // lease claims the schedule again.
        self.push_schedule(until, Event::ScheduleDue(i));
        let app = self.app.as_mut().expect("only an app has schedules");
        let ran = app.run_schedule(&spec.name, self.now, spec.timeout);
        app.used(&ran);
        let run = Box::new(ScheduleRun {
            schedule: i,
            token,
            due_at: claim.due_at,
            end: ran.end,
            emits: ran.emits,
        });
        let generation = self.workers[worker].generation;
        let ended = self.now.plus(ran.took.max(Duration::from_millis(1)));
        self.push_schedule(
            ended,
            Event::ScheduleFinish {
                worker,
                generation,
                run,
            },
        );
        Ok(())
    }

    /// The end of a run: its emits written if it succeeded, then its outcome
    /// and next due time, fenced on its lease.
    pub(super) fn schedule_finish(&mut self, run: ScheduleRun) -> Result<(), String> {
        let spec = self.cfg.schedules[run.schedule].clone();
        let succeeded = matches!(run.end, AttemptEnd::Succeeded);
        if succeeded && !run.emits.events.is_empty() {
            let emitted = self
                .store
                .emit(&run.emits.events, self.now)
                .map_err(|e| e.to_string())?;
            self.stats.schedules.entry(spec.name.clone()).or_default().emitted += run.emits.events.len() as u64;
            for e in &emitted {
                self.emitted(e);
            }
            self.wake_idle_workers();
        }
        let failure = match &run.end {
            AttemptEnd::Succeeded => None,
            AttemptEnd::Failed(f) => Some(f.record()),
        };
        let next = next_due(&spec.trigger, run.due_at, self.now);
        let code = failure.as_ref().map(|f| f.code.clone());
        match self
            .store
            .finish_schedule(&spec.name, run.token, failure, next, self.now)
        {
            Ok(alert) => {
                let ends = self.stats.schedules.entry(spec.name).or_default();
                ends.runs += 1;
                match code {
                    None => ends.succeeded += 1,
                    Some(code) => *ends.failed.entry(code).or_default() += 1,
                }
                ends.alerts += u64::from(alert.is_some());
                self.push_schedule(next, Event::ScheduleDue(run.schedule));
                Ok(())
            }
            // Its lease ended first and another process has claimed it:
            // that claim counted this run as lost.
            Err(StoreError::ScheduleLeaseLost(_)) => Ok(()),
            Err(e) => Err(format!("finish of schedule {}: {e}", spec.name)),
        }
    }

    /// A schedule's event, at the first tick on or after `at`.
    fn push_schedule(&mut self, at: Timestamp, event: Event) {
        let tick = i64::try_from(self.cfg.tick.as_millis()).unwrap_or(1000).max(1);
        let at = at.as_millis().max(self.now.as_millis());
        let at = Timestamp::from_millis((at + tick - 1) / tick * tick);
        self.schedule_events += 1;
        self.push(at, event);
    }
}
