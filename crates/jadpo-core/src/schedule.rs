//! A schedule's state: when it is next due, who runs it, and its alert.
//!
//! A schedule has no `retry:`: its next due time is its retry. A run lost
//! with its worker ends as `lease_expired` when the schedule is next
//! claimed. Failing [`ALERT_AFTER`] runs in a row raises one alert, raised
//! again only after a run has succeeded.
//!
//! When a schedule is next due ([`next_due`]): cron patterns are evaluated
//! in UTC; missed times are not run in a burst, so after a pause (the
//! process was down) a schedule runs once and then keeps its rhythm.

use crate::delivery::{Lease, LeaseToken};
use crate::failure::FailureRecord;
use crate::time::Timestamp;
use std::time::Duration;

/// Failed runs in a row that raise the schedule's alert.
pub const ALERT_AFTER: u32 = 3;

/// What makes a schedule due: a period, or a cron pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    Every(Duration),
    /// Checked with `croner`; five fields, or six with seconds first.
    Cron(String),
}

/// The first time a schedule with no state yet is due: one period from now,
/// or the next cron time.
pub fn first_due(trigger: &Trigger, now: Timestamp) -> Timestamp {
    match trigger {
        Trigger::Every(every) => now.plus(*every),
        Trigger::Cron(_) => next_due(trigger, now, now),
    }
}

/// When a schedule due at `due_at` and run at `now` is next due: strictly
/// after both.
pub fn next_due(trigger: &Trigger, due_at: Timestamp, now: Timestamp) -> Timestamp {
    match trigger {
        Trigger::Every(every) => {
            let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
            let behind = now.as_millis().saturating_sub(due_at.as_millis()).max(0);
            // The next tick of the rhythm that started at `due_at`.
            let periods = behind / every_ms + 1;
            Timestamp::from_millis(due_at.as_millis().saturating_add(periods.saturating_mul(every_ms)))
        }
        Trigger::Cron(pattern) => {
            let after = due_at.max(now);
            let next = pattern.parse::<croner::Cron>().ok().and_then(|cron| {
                let start = jiff::Timestamp::from_millisecond(after.as_millis())
                    .ok()?
                    .to_zoned(jiff::tz::TimeZone::UTC);
                cron.find_next_occurrence(&start, false).ok()
            });
            match next {
                Some(z) => Timestamp::from_millis(z.timestamp().as_millisecond()),
                // The checker validated the pattern; a pattern with no
                // future time (none exist in five-field cron) waits a day.
                None => after.plus(Duration::from_secs(86_400)),
            }
        }
    }
}

/// `jadpo_schedules`' row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleState {
    pub name: String,
    pub next_due: Timestamp,
    pub lease: Option<Lease>,
    /// Kept after the lease ends, so tokens never repeat.
    pub last_token: i64,
    pub consecutive_failures: u32,
    pub last_failure: Option<FailureRecord>,
    pub alert_raised: bool,
    pub version: i64,
}

/// The alert a schedule raises after failing runs in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleAlert {
    pub schedule: String,
    pub failures: u32,
    pub last_failure: FailureRecord,
}

impl ScheduleAlert {
    pub const NAME: &'static str = "schedule_failing";
}

/// What a claim of a due schedule did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleClaim {
    pub state: ScheduleState,
    /// The time it was due: the run it stands for.
    pub due_at: Timestamp,
    /// Its previous run's worker was lost; that run ended `lease_expired`.
    pub lost_run: bool,
    pub alert: Option<ScheduleAlert>,
}

impl ScheduleState {
    pub fn new(name: impl Into<String>, first_due: Timestamp) -> ScheduleState {
        ScheduleState {
            name: name.into(),
            next_due: first_due,
            lease: None,
            last_token: 0,
            consecutive_failures: 0,
            last_failure: None,
            alert_raised: false,
            version: 0,
        }
    }

    /// Due: its time has come and nobody holds it, or its holder's lease
    /// ended.
    pub fn claimable(&self, now: Timestamp) -> bool {
        match &self.lease {
            None => self.next_due <= now,
            Some(l) => l.until <= now,
        }
    }

    /// Claims it for `owner` until `until`; `None` when it is not due.
    pub fn claim(&self, owner: &str, now: Timestamp, until: Timestamp) -> Option<ScheduleClaim> {
        if !self.claimable(now) {
            return None;
        }
        let mut s = self.clone();
        let lost_run = s.lease.is_some();
        let mut alert = None;
        if lost_run {
            alert = s.record_failure(FailureRecord::lease_expired());
        }
        s.last_token += 1;
        s.lease = Some(Lease {
            owner: owner.to_owned(),
            token: LeaseToken(s.last_token),
            until,
        });
        s.version += 1;
        Some(ScheduleClaim {
            due_at: self.next_due,
            state: s,
            lost_run,
            alert,
        })
    }

