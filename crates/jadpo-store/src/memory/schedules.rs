//! Schedules in the in-memory store: claimed under a lease, finished
//! fenced on it, one alert per failing streak, as the drivers'
//! `schedules.rs` do.

use super::MemoryStore;
use crate::types::*;
use jadpo_core::alert::AlertMessage;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::{FailureRecord, LeaseToken, Timestamp};
use std::time::Duration;

impl MemoryStore {
    /// Claims the due ones among `schedules` (each with the due time to start
    /// from when it has no row yet) for `worker` until `now + lease`; a claim
    /// that takes over a lost run records `lease_expired`, and one that raises
    /// the schedule's alert keeps it as an alert message.
    pub fn claim_schedules(
        &mut self,
        schedules: &[(String, Timestamp)],
        worker: &str,
        now: Timestamp,
        lease: Duration,
    ) -> Vec<ScheduleClaim> {
        let mut claims = Vec::new();
        for (name, first_due) in schedules {
            let state = self
                .schedules
                .entry(name.clone())
                .or_insert_with(|| ScheduleState::new(name.clone(), *first_due));
            if let Some(c) = state.claim(worker, now, now.plus(lease)) {
                *state = c.state.clone();
                if let Some(a) = &c.alert {
                    self.alerts.push(AlertMessage::schedule_failing(a, now));
                }
                claims.push(c);
            }
        }
        claims
    }

    /// Ends the run under `token`: next due at `next_due`. Returns the
    /// schedule's alert when this failure raises it, and keeps it as an alert
    /// message. A lost lease changes nothing and is
    /// [`StoreError::ScheduleLeaseLost`].
    pub fn finish_schedule(
        &mut self,
        name: &str,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
        now: Timestamp,
    ) -> Result<Option<ScheduleAlert>, StoreError> {
        let lost = || StoreError::ScheduleLeaseLost(name.to_owned());
        let state = self.schedules.get_mut(name).ok_or_else(lost)?;
        let (next, alert) = state.finish(token, failure, next_due).ok_or_else(lost)?;
        *state = next;
        if let Some(a) = &alert {
            self.alerts.push(AlertMessage::schedule_failing(a, now));
        }
        Ok(alert)
    }

    /// Every schedule's state, by name.
    pub fn schedules(&self) -> impl Iterator<Item = &ScheduleState> {
        self.schedules.values()
    }
}
