//! One call: sends, classification, the call's own retries, the log line.

use super::double::{Answer, Double, Received};
use super::http::{self, Prepared};
use super::resend::Resends;
use super::simulated::Waited;
use super::wire::{method_name, parse_retry_after};
use super::{CallOutcome, CallRequest, Connections, Endpoint, Response, Sent};
use crate::spans;
use jadpo_core::call::{classify, is_idempotent, CallEnd};
use jadpo_core::{CallVerdict, Failure, FailureKind};
use reqwest::header::{HeaderValue, DATE, RETRY_AFTER};
use std::time::{Duration, UNIX_EPOCH};
use tokio::time::Instant;

impl Connections {
    /// Sends a call through its connection and classifies how it ended.
    ///
    /// A send that ends `unavailable` or `rate_limited` is sent again while
    /// the connection's `retry: { attempts }` allows, after
    /// `Backoff::CALL.draw(sends, retry_after, rng)`, the random source
    /// seeded by `seed`. A wait that would reach `deadline` is not taken:
    /// the last failure is returned and the wait kept in `skipped_wait`. A
    /// send is cut at `deadline` too, and then the call fails with
    /// `deadline_exceeded`.
    pub async fn call(&self, req: CallRequest, deadline: Instant, seed: u64) -> CallOutcome {
        let outcome = self.call_inner(&req, deadline, seed).await;
        log(&req, &outcome, self.is_double(&req.connection));
        outcome
    }

