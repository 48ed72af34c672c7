//! Starting due schedules from the tick, and when each is next due.
//!
//! A schedule has no `retry:`: its next due time is its retry, so a failed
//! run simply waits for the next one. Cron patterns are evaluated in UTC.
//! Missed times are not run in a burst: after a pause (the process was
//! down), a schedule runs once and then keeps its rhythm.

use crate::run::execute;
use crate::run::{CallLog, EmitLog, Executor, RunContext, RunKind};
use crate::state::EngineState;
use jadpo_core::schedule::ScheduleAlert;
use jadpo_core::{AttemptEnd, Timestamp};
use jadpo_lang::Trigger;
use jadpo_store::ScheduleStore;
use std::time::Duration;

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

/// Claims the due schedules and runs each in its own task of `runs`.
pub(crate) async fn start_due<S: ScheduleStore, E: Executor>(
    state: &EngineState<S, E>,
    runs: &mut tokio::task::JoinSet<()>,
) {
    let EngineState {
        store,
        executor,
        clock,
        catalog,
        wake,
        config,
        ..
    } = state;
    let (worker, lease_margin) = (config.name.as_str(), config.lease_margin);
    let schedules = &catalog.schedules;
    if schedules.is_empty() {
        return;
    }
    let now = clock.now();
    let due: Vec<(String, Timestamp)> = schedules
        .iter()
        .map(|s| (s.name.clone(), first_due(&s.trigger, now)))
        .collect();
    let longest = schedules.iter().map(|s| s.timeout).max().unwrap_or_default();
    let lease = clock.engine_span(longest + lease_margin);
    let claims = match store.claim_schedules(&due, worker, now, lease).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "schedule.store_unavailable");
            return;
        }
    };
    for claim in claims {
        let Some(spec) = schedules.iter().find(|s| s.name == claim.state.name).cloned() else {
            continue;
        };
        if claim.lost_run {
            tracing::warn!(schedule = %spec.name, code = "run.lease_expired", kind = "lease_expired", "schedule.lease_expired");
        }
        if let Some(alert) = &claim.alert {
            log_alert(alert);
        }
        let (store, executor, clock) = (store.clone(), executor.clone(), clock.clone());
        let (catalog, wake) = (catalog.clone(), wake.clone());
        runs.spawn(async move {
            let token = claim
                .state
                .lease
                .as_ref()
                .expect("a claimed schedule has a lease")
                .token;
            let emits = EmitLog::default();
            let ctx = RunContext {
                kind: RunKind::Schedule,
                subscriber: spec.name.clone(),
                event_name: String::new(),
                event_public_id: String::new(),
                payload: serde_json::Value::Null,
                started_at: clock.now(),
                deadline: tokio::time::Instant::now() + spec.timeout,
                calls: CallLog::default(),
                path: Default::default(),
                depth: 0,
                emits: emits.clone(),
            };
            let (end, _) = execute(&*executor, ctx, spec.timeout).await;
            // A schedule keeps no handled record, so its emits are written
            // after its success and before its outcome: a crash between the
            // two runs it again, emits included (docs/decisions.md).
            if matches!(end, AttemptEnd::Succeeded) {
                let events = catalog.emits(emits.take(), 0).events;
                if !events.is_empty() {
                    match store.emit(&events, clock.now()).await {
                        Ok(_) => wake.notify_one(),
                        Err(e) => tracing::warn!(schedule = %spec.name, error = %e, "schedule.emit_failed"),
                    }
                }
            }
            let failure = match &end {
                AttemptEnd::Succeeded => None,
                AttemptEnd::Failed(f) => Some(f.record()),
            };
            let now = clock.now();
            let next = next_due(&spec.trigger, claim.due_at, now);
            match &failure {
                None => tracing::info!(schedule = %spec.name, next_due = %crate::rfc3339(next), "schedule.succeeded"),
                Some(f) => {
                    tracing::warn!(schedule = %spec.name, code = %f.code, kind = %f.kind, next_due = %crate::rfc3339(next), "schedule.failed")
                }
            }
            match store.finish_schedule(&spec.name, token, failure, next, now).await {
                Ok(Some(alert)) => log_alert(&alert),
                Ok(None) => {}
                Err(e) => tracing::warn!(schedule = %spec.name, error = %e, "schedule.finish_failed"),
            }
        });
    }
}

fn log_alert(a: &ScheduleAlert) {
    tracing::error!(
        alert = ScheduleAlert::NAME,
        schedule = %a.schedule,
        failures = a.failures,
        code = %a.last_failure.code,
        kind = %a.last_failure.kind,
        "schedule.alert"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_millis(s * 1000)
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
