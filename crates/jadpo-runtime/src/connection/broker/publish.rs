//! One publish: the message built once, sent (and sent again while the
//! connection's `retry:` allows), each ending classified, the log line.

use super::{BrokerConnection, Message};
use crate::connection::double::{Answer, Double, Received};
use crate::connection::resend::Resends;
use crate::connection::signing::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use crate::connection::simulated::Waited;
use crate::connection::{Connections, Endpoint};
use crate::spans;
use jadpo_core::publish::{classify, Broker, PublishEnd};
use jadpo_core::{CallVerdict, Failure, FailureKind, TraceContext};
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// One message an action publishes.
#[derive(Clone)]
pub struct PublishRequest {
    pub connection: String,
    /// Rendered and checked (`jadpo_core::publish::render_target`). Never
    /// logged.
    pub target: String,
    /// As written; what logs and spans show.
    pub target_template: String,
    /// Sent as JSON.
    pub body: Option<serde_json::Value>,
    /// The publish's own `headers:`, after the connection's.
    pub headers: Vec<(String, String)>,
    /// Sent as `idempotency-key` (and `Nats-Msg-Id` on NATS): makes a
    /// resend after a lost confirmation safe.
    pub idempotency_key: Option<String>,
    /// `webhook-id` when the connection signs: the same on every resend.
    pub message_id: String,
    /// The run's trace: each send carries it on as `traceparent`.
    pub trace: Option<TraceContext>,
    /// Where each send's producer span goes.
    pub spans: spans::Spans,
}

impl fmt::Debug for PublishRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("PublishRequest")
            .field("connection", &self.connection)
            .field("target_template", &self.target_template)
            .field("body", &self.body.as_ref().map(|_| "<redacted>"))
            .field("headers", &headers)
            .field("idempotency_key", &self.idempotency_key.as_ref().map(|_| "<redacted>"))
            .field("message_id", &self.message_id)
            .finish()
    }
}

/// How a publish ended, with everything its sends did.
#[derive(Clone, Debug)]
pub struct PublishOutcome {
    /// Confirmed, or the failure for the action.
    pub result: Result<(), Failure>,
    /// For the connection's breaker: how the last send that ended on its
    /// own ended. `None` when a double answered or nothing was sent.
    pub verdict: Option<CallVerdict>,
    /// Messages sent, the first included.
    pub sends: u32,
    /// The waits taken between sends, in order.
    pub waits: Vec<Duration>,
    /// The wait not taken because it would have passed the run's deadline.
    pub skipped_wait: Option<Duration>,
}

impl PublishOutcome {
    fn failed(failure: Failure) -> PublishOutcome {
        PublishOutcome {
            result: Err(failure),
            verdict: None,
            sends: 0,
            waits: Vec::new(),
            skipped_wait: None,
        }
    }
}

impl Connections {
    /// Publishes a message through its broker connection and classifies how
    /// it ended (`jadpo_core::publish::classify`). An `unavailable` ending
    /// is sent again while the connection's `retry:` allows, as a call is;
    /// a send is cut at `deadline`, and then the publish fails with
    /// `deadline_exceeded`.
    pub async fn publish(&self, req: PublishRequest, deadline: Instant, seed: u64) -> PublishOutcome {
        let outcome = self.publish_inner(&req, deadline, seed).await;
        log(&req, &outcome, self.is_double(&req.connection));
        outcome
    }

