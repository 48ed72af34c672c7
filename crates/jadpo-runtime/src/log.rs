//! The runtime's log events: every delivery transition, breaker change and
//! alert, as `tracing` events with structured fields. Never a failure's
//! fields, a secret or an event's payload: only ids, names, codes and kinds.
//!
//! Each event's message is its name (`delivery.retry`, `breaker.opened`,
//! `delivery.alert`); the command line prints them as readable lines under
//! `jadpo dev` and as one JSON object per line under `jadpo serve`.

use jadpo_core::{Alert, Outcome, Timestamp, Transition};
use jadpo_store::{ClaimReport, Claimed, Finish, FinishReport};

/// RFC 3339 in UTC, for humans and JSON alike: to the second when the
/// milliseconds are zero, else with all three of them (`.240Z`, never
/// jiff's shortest `.24Z`), so times of one second line up and read alike.
pub fn rfc3339(t: Timestamp) -> String {
    match jiff::Timestamp::from_millisecond(t.as_millis()) {
        Err(_) => t.as_millis().to_string(),
        Ok(ts) if t.as_millis().rem_euclid(1000) == 0 => ts.to_string(),
        Ok(ts) => format!("{ts:.3}"),
    }
}

pub(crate) fn claim(r: &ClaimReport) {
    for c in &r.claimed {
        tracing::debug!(delivery = c.delivery.id.0, subscriber = %c.delivery.subscriber, attempt = c.delivery.attempts, probe = !c.probe_for.is_empty(), "delivery.claimed");
    }
    for id in &r.lease_expired {
        tracing::warn!(
            delivery = id.0,
            code = "run.lease_expired",
            kind = "lease_expired",
            "delivery.lease_expired"
        );
    }
    for id in &r.succeeded {
        tracing::info!(delivery = id.0, "delivery.succeeded_at_claim");
    }
    for id in &r.gave_up {
        tracing::warn!(delivery = id.0, "delivery.gave_up");
    }
    for id in &r.held {
        tracing::info!(delivery = id.0, "delivery.held");
    }
    for (id, until) in &r.waiting {
        tracing::debug!(delivery = id.0, due_at = %rfc3339(*until), "delivery.waiting_for_limit");
    }
}

pub(crate) fn held(c: &Claimed, connection: &str) {
    tracing::info!(delivery = c.delivery.id.0, subscriber = %c.delivery.subscriber, connection, "delivery.held");
}

/// The subscriber of a finish's delivery, as claimed (empty for a finish
/// built without its claim).
pub(crate) fn subscriber(f: &Finish) -> &str {
    f.claimed.as_ref().map_or("", |d| d.subscriber.as_str())
}

pub(crate) fn finished(f: &Finish, report: &FinishReport) {
    let id = f.id.0;
    let subscriber = subscriber(f);
    let attempt = f.claimed.as_ref().map_or(0, |d| d.attempts);
    match &f.outcome {
        Outcome::Succeeded => {
            tracing::info!(delivery = id, subscriber, attempt, "delivery.succeeded")
        }
        Outcome::Retry { at, failure } => tracing::info!(
            delivery = id, subscriber, attempt, code = %failure.code, kind = %failure.kind, due_at = %rfc3339(*at),
            "delivery.retry"
        ),
        Outcome::Failed(f) => {
            tracing::warn!(delivery = id, subscriber, attempt, code = %f.code, kind = %f.kind, "delivery.failed")
        }
        Outcome::Parked(f) => {
            tracing::warn!(delivery = id, subscriber, attempt, code = %f.code, kind = %f.kind, "delivery.parked")
        }
    }
    for (connection, t) in &report.transitions {
        match t {
            Transition::Opened => tracing::warn!(connection = %connection, "breaker.opened"),
            Transition::Reopened => {
                tracing::warn!(connection = %connection, probe = id, "breaker.reopened")
            }
            Transition::Closed => {
                tracing::info!(connection = %connection, released = report.released, "breaker.closed")
            }
        }
    }
}

/// The alert, as docs/retries.md writes it: `{"event": "delivery.alert",
/// "alert": "connection_unavailable", "connection": …, "since": …, "held": …}`.
pub(crate) fn alert(a: &Alert) {
    tracing::error!(alert = Alert::NAME, connection = %a.connection, since = %rfc3339(a.since), held = a.held, "delivery.alert");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_three_digits_or_none() {
        let at = |ms: i64| rfc3339(Timestamp::from_millis(1_796_184_984_000 + ms));
        assert_eq!(at(0), "2026-12-02T04:16:24Z");
        assert_eq!(at(240), "2026-12-02T04:16:24.240Z");
        assert_eq!(at(950), "2026-12-02T04:16:24.950Z");
        assert_eq!(at(7), "2026-12-02T04:16:24.007Z");
        assert_eq!(at(999), "2026-12-02T04:16:24.999Z");
        assert_eq!(rfc3339(Timestamp::from_millis(-1)), "1969-12-31T23:59:59.999Z");
    }
}
