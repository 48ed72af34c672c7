//! The real driver: one send over the shared `reqwest::Client`.

use super::resolve::HttpConnection;
use super::signing::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use super::wire::reqwest_method;
use super::{Response, Sent};
use jadpo_core::{Failure, FailureKind};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use std::time::Duration;
use tokio::time::Instant;

/// The client every connection shares: rustls, no redirects followed (a
/// redirect is an answer, `rejected`), connections pooled per host.
///
/// Connecting (DNS, TCP, TLS) is cut at half the shortest connection
/// timeout, before any send's own limit, so a connect that hangs ends as
/// "never left" (`unavailable`, safe to resend) rather than as a timeout
/// after sending, which for a POST would be `outcome_unknown`.
pub(crate) fn client(shortest_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    let connect = (shortest_timeout / 2).max(Duration::from_millis(50));
    reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(connect)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("jadpo/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// What a call carries on every send, checked once before the first.
pub(crate) struct Prepared {
    /// The whole URL, for a real connection; `None` when the path parses
    /// alone but not after the base URL (every send is then a defect).
    pub(crate) url: Option<url::Url>,
    /// Shared by every send: a resend copies no bytes.
    pub(crate) body: Option<bytes::Bytes>,
    pub(crate) idempotency_key: Option<HeaderValue>,
    pub(crate) message_id: HeaderValue,
    /// The same, as signed.
    pub(crate) message_id_text: String,
    pub(crate) trace: Option<jadpo_core::TraceContext>,
}

/// Sends once, signed (when the connection signs) with `now_s` as its
/// `webhook-timestamp`. The send's time limit is the connection's timeout,
/// cut to what is left before `deadline`.
pub(crate) async fn send(
    client: &reqwest::Client,
    conn: &HttpConnection,
    prepared: &Prepared,
    sent_as: Option<&jadpo_core::TraceContext>,
    now_s: i64,
    deadline: Instant,
    method: jadpo_lang::Method,
) -> Sent {
    let left = deadline.saturating_duration_since(Instant::now());
    let limit = conn.timeout.min(left);
    let cut_by_deadline = limit < conn.timeout;
    if limit == Duration::ZERO {
        return Sent::CutByDeadline;
    }
    let Some(url) = prepared.url.clone() else {
        return Sent::Defect(Failure::new("http.request_invalid", FailureKind::InternalFault));
    };
    let mut request = client.request(reqwest_method(method), url).timeout(limit);
    for (name, value) in &conn.headers {
        request = request.header(name, value);
    }
    if let Some(key) = &prepared.idempotency_key {
        request = request.header("idempotency-key", key);
    }
    // Each send is a span of its own in the run's trace, so the provider's
    // trace continues from it: the client span's when spans are recorded,
    // else an id drawn here that nothing records. Not signed: a receiver
    // verifies the body, `webhook-id` and `webhook-timestamp` only
    // (docs/observability.md).
    let sent = sent_as
        .cloned()
        .or_else(|| prepared.trace.as_ref().map(|t| t.child(rand::random())));
    if let Some(sent) = sent {
        request = request.header("traceparent", sent.traceparent());
        if let Some(state) = sent.tracestate() {
            request = request.header("tracestate", state);
        }
    }
    if let Some(signing) = &conn.signing {
        let body: &[u8] = prepared.body.as_deref().unwrap_or_default();
        let mut signature = HeaderValue::from_str(&signing.sign(&prepared.message_id_text, now_s, body))
            .expect("base64 is a valid header value");
        signature.set_sensitive(true);
        request = request
            .header(WEBHOOK_ID, &prepared.message_id)
            .header(WEBHOOK_TIMESTAMP, now_s)
            .header(WEBHOOK_SIGNATURE, signature);
    }
    if let Some(body) = &prepared.body {
        request = request.header(CONTENT_TYPE, "application/json").body(body.clone());
    }

    let lost = |e: reqwest::Error| {
        if e.is_timeout() && cut_by_deadline {
            Sent::CutByDeadline
        } else if e.is_connect() {
            Sent::NeverLeft
        } else if e.is_timeout() {
            Sent::NoAnswer
        } else if e.is_builder() {
            Sent::Defect(Failure::new("http.request_invalid", FailureKind::InternalFault))
        } else {
            // Reset or closed after the request may have gone out: no
            // answer came back, and the provider may have acted on it.
            Sent::Lost
        }
    };
    let mut answer = match request.send().await {
        Ok(answer) => answer,
        Err(e) => return lost(e),
    };
    let status = answer.status().as_u16();
    let headers = std::mem::take(answer.headers_mut());
    match answer.bytes().await {
        Ok(body) => Sent::Answered(Response {
            status,
            headers,
            body: body.into(),
        }),
        // The status came but not the whole answer: treated as no answer,
        // since the action can't read what the provider said.
        Err(e) => lost(e),
    }
}