    /// The run under `token` ended; `failure` is `None` on success. The
    /// schedule is next due at `next_due`. `None` when the lease was lost.
    pub fn finish(
        &self,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
    ) -> Option<(ScheduleState, Option<ScheduleAlert>)> {
        if self.lease.as_ref().map(|l| l.token) != Some(token) {
            return None;
        }
        let mut s = self.clone();
        s.lease = None;
        s.next_due = next_due;
        let alert = match failure {
            None => {
                s.consecutive_failures = 0;
                s.alert_raised = false;
                None
            }
            Some(f) => s.record_failure(f),
        };
        s.version += 1;
        Some((s, alert))
    }

    fn record_failure(&mut self, f: FailureRecord) -> Option<ScheduleAlert> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.last_failure = Some(f.clone());
        if self.consecutive_failures >= ALERT_AFTER && !self.alert_raised {
            self.alert_raised = true;
            return Some(ScheduleAlert {
                schedule: self.name.clone(),
                failures: self.consecutive_failures,
                last_failure: f,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_millis(s * 1000)
    }

    fn failure() -> Option<FailureRecord> {
        Some(FailureRecord::new("http.503", FailureKind::Unavailable))
    }

    #[test]
    fn due_once_its_time_comes_and_held_by_one_claim() {
        let s = ScheduleState::new("nightly", at(100));
        assert!(s.claim("w", at(99), at(130)).is_none());
        let c = s.claim("w", at(100), at(130)).unwrap();
        assert_eq!((c.due_at, c.lost_run), (at(100), false));
        assert!(c.state.claim("w2", at(120), at(150)).is_none(), "one run at a time");
    }

    #[test]
    fn its_next_due_time_is_its_retry() {
        let s = ScheduleState::new("nightly", at(100));
        let c = s.claim("w", at(100), at(130)).unwrap();
        let (s, alert) = c
            .state
            .finish(c.state.lease.as_ref().unwrap().token, failure(), at(3700))
            .unwrap();
        assert_eq!((s.next_due, s.consecutive_failures, alert), (at(3700), 1, None));
        assert!(!s.claimable(at(3699)), "not retried before its next due time");
    }

    #[test]
    fn a_run_lost_with_its_worker_ends_as_lease_expired() {
        let s = ScheduleState::new("nightly", at(100));
        let c = s.claim("w", at(100), at(130)).unwrap();
        let again = c.state.claim("w2", at(130), at(160)).unwrap();
        assert!(again.lost_run);
        assert_eq!(again.state.last_failure, Some(FailureRecord::lease_expired()));
        assert_eq!(again.state.consecutive_failures, 1);
        // The lost worker's late finish changes nothing.
        let old = c.state.lease.as_ref().unwrap().token;
        assert!(again.state.finish(old, None, at(500)).is_none());
    }

    #[test]
    fn failing_three_runs_in_a_row_raises_one_alert_until_a_success() {
        let mut s = ScheduleState::new("nightly", at(0));
        let mut alerts = Vec::new();
        for i in 0..5 {
            let c = s.claim("w", at(i * 10), at(i * 10 + 5)).unwrap();
            let (next, alert) = c
                .state
                .finish(c.state.lease.as_ref().unwrap().token, failure(), at(i * 10 + 10))
                .unwrap();
            alerts.extend(alert);
            s = next;
        }
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].failures, 3);
        let c = s.claim("w", at(50), at(55)).unwrap();
        let (next, _) = c
            .state
            .finish(c.state.lease.as_ref().unwrap().token, None, at(60))
            .unwrap();
        assert_eq!((next.consecutive_failures, next.alert_raised), (0, false));
        s = next;
        for i in 6..9 {
            let c = s.claim("w", at(i * 10), at(i * 10 + 5)).unwrap();
            let (next, alert) = c
                .state
                .finish(c.state.lease.as_ref().unwrap().token, failure(), at(i * 10 + 10))
                .unwrap();
            alerts.extend(alert);
            s = next;
        }
        assert_eq!(alerts.len(), 2, "raised again after a success and three more failures");
    }

    #[test]
    fn every_keeps_its_rhythm_and_skips_missed_runs() {
        let hourly = Trigger::Every(Duration::from_secs(3600));
        assert_eq!(first_due(&hourly, at(10)), at(3610));
        assert_eq!(next_due(&hourly, at(3600), at(3601)), at(7200));
        // Down for five hours: one run now, then on the hour again.
        assert_eq!(next_due(&hourly, at(3600), at(5 * 3600 + 30)), at(6 * 3600));
    }

    #[test]
    fn cron_is_evaluated_in_utc_strictly_after_now() {
        let nightly = Trigger::Cron("0 3 * * *".into());
        // 2026-11-30T00:00:00Z
        let midnight = Timestamp::from_millis(1_796_083_200_000);
        let three = midnight.plus(Duration::from_secs(3 * 3600));
        assert_eq!(first_due(&nightly, midnight), three);
        assert_eq!(
            next_due(&nightly, three, three),
            three.plus(Duration::from_secs(86_400))
        );
        let every_minute = Trigger::Cron("* * * * *".into());
        assert_eq!(
            next_due(&every_minute, midnight, midnight.plus(Duration::from_secs(30))),
            midnight.plus(Duration::from_secs(60))
        );
    }
}