    async fn publish_inner(&self, req: &PublishRequest, deadline: Instant, seed: u64) -> PublishOutcome {
        let invalid = |code: &str| PublishOutcome::failed(Failure::new(code, FailureKind::InternalFault));
        let endpoint = match self.endpoints.get(&req.connection) {
            None => {
                return PublishOutcome::failed(
                    Failure::new("connection.unknown", FailureKind::InternalFault)
                        .with_field("connection", req.connection.clone()),
                )
            }
            // A Rust action's mistake: the app file lets only a broker
            // connection publish.
            Some(Endpoint::Http(_)) => return invalid("publish.connection_not_broker"),
            Some(endpoint) => endpoint,
        };
        if let Some(key) = &req.idempotency_key {
            // The emit's rule, as for a call's key.
            if crate::emit::idempotency_key(key).is_err() {
                return invalid("publish.idempotency_key_invalid");
            }
        }
        // A value from an event may hold a line break or a NUL, which one
        // broker would cut, another rewrite and a third carry: refused the
        // same way on all of them, before anything is sent.
        if req.headers.iter().any(|(_, v)| v.chars().any(char::is_control)) {
            return invalid("publish.header_value_invalid");
        }
        let body = match &req.body {
            None => bytes::Bytes::new(),
            Some(v) => match serde_json::to_vec(v) {
                Ok(b) => bytes::Bytes::from(b),
                Err(_) => return invalid("publish.body_invalid"),
            },
        };
        let mut resends = Resends::new(endpoint.attempts(), endpoint.resend_seed(&req.connection, seed));
        let mut out = PublishOutcome::failed(Failure::deadline_exceeded());
        loop {
            if Instant::now() >= deadline {
                out.result = Err(Failure::deadline_exceeded());
                return out;
            }
            out.sends += 1;
            let (result, verdict) = match endpoint {
                Endpoint::Broker(conn) => {
                    let now_s = (self.wall)();
                    // Boxed: the brokers' clients' futures take about
                    // 10 KB, and inline they would be carried by every
                    // action's future, which each run boxes, copying it
                    // whole (docs/performance.md).
                    Box::pin(self.send(conn, req, &body, now_s, out.sends - 1, deadline)).await
                }
                Endpoint::Double { double, broker, .. } => {
                    // A double on an HTTP connection answers as the broker
                    // a Rust action took it for would.
                    (answer_double(double, broker.unwrap_or(Broker::Amqp), req), None)
                }
                Endpoint::Simulated(sim) => {
                    let end = match sim.publish(&req.connection, &req.target, deadline).await {
                        Waited::Ended(end) => end,
                        Waited::NoAnswer => PublishEnd::Unconfirmed,
                        Waited::CutByDeadline => return deadline_cut(out),
                    };
                    let broker = sim.broker.unwrap_or(Broker::Amqp);
                    let (result, verdict) = classify(broker, end, req.idempotency_key.is_some());
                    (result, Some(verdict))
                }
                Endpoint::Http(_) => unreachable!("refused above"),
            };
            if verdict.is_some() {
                out.verdict = verdict;
            }
            let failure = match result {
                Ok(()) => {
                    out.result = Ok(());
                    return out;
                }
                Err(failure) => failure,
            };
            if !resends
                .again(out.sends, &failure, deadline, &mut out.waits, &mut out.skipped_wait)
                .await
            {
                out.result = Err(failure);
                return out;
            }
        }
    }

    /// One send through the connection's driver, under a producer span,
    /// signed with `now_s` when the connection signs.
    async fn send(
        &self,
        conn: &BrokerConnection,
        req: &PublishRequest,
        body: &bytes::Bytes,
        now_s: i64,
        resend: u32,
        deadline: Instant,
    ) -> (Result<(), Failure>, Option<CallVerdict>) {
        let left = deadline.saturating_duration_since(Instant::now());
        let limit = conn.timeout.min(left);
        if limit == Duration::ZERO {
            return (Err(Failure::deadline_exceeded()), None);
        }
        let mut span = req.spans.publish(
            req.trace.as_ref(),
            &spans::Publish {
                connection: &req.connection,
                system: system(conn.broker),
                template: &req.target_template,
                resend,
            },
        );
        let message = message(conn, req, body, now_s, span.context());
        let end = conn.publisher.publish(&message, limit).await;
        if end == PublishEnd::Unconfirmed && limit < conn.timeout {
            // The run's deadline cut the wait for the confirmation short.
            span.failed("deadline_exceeded");
            return (Err(Failure::deadline_exceeded()), None);
        }
        let (result, verdict) = classify(conn.broker, end, req.idempotency_key.is_some());
        if let Err(f) = &result {
            span.failed(&f.code);
        }
        (result, Some(verdict))
    }
}

