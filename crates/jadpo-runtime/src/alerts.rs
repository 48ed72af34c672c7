//! Sends alert messages to the app's alert route (`alerts { connection:
//! path: }` in the app file, docs/app-file.md).
//!
//! The store keeps every alert message (raised by the sweep, resolved by
//! the finish that closes a breaker, raised by a failing schedule). Each
//! process that routes alerts claims the messages due for a send, POSTs
//! each as JSON through the route's connection (its headers, its `retry:`,
//! its signature), and writes how the send ended as `jadpo_core::alert`
//! decides: sent, tried again after a backoff, or given up. A claim counts
//! the send and fences the write, so of many processes one sends each
//! message; a sender lost mid-send leaves its claim to end, and the next
//! one sends again with the same `webhook-id`, which receivers dedupe on.
//!
//! Sends run in a task of their own, never in a worker's slot: a slow or
//! failing alert receiver holds back no delivery. They never wait behind a
//! breaker and never count towards one.

use crate::clock::SharedClock;
use crate::connection::{CallRequest, Connections};
use crate::log::rfc3339;
use jadpo_core::alert::{self, AlertKind, SendDecision, SendEnd};
use jadpo_lang::Method;
use jadpo_store::{AlertRecord, Store};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How often an idle sender looks for messages, in engine time.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The real time one send may take, its connection's own resends included.
pub const SEND_LIMIT: Duration = Duration::from_secs(30);

/// The most messages one sender has in flight.
const CLAIM: usize = 16;

/// Where alerts go: a connection of the app and a path on it.
#[derive(Clone)]
pub struct AlertRoute {
    pub connections: Arc<Connections>,
    pub connection: String,
    pub path: String,
}

impl std::fmt::Debug for AlertRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertRoute")
            .field("connection", &self.connection)
            .field("path", &self.path)
            .finish()
    }
}

/// The `webhook-id` of every send of one message: the same on each resend,
/// unique across messages and stores (the message's public id).
pub fn message_id(r: &AlertRecord) -> String {
    format!("msg_{}", r.public_id.replace('-', ""))
}

/// The log event a message stands for.
pub fn event_name(r: &AlertRecord) -> &'static str {
    match (r.message.connection.is_some(), r.message.kind) {
        (true, AlertKind::Raised) => "delivery.alert",
        (true, AlertKind::Resolved) => "delivery.alert_resolved",
        (false, AlertKind::Raised) => "schedule.alert",
        (false, AlertKind::Resolved) => "schedule.alert_resolved",
    }
}

/// What is POSTed: the log event's fields, the message's public id, when it
/// was raised, and for a `resolved` message when the outage ended and how
/// many deliveries were released. Absent fields are left out.
pub fn message_json(r: &AlertRecord) -> Value {
    let m = &r.message;
    let mut out = Map::new();
    out.insert("event".into(), json!(event_name(r)));
    out.insert("id".into(), json!(r.public_id));
    out.insert("alert".into(), json!(m.alert));
    out.insert("status".into(), json!(m.kind.as_str()));
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            out.insert(key.into(), v);
        }
    };
    put("connection", m.connection.as_ref().map(|c| json!(c)));
    put("schedule", m.schedule.as_ref().map(|s| json!(s)));
    put("since", Some(json!(rfc3339(m.since))));
    put("held", m.held.map(|n| json!(n)));
    put("failures", m.failures.map(|n| json!(n)));
    put(
        "last_failure",
        m.last_failure
            .as_ref()
            .map(|f| json!({"code": f.code, "kind": f.kind.as_str()})),
    );
    put("raised_at", Some(json!(rfc3339(m.raised_at))));
    put("ended_at", m.ended_at.map(|t| json!(rfc3339(t))));
    put("released", m.released.map(|n| json!(n)));
    Value::Object(out)
}

/// Claims and sends due messages until shutdown, looking again every
/// [`INTERVAL`] of engine time or when `wake` is notified.
pub(crate) async fn run<S: Store>(
    store: Arc<S>,
    clock: SharedClock,
    route: AlertRoute,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let lease = clock.engine_span(SEND_LIMIT * 2);
    while !*shutdown.borrow() {
        let now = clock.now();
        let claimed = match store.claim_alert_sends(now, CLAIM, lease).await {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %e, "alert.store_unavailable");
                Vec::new()
            }
        };
        let full = claimed.len() == CLAIM;
        let sends = claimed.into_iter().map(|r| send_one(&*store, &clock, &route, r));
        futures::future::join_all(sends).await;
        if full {
            continue;
        }
        let floor = tokio::time::sleep(Duration::from_millis(20));
        tokio::select! {
            _ = async { clock.sleep_until(now.plus(INTERVAL)).await; floor.await } => {}
            _ = wake.notified() => {}
            _ = shutdown.changed() => {}
        }
    }
}

