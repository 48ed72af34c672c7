//! Starting due schedules from the tick, and when each is next due.
//!
//! When each is next due is the core's rule (`jadpo_core::schedule`): a
//! schedule has no `retry:`, so a failed run simply waits for the next one.

use crate::run::execute;
use crate::run::{CallLog, EmitLog, Executor, RunContext, RunKind, ScheduleSpec};
use crate::state::EngineState;
use jadpo_core::schedule::{first_due, next_due, ScheduleAlert, ScheduleClaim};
use jadpo_core::{AttemptEnd, Timestamp};
use jadpo_store::ScheduleStore;
use std::sync::Arc;
use tracing::Instrument;

/// Claims the due schedules and runs each in its own task of `runs`.
pub(crate) async fn start_due<S: ScheduleStore, E: Executor>(
    state: &Arc<EngineState<S, E>>,
    runs: &mut tokio::task::JoinSet<()>,
) {
    let (clock, config) = (&state.clock, &state.config);
    let schedules = &state.catalog.schedules;
    if schedules.is_empty() {
        return;
    }
    let now = clock.now();
    let due: Vec<(String, Timestamp)> = schedules
        .iter()
        .map(|s| (s.name.clone(), first_due(&s.trigger, now)))
        .collect();
    let longest = schedules.iter().map(|s| s.timeout).max().unwrap_or_default();
    let lease = clock.engine_span(longest + config.lease_margin);
    let claims = match state.store.claim_schedules(&due, &config.name, now, lease).await {
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
        runs.spawn(run_schedule(state.clone(), spec, claim).in_current_span());
    }
}

/// Runs one claimed schedule under its time limit, writes its emits after
/// a success, and its outcome with its next due time.
async fn run_schedule<S: ScheduleStore, E: Executor>(
    state: Arc<EngineState<S, E>>,
    spec: ScheduleSpec,
    claim: ScheduleClaim,
) {
    let (store, clock) = (&state.store, &state.clock);
    let token = claim
        .state
        .lease
        .as_ref()
        .expect("a claimed schedule has a lease")
        .token;
    let emits = EmitLog::default();
    let mut span = state.spans.schedule(&spec.name);
    let trace = span.context();
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
        trace: trace.clone(),
        spans: state.spans.clone(),
    };
    let (end, _) = execute(&*state.executor, ctx, spec.timeout).await;
    // A schedule keeps no handled record, so its emits are written
    // after its success and before its outcome: a crash between the
    // two runs it again, emits included (docs/decisions.md).
    if matches!(end, AttemptEnd::Succeeded) {
        let events = state.catalog.emits(emits.take(), 0, trace.as_ref()).events;
        if !events.is_empty() {
            match store.emit(&events, clock.now()).await {
                Ok(_) => state.wake.notify_one(),
                Err(e) => tracing::warn!(schedule = %spec.name, error = %e, "schedule.emit_failed"),
            }
        }
    }
    let failure = match &end {
        AttemptEnd::Succeeded => None,
        AttemptEnd::Failed(f) => Some(f.record()),
    };
    if let Some(f) = &failure {
        span.set("jadpo.failure.kind", f.kind.as_str());
        span.failed(&f.code);
    }
    drop(span);
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