/// The message as the driver sends it: the connection's headers, the
/// publish's, then Jadpo's own.
fn message(
    conn: &BrokerConnection,
    req: &PublishRequest,
    body: &bytes::Bytes,
    now_s: i64,
    sent_as: Option<TraceContext>,
) -> Message {
    let mut headers = conn.headers.clone();
    headers.extend(req.headers.iter().cloned());
    if let Some(key) = &req.idempotency_key {
        headers.push(("idempotency-key".to_owned(), key.clone()));
    }
    if let Some(signing) = &conn.signing {
        headers.push((WEBHOOK_ID.to_owned(), req.message_id.clone()));
        headers.push((WEBHOOK_TIMESTAMP.to_owned(), now_s.to_string()));
        headers.push((WEBHOOK_SIGNATURE.to_owned(), signing.sign(&req.message_id, now_s, body)));
    }
    // The producer span's context when spans are recorded, else an id drawn
    // here: the consumer's trace continues from the publish either way.
    if let Some(sent) = sent_as.or_else(|| req.trace.as_ref().map(|t| t.child(rand::random()))) {
        headers.push(("traceparent".to_owned(), sent.traceparent().to_owned()));
        if let Some(state) = sent.tracestate() {
            headers.push(("tracestate".to_owned(), state.to_owned()));
        }
    }
    Message {
        target: req.target.clone(),
        body: body.clone(),
        headers,
        idempotency_key: req.idempotency_key.clone(),
    }
}

/// The run's deadline cut the last send short: no verdict from it.
fn deadline_cut(mut out: PublishOutcome) -> PublishOutcome {
    out.result = Err(Failure::deadline_exceeded());
    out
}

/// `messaging.system` as the OpenTelemetry conventions name each broker.
fn system(broker: Broker) -> &'static str {
    match broker {
        Broker::Amqp => "rabbitmq",
        Broker::Nats => "nats",
        Broker::Redis => "redis",
        Broker::Mqtt => "mqtt",
    }
}

/// A fake or a recording answers a publish as it answers a call, with
/// `publish` as the method and the target as the path: a 2xx confirms it,
/// any other status refuses it (`BROKER.refused`), no answer is an
/// unconfirmed publish.
fn answer_double(double: &Double, broker: Broker, req: &PublishRequest) -> Result<(), Failure> {
    let answer = match double {
        Double::Fake(fake) => fake.answer(Received {
            method: "publish",
            path: req.target.clone(),
            body: req.body.clone(),
            idempotency_key: req.idempotency_key.clone(),
        }),
        Double::Recording(recording) => recording.answer("publish", &req.target)?,
    };
    let end = match answer {
        Answer::Http { status, .. } if (200..300).contains(&status) => PublishEnd::Confirmed,
        Answer::Http { .. } => PublishEnd::Refused,
        Answer::NeverLeft => PublishEnd::NeverLeft,
        Answer::TimedOut => PublishEnd::Unconfirmed,
    };
    classify(broker, end, req.idempotency_key.is_some()).0
}

/// One event a publish: connection, target as written, sends and, when it
/// failed, kind and code. Never a body, a header or the target sent.
fn log(req: &PublishRequest, out: &PublishOutcome, double: bool) {
    match &out.result {
        Ok(()) => tracing::debug!(
            target: "jadpo::connection",
            connection = %req.connection,
            target_template = %req.target_template,
            sends = out.sends,
            double,
            "publish confirmed"
        ),
        Err(failure) => tracing::info!(
            target: "jadpo::connection",
            connection = %req.connection,
            target_template = %req.target_template,
            sends = out.sends,
            double,
            kind = failure.kind.as_str(),
            code = %failure.code,
            "publish failed"
        ),
    }
}