    async fn call_inner(&self, req: &CallRequest, deadline: Instant, seed: u64) -> CallOutcome {
        let Some(endpoint) = self.endpoints.get(&req.connection) else {
            return CallOutcome::failed(
                Failure::new("connection.unknown", FailureKind::InternalFault)
                    .with_field("connection", req.connection.clone()),
            );
        };
        let prepared = match prepare(req, endpoint) {
            Ok(prepared) => prepared,
            Err(failure) => return CallOutcome::failed(failure),
        };
        let idempotent = is_idempotent(method_name(req.method), req.idempotency_key.is_some());
        let mut resends = Resends::new(endpoint.attempts(), endpoint.resend_seed(&req.connection, seed));
        let mut out = CallOutcome::failed(Failure::deadline_exceeded());
        loop {
            if Instant::now() >= deadline {
                out.result = Err(Failure::deadline_exceeded());
                return out;
            }
            out.sends += 1;
            // Each send signs with its own time (`webhook-timestamp`), read
            // as it leaves: a resend after a long `Retry-After` is not
            // refused by a receiver as too old.
            let now_s = (self.wall)();
            let (sent, real) = match endpoint {
                Endpoint::Http(conn) => {
                    let url = prepared.url.as_ref();
                    let mut span = req.spans.call(
                        req.trace.as_ref(),
                        &spans::Call {
                            connection: &req.connection,
                            method: method_name(req.method),
                            template: &req.path_template,
                            host: url.and_then(|u| u.host_str()),
                            port: url.and_then(|u| u.port_or_known_default()),
                            resend: out.sends - 1,
                        },
                    );
                    let sent_as = span.context();
                    // Boxed, as a broker's send is: inline, it would be
                    // carried by every action's future, which each run
                    // boxes, copying it whole, whatever the action's
                    // connections (docs/performance.md).
                    let sent = Box::pin(http::send(
                        &self.client,
                        conn,
                        &prepared,
                        sent_as.as_ref(),
                        now_s,
                        deadline,
                        req.method,
                    ))
                    .await;
                    record(&mut span, &sent);
                    (sent, true)
                }
                Endpoint::Double { double, .. } => (answer_double(double, req), false),
                Endpoint::Simulated(sim) => {
                    let sent = match sim
                        .call(&req.connection, method_name(req.method), &req.path, deadline)
                        .await
                    {
                        Waited::Ended(answer) => sent(answer),
                        Waited::NoAnswer => Sent::NoAnswer,
                        Waited::CutByDeadline => Sent::CutByDeadline,
                    };
                    (sent, true)
                }
                Endpoint::Broker(_) => unreachable!("`prepare` refuses a broker connection"),
            };
            let (result, verdict, status) = judge(sent, idempotent, now_s);
            if real && verdict.is_some() {
                out.verdict = verdict;
            }
            out.status = status;
            let failure = match result {
                Ok(response) => {
                    out.result = Ok(response);
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
}

/// How a send ended, on its span: the status, and `error.type` for
/// anything but a 1xx-3xx answer (a 4xx is the client's error here).
fn record(span: &mut spans::Recording, sent: &Sent) {
    let error = match sent {
        Sent::Answered(r) => {
            span.set("http.response.status_code", i64::from(r.status));
            if r.status < 400 {
                return;
            }
            r.status.to_string()
        }
        Sent::NeverLeft => "never_left".into(),
        Sent::NoAnswer => "timeout".into(),
        Sent::Lost => "connection_lost".into(),
        Sent::CutByDeadline => "deadline_exceeded".into(),
        Sent::Defect(f) => f.code.clone(),
    };
    span.failed(&error);
}

fn prepare(req: &CallRequest, endpoint: &Endpoint) -> Result<Prepared, Failure> {
    let invalid = |code: &str| Failure::new(code, FailureKind::InternalFault);
    if !req.path.starts_with('/') {
        return Err(invalid("call.path_invalid"));
    }
    // The URL a real driver sends to, parsed once for every send (the
    // client would parse it again from text on each), and the path's check
    // too: only when it fails is the path parsed alone, to tell a bad path
    // from a URL that can't be built.
    let url = match endpoint {
        Endpoint::Http(conn) => match url::Url::parse(&format!("{}{}", conn.base_url, req.path)) {
            Ok(url) => Some(url),
            Err(_) if url::Url::parse(&format!("http://h{}", req.path)).is_err() => {
                return Err(invalid("call.path_invalid"))
            }
            // A path that parses alone but not after this base: the send
            // fails as a request that can't be built, as it always did.
            Err(_) => None,
        },
        // A Rust action's mistake: the app file lets only `publish` reach
        // a broker connection.
        Endpoint::Broker(_) => return Err(invalid("call.connection_not_http")),
        Endpoint::Double { .. } | Endpoint::Simulated(_) => {
            if !plainly_valid(&req.path) && url::Url::parse(&format!("http://h{}", req.path)).is_err() {
                return Err(invalid("call.path_invalid"));
            }
            None
        }
    };
    let idempotency_key = match &req.idempotency_key {
        None => None,
        Some(key) => {
            // The emit's rule: a key from an event's field may be empty,
            // huge or not ASCII, and a receiver would read it differently.
            crate::emit::idempotency_key(key).map_err(|_| invalid("call.idempotency_key_invalid"))?;
            let mut value = HeaderValue::from_str(key).map_err(|_| invalid("call.idempotency_key_invalid"))?;
            value.set_sensitive(true);
            Some(value)
        }
    };
    let message_id = HeaderValue::from_str(&req.message_id).map_err(|_| invalid("call.message_id_invalid"))?;
    // Only a real send writes the body: a double and a simulation read the
    // value itself.
    let body = match (&req.body, endpoint) {
        (Some(value), Endpoint::Http(_)) => Some(bytes::Bytes::from(
            serde_json::to_vec(value).map_err(|_| invalid("call.body_invalid"))?,
        )),
        _ => None,
    };
    Ok(Prepared {
        url,
        body,
        idempotency_key,
        message_id,
        message_id_text: req.message_id.clone(),
        trace: req.trace.clone(),
    })
}

/// A path of characters a URL takes as they are (RFC 3986's unreserved
/// and sub-delimiters, `/`, `:`, `@` and `%`): the URL parser would accept
/// it, so the parse is skipped for the common case. Anything else is
/// decided by the parser.
fn plainly_valid(path: &str) -> bool {
    path.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=/:@%".contains(&b))
}

fn answer_double(double: &Double, req: &CallRequest) -> Sent {
    let method = method_name(req.method);
    let answer = match double {
        Double::Fake(fake) => fake.answer(Received {
            method,
            path: req.path.clone(),
            body: req.body.clone(),
            idempotency_key: req.idempotency_key.clone(),
        }),
        Double::Recording(recording) => match recording.answer(method, &req.path) {
            Ok(answer) => answer,
            Err(failure) => return Sent::Defect(failure),
        },
    };
    sent(answer)
}

fn sent(answer: Answer) -> Sent {
    match answer {
        Answer::Http { status, headers, body } => Sent::Answered(Response {
            status,
            headers: Answer::header_map(&headers),
            body,
        }),
        Answer::NeverLeft => Sent::NeverLeft,
        Answer::TimedOut => Sent::NoAnswer,
    }
}

/// One send's ending, through the core's outcome table.
fn judge(sent: Sent, idempotent: bool, now_s: i64) -> (Result<Response, Failure>, Option<CallVerdict>, Option<u16>) {
    let (result, verdict) = match sent {
        Sent::Answered(response) => {
            let status = response.status;
            // "Now" is read from the answer's `Date` only when a
            // `Retry-After` needs it.
            let now = || {
                response
                    .headers
                    .get(DATE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| httpdate::parse_http_date(v).ok())
                    .unwrap_or_else(|| UNIX_EPOCH + Duration::from_secs(u64::try_from(now_s).unwrap_or(0)))
            };
            let retry_after = response
                .headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, now()));
            let (result, verdict) = classify(CallEnd::Status { status, retry_after });
            return (result.map(|()| response), Some(verdict), Some(status));
        }
        Sent::NeverLeft => classify(CallEnd::NeverLeft),
        Sent::NoAnswer => classify(CallEnd::TimedOut { idempotent }),
        Sent::Lost => {
            let (result, verdict) = classify(CallEnd::TimedOut { idempotent });
            let result = result.map_err(|mut f| {
                f.code = "http.connection_lost".to_owned();
                f
            });
            (result, verdict)
        }
        Sent::CutByDeadline => return (Err(Failure::deadline_exceeded()), None, None),
        Sent::Defect(failure) => return (Err(failure), None, None),
    };
    // Without an answer there is no success: these endings are all failures.
    let failure = result.expect_err("only an answer succeeds");
    (Err(failure), Some(verdict), None)
}

/// One event a call: connection, method, path template, status, sends and,
/// when it failed, kind and code. Never a body, a header or the path sent.
fn log(req: &CallRequest, out: &CallOutcome, double: bool) {
    let method = method_name(req.method);
    match &out.result {
        Ok(_) => tracing::debug!(
            target: "jadpo::connection",
            connection = %req.connection,
            method,
            path = %req.path_template,
            status = out.status,
            sends = out.sends,
            double,
            "call answered"
        ),
        Err(failure) => tracing::info!(
            target: "jadpo::connection",
            connection = %req.connection,
            method,
            path = %req.path_template,
            status = out.status,
            sends = out.sends,
            double,
            kind = failure.kind.as_str(),
            code = %failure.code,
            "call failed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::resolve::HttpConnection;
    use crate::connection::Fake;
    use jadpo_lang::Method;

    fn request(path: &str) -> CallRequest {
        CallRequest {
            connection: "c".into(),
            method: Method::Post,
            path: path.into(),
            path_template: path.into(),
            body: Some(serde_json::json!({"n": 1})),
            idempotency_key: None,
            message_id: "msg_1_0".into(),
            trace: None,
            spans: Default::default(),
        }
    }

    fn http(base_url: &str) -> Endpoint {
        Endpoint::Http(HttpConnection {
            name: "c".into(),
            base_url: base_url.into(),
            headers: vec![],
            timeout: Duration::from_secs(1),
            attempts: 1,
            signing: None,
        })
    }

    /// An action's future is boxed at every run, copied whole, and holds
    /// the future of each call and publish it awaits: those hold no
    /// transport's own (the HTTP client's and the brokers' are boxed where
    /// awaited). Inline, the brokers' made every run of every action copy
    /// about 12 KB (docs/performance.md).
    #[test]
    fn a_calls_and_a_publishs_futures_hold_no_transports() {
        let app = jadpo_lang::check("app.jadpo", "").app.expect("an empty app checks");
        let connections = Connections::resolve(&app, |_| None).expect("nothing to resolve");
        let call = connections.call(request("/x"), Instant::now(), 0);
        let publish = connections.publish(
            crate::connection::broker::PublishRequest {
                connection: "c".into(),
                target: "t".into(),
                target_template: "t".into(),
                body: None,
                headers: Vec::new(),
                idempotency_key: None,
                message_id: "msg_1_0".into(),
                trace: None,
                spans: Default::default(),
            },
            Instant::now(),
            0,
        );
        let (call, publish) = (std::mem::size_of_val(&call), std::mem::size_of_val(&publish));
        // In a test build, about 1.9 and 1.5 KB; with the sends inline, 2.3
        // and 11.6 KB.
        assert!(call <= 4096, "a call's future is {call} bytes");
        assert!(publish <= 4096, "a publish's future is {publish} bytes");
    }

    #[test]
    fn a_real_call_is_prepared_with_its_whole_url_and_body_once() {
        let p = prepare(&request("/v1/pay%20ments?x=1"), &http("http://127.0.0.1:8080/api")).unwrap();
        let url = p.url.expect("parsed");
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/api/v1/pay%20ments?x=1");
        assert_eq!(p.body.as_deref(), Some(&b"{\"n\":1}"[..]));
    }

    #[test]
    fn a_path_without_a_leading_slash_is_refused_whatever_answers() {
        let fake = Endpoint::Double {
            broker: None,
            double: Fake::ok().into(),
            attempts: 1,
        };
        for endpoint in [http("http://127.0.0.1:8080"), fake] {
            let refused = prepare(&request("v1/payments"), &endpoint).err().expect("refused");
            assert_eq!(refused.code, "call.path_invalid");
            assert_eq!(refused.kind, FailureKind::InternalFault);
        }
    }

    fn decode(segment: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut bytes = segment.bytes();
        while let Some(b) = bytes.next() {
            if b == b'%' {
                let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                out.push(u8::from_str_radix(&hex, 16).expect("two hex digits"));
            } else {
                out.push(b);
            }
        }
        out
    }

    /// Arbitrary strings (Unicode, control characters), and the ones a path
    /// is attacked with: every spelling of a dot, slashes, `?` and `#`.
    fn hostile() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<String>(),
            "[./%2eE\\\t\n?#]{0,8}",
            prop::sample::select(vec![
                "", ".", "..", "%2e", "%2E%2e", ".%2E", "%252e", "/", "\\", "../..", "。"
            ])
            .prop_map(String::from),
        ]
    }

    proptest::proptest! {
        /// The URL a templated call is sent to: its path is the base URL's
        /// path and then exactly the template's segments, the parameter's
        /// decoding to its value; or, for a value that can't be one
        /// segment, nothing at all.
        #[test]
        fn a_parameter_stays_in_its_segment_under_the_base_url(value in hostile(), shape in 0..3usize) {
            use jadpo_lang::{PathPart, PathTemplate};
            let (lit, id) = (|s: &str| PathPart::Literal(s.into()), || PathPart::Param("id".into()));
            // The template, and the segments it sends: `None` the parameter's.
            let (parts, want): (_, &[Option<&str>]) = match shape {
                0 => (vec![lit("/payments/"), id(), lit("/record")], &[Some("payments"), None, Some("record")]),
                1 => (vec![lit("/"), id(), lit("/record")], &[None, Some("record")]),
                _ => (vec![lit("/"), id()], &[None]),
            };
            let template = PathTemplate::new(parts);
            let path = match crate::connection::render_path(&template, |_| Some(value.clone())) {
                Err(f) => {
                    proptest::prop_assert_eq!(f.code, "call.path_segment_invalid");
                    proptest::prop_assert_eq!(f.kind, FailureKind::InternalFault);
                    proptest::prop_assert!(matches!(value.as_str(), "" | "." | ".."));
                    return Ok(());
                }
                Ok(path) => path,
            };
            let prepared = prepare(&request(&path), &http("http://127.0.0.1:9/v1/tenants/acme")).expect("prepared");
            let url = prepared.url.expect("a URL");
            proptest::prop_assert!(url.path().starts_with("/v1/tenants/acme/"), "{}", url);
            proptest::prop_assert_eq!(url.query(), None);
            proptest::prop_assert_eq!(url.fragment(), None);
            let sent: Vec<&str> = url.path_segments().expect("a path").collect();
            proptest::prop_assert_eq!(&sent[..3], &["v1", "tenants", "acme"][..]);
            proptest::prop_assert_eq!(sent.len(), 3 + want.len(), "{}", url);
            for (sent, want) in sent[3..].iter().zip(want) {
                match want {
                    Some(literal) => proptest::prop_assert_eq!(sent, literal),
                    None => proptest::prop_assert_eq!(decode(sent), value.as_bytes()),
                }
            }
        }

        /// The parse a double's or a simulation's call skips is one that
        /// could not have failed.
        #[test]
        fn a_plainly_valid_path_is_one_the_url_parser_takes(path in "/[-._~!$&'()*+,;=/:@%a-zA-Z0-9]{0,40}") {
            proptest::prop_assert!(plainly_valid(&path));
            let url = format!("http://h{}", path);
            proptest::prop_assert!(url::Url::parse(&url).is_ok(), "{}", url);
        }
    }

    #[test]
    fn a_path_with_anything_else_is_left_to_the_parser() {
        for path in ["/a b", "/a?b", "/a#b", "/\\x", "/é", "/a\u{0}"] {
            assert!(!plainly_valid(path), "{path:?}");
        }
    }
}