async fn send_one<S: Store>(store: &S, clock: &SharedClock, route: &AlertRoute, r: AlertRecord) {
    let attempt = r.sends.attempts;
    let raised_at = r.message.raised_at;
    let decision = if alert::expired(raised_at, clock.now()) {
        // Claimed only to be given up: its window passed while it waited.
        SendDecision::GiveUp {
            at: clock.now(),
            code: alert::EXPIRED.to_owned(),
        }
    } else {
        let req = CallRequest {
            connection: route.connection.clone(),
            method: Method::Post,
            path: route.path.clone(),
            path_template: route.path.clone(),
            body: Some(message_json(&r)),
            // Makes the POST safe for the connection's own resends.
            idempotency_key: Some(message_id(&r)),
            message_id: message_id(&r),
            trace: None,
            spans: Default::default(),
        };
        let outcome = route
            .connections
            .call(req, tokio::time::Instant::now() + SEND_LIMIT, rand::random())
            .await;
        let end = match outcome.result {
            Ok(_) => SendEnd::Sent,
            Err(f) => SendEnd::Failed {
                code: f.code.clone(),
                kind: f.kind,
                retry_after: f.retry_after,
            },
        };
        alert::after_send(attempt, raised_at, &end, clock.now(), &mut rand::rng())
    };
    log(&r, attempt, &decision);
    match store.finish_alert_send(r.id, attempt, &decision).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(alert_id = %r.public_id, attempt, "alert.send_taken_over"),
        // The claim's lease ends and the message is sent again.
        Err(e) => tracing::warn!(alert_id = %r.public_id, attempt, error = %e, "alert.store_unavailable"),
    }
}

fn log(r: &AlertRecord, attempt: u32, decision: &SendDecision) {
    let subject = r
        .message
        .connection
        .as_deref()
        .or(r.message.schedule.as_deref())
        .unwrap_or("");
    let (alert, status, id) = (r.message.alert.as_str(), r.message.kind.as_str(), r.public_id.as_str());
    match decision {
        SendDecision::Sent { .. } => {
            tracing::info!(alert, status, subject, alert_id = id, attempt, "alert.sent")
        }
        SendDecision::Retry { at, code } => {
            tracing::warn!(alert, status, subject, alert_id = id, attempt, code = %code, next_at = %rfc3339(*at), "alert.send_failed")
        }
        SendDecision::GiveUp { code, .. } => {
            tracing::error!(alert, status, subject, alert_id = id, attempt, code = %code, "alert.send_given_up")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::alert::{AlertMessage, Sends};
    use jadpo_core::schedule::ScheduleAlert;
    use jadpo_core::{Alert, FailureKind, FailureRecord, Timestamp};

    const T: Timestamp = Timestamp::from_millis(1_764_583_200_000);

    fn record(message: AlertMessage) -> AlertRecord {
        AlertRecord {
            id: 1,
            public_id: "0193a1c0-5be4-7c2e-9a51-3f0c2d1e8b7a".into(),
            message,
            sends: Sends::default(),
        }
    }

    #[test]
    fn each_kind_of_message_as_sent() {
        let raised = record(AlertMessage::raised(
            &Alert {
                connection: "payments".into(),
                since: T,
                held: 451,
            },
            T.plus(Duration::from_secs(74)),
        ));
        assert_eq!(message_id(&raised), "msg_0193a1c05be47c2e9a513f0c2d1e8b7a");
        assert_eq!(
            message_json(&raised),
            json!({"event": "delivery.alert", "id": "0193a1c0-5be4-7c2e-9a51-3f0c2d1e8b7a",
                   "alert": "connection_unavailable", "status": "raised", "connection": "payments",
                   "since": "2025-12-01T10:00:00Z", "held": 451, "raised_at": "2025-12-01T10:01:14Z"})
        );
        let end = T.plus(Duration::from_secs(2523));
        let resolved = record(AlertMessage::resolved("payments", T, end, 450));
        assert_eq!(
            message_json(&resolved),
            json!({"event": "delivery.alert_resolved", "id": "0193a1c0-5be4-7c2e-9a51-3f0c2d1e8b7a",
                   "alert": "connection_unavailable", "status": "resolved", "connection": "payments",
                   "since": "2025-12-01T10:00:00Z", "raised_at": "2025-12-01T10:42:03Z",
                   "ended_at": "2025-12-01T10:42:03Z", "released": 450})
        );
        let schedule = record(AlertMessage::schedule_failing(
            &ScheduleAlert {
                schedule: "reconcile".into(),
                failures: 3,
                last_failure: FailureRecord::new("http.503", FailureKind::Unavailable),
            },
            T,
        ));
        assert_eq!(
            message_json(&schedule),
            json!({"event": "schedule.alert", "id": "0193a1c0-5be4-7c2e-9a51-3f0c2d1e8b7a",
                   "alert": "schedule_failing", "status": "raised", "schedule": "reconcile",
                   "since": "2025-12-01T10:00:00Z", "failures": 3,
                   "last_failure": {"code": "http.503", "kind": "unavailable"},
                   "raised_at": "2025-12-01T10:00:00Z"})
        );
    }
}
