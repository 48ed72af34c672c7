//! Over real HTTP (reqwest) to the router on 127.0.0.1:0, a real SQLite
//! file and a real provider (`TestProvider`).

use super::*;
use jadpo_core::{Budget, CallVerdict, FailureRecord, Outcome, Timestamp};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_store::{ClaimRequest, DeliveryFilter, Finish, NewEvent, Route, Routes, Store};

const APP: &str = r#"
event RefundRequest { amount_cents: int  reason: string }
event RefundIssued { order_id: string  amount_cents: int }
connection payments { base_url: env("PAYMENTS_URL") }
action refund(order_id: string, cents: int) {
    call payments.post("/refunds/{order_id}", body: { amount_cents: cents })
    emit RefundIssued(order_id: order_id, amount_cents: cents)
}
action ping() { call payments.get("/ping") }
action record(id: string) { call payments.post("/ledger/{id}") }
subscriber ledger { on: RefundIssued  run: record(event.order_id) }
route refund_order {
    post: "/refunds/{order_id}"
    input: RefundRequest
    run: refund(path.order_id, input.amount_cents)
}
route cancel_order { delete: "/refunds/{order_id}"  run: ping() }
route ping { get: "/ping"  run: ping()  timeout: 1s }
"#;

/// The API tests' server over the routes' app, with the provider it calls
/// and the token it was started with.
struct Server {
    api: crate::api::tests::Server,
    provider: TestProvider,
    token: Option<String>,
}

impl std::ops::Deref for Server {
    type Target = crate::api::tests::Server;
    fn deref(&self) -> &Self::Target {
        &self.api
    }
}

impl Server {
    /// The API over a Jadpo whose `payments` is a real provider; its
    /// workers are not started, so nothing but the routes calls it.
    async fn start(token: Option<&str>) -> Server {
        let provider = TestProvider::start().await;
        let api = crate::api::tests::Server::start_app(APP, &provider, token).await;
        Server {
            api,
            provider,
            token: token.map(str::to_owned),
        }
    }

    /// Sends `method` to `/app{path}` with the server's token.
    async fn send(&self, method: &str, path: &str, body: &str) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method, format!("{}/app{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.unwrap();
        let (status, headers) = (r.status(), r.headers().clone());
        (status, headers, r.json().await.unwrap_or(Value::Null))
    }

    async fn deliveries(&self) -> Vec<jadpo_core::Delivery> {
        self.store.list(&DeliveryFilter::default()).await.unwrap()
    }
}

const REFUND: &str = r#"{"amount_cents": 250, "reason": "damaged"}"#;

#[test]
fn each_kind_answers_its_status() {
    let table = [
        (FailureKind::NotFound, 404),
        (FailureKind::Conflict, 409),
        (FailureKind::Rejected, 422),
        (FailureKind::Invalid, 422),
        (FailureKind::Unauthorized, 403),
        (FailureKind::RateLimited, 429),
        (FailureKind::Unavailable, 503),
        (FailureKind::OutcomeUnknown, 502),
        (FailureKind::DeadlineExceeded, 504),
        (FailureKind::InternalFault, 500),
        (FailureKind::LeaseExpired, 500),
        (FailureKind::Overflow, 500),
    ];
    assert_eq!(table.len(), FailureKind::ALL.len(), "every kind is in the table");
    for (kind, status) in table {
        assert_eq!(status_of(kind).as_u16(), status, "{kind}");
    }
    assert_eq!(retry_after_secs(Duration::from_secs(7)), 7);
    assert_eq!(retry_after_secs(Duration::from_millis(1_200)), 2);
}

#[test]
fn a_failure_answers_its_code_and_kind_never_its_fields() {
    let f = Failure::new("payments.declined", FailureKind::Rejected).with_field("card", "4242424242424242");
    let r = failed("refund_order", &f);
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.headers().get(header::RETRY_AFTER).is_none());
    let f = Failure::new("http.429", FailureKind::RateLimited).with_retry_after(Duration::from_millis(2_500));
    assert_eq!(failed("r", &f).headers()[header::RETRY_AFTER], "3");
}

#[tokio::test]
async fn a_down_provider_is_503_with_its_retry_after_and_never_touches_a_breaker() {
    let s = Server::start(None).await;
    s.provider.set(Behaviour::Unavailable { retry_after_s: 7 });
    for _ in 0..10 {
        let (status, headers, body) = s.send("POST", "/refunds/o1", REFUND).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(headers[header::RETRY_AFTER], "7");
        assert_eq!(body["error"]["code"], "http.503", "{body}");
        assert_eq!(body["error"]["kind"], "unavailable");
        assert!(body["error"]["message"].is_string());
        assert!(!body.to_string().contains("damaged"), "no input echoed: {body}");
    }
    assert_eq!(
        s.provider.calls(),
        10,
        "each request called once: Jadpo never retries a route"
    );
    for b in s.store.breakers().await.unwrap() {
        assert_eq!(
            (b.breaker.state, b.breaker.consecutive_unavailable, b.held),
            (jadpo_core::BreakerState::Closed, 0, 0),
            "{b:?}"
        );
    }
    assert!(s.deliveries().await.is_empty(), "no delivery made, none held");
}

#[tokio::test]
async fn a_success_is_200_and_the_path_parameter_and_input_reach_the_provider() {
    let s = Server::start(None).await;
    // `%2F` stays inside the parameter: `o/1`, encoded again in the call.
    let (status, _, body) = s.send("POST", "/refunds/o%2F1", REFUND).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));
    let requests = s.provider.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("POST", "/refunds/o%2F1")
    );
    assert_eq!(requests[0].json().unwrap(), json!({"amount_cents": 250}));
    // A route without `input:` ignores the body, JSON or not.
    let (status, _, body) = s.send("GET", "/ping", "not json at all").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));
    let (status, _, _) = s.send("DELETE", "/refunds/o1", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s.provider.calls(), 3);
}

/// A path parameter `.` or `..`, literal or percent-encoded, is refused
/// before the action runs: its call would have gone up the provider's path
/// (`/refunds/{order_id}` with `..` is `/`).
#[tokio::test]
async fn a_dot_segment_as_a_path_parameter_is_400_and_calls_nothing() {
    let s = Server::start(Some("s3cret")).await;
    for path in [
        "/refunds/..",
        "/refunds/.",
        "/refunds/%2E%2E",
        "/refunds/%2e",
        "/refunds/.%2E",
    ] {
        let (status, body) = s.raw("POST", path, REFUND).await;
        assert_eq!(status, 400, "{path}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "route.path_segment_invalid", "{path}");
    }
    assert_eq!(s.provider.calls(), 0, "nothing ran");
    // Dots inside an id, or more of them, keep it one segment.
    for (path, sent) in [("/refunds/...", "/refunds/..."), ("/refunds/%2E%2Ex", "/refunds/..x")] {
        assert_eq!(s.raw("POST", path, REFUND).await.0, 200, "{path}");
        assert_eq!(s.provider.requests().last().unwrap().path, sent);
    }
}

impl Server {
    /// Sends the request line as written, over a plain socket: a client
    /// library would remove its dot segments first. Returns the status
    /// and the body.
    async fn raw(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.base.trim_start_matches("http://");
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let token = self.token.as_deref().unwrap_or_default();
        let head = format!(
            "{method} /app{path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_owned())
    }
}

#[tokio::test]
async fn bad_input_unknown_paths_and_wrong_methods_are_refused_before_any_call() {
    let s = Server::start(None).await;
    let (status, _, body) = s
        .send("POST", "/refunds/o1", r#"{"amount_cents": "many", "reason": "r"}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "event.invalid");
    assert_eq!(body["error"]["field"], "amount_cents");
    let (status, _, body) = s
        .send(
            "POST",
            "/refunds/o1",
            r#"{"amount_cents": 1, "reason": "r", "card": "4242"}"#,
        )
        .await;
    assert_eq!(
        (status, &body["error"]["field"]),
        (StatusCode::BAD_REQUEST, &json!("card"))
    );
    assert!(!body.to_string().contains("4242"), "{body}");
    let (status, _, body) = s.send("POST", "/refunds/o1", "{not json").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("event.invalid"))
    );
    let (status, _, body) = s.send("POST", "/refunds/o1", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an empty body is not JSON: {body}");

    let (status, _, body) = s.send("GET", "/nope", "").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("route.not_found"))
    );
    let (status, _, body) = s.send("GET", "/refunds/o1/x", "").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("route.not_found"))
    );
    let (status, _, body) = s.send("GET", "/", "").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("route.not_found"))
    );

    for method in ["GET", "PUT", "PATCH"] {
        let (status, headers, body) = s.send(method, "/refunds/o1", REFUND).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method}: {body}");
        assert_eq!(body["error"]["code"], "route.method_not_allowed");
        assert_eq!(headers[header::ALLOW], "DELETE, POST");
    }
    assert_eq!(s.provider.calls(), 0, "nothing ran");
}

#[tokio::test]
async fn the_token_is_required() {
    let s = Server::start(Some("s3cret")).await;
    let r = s
        .client
        .post(format!("{}/app/refunds/o1", s.base))
        .body(REFUND)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "api.unauthorized");
    let r = s
        .client
        .get(format!("{}/app/nope", s.base))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "an unknown path is hidden too");
    assert_eq!(s.provider.calls(), 0);
    let (status, _, body) = s.send("POST", "/refunds/o1", REFUND).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));
}

#[tokio::test]
async fn emits_are_written_after_a_success_and_never_after_a_failure() {
    let s = Server::start(None).await;
    s.provider.set(Behaviour::Down);
    let (status, _, _) = s.send("POST", "/refunds/o1", REFUND).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(s.deliveries().await.is_empty(), "a failed route emits nothing");

    s.provider.set(Behaviour::Up);
    let (status, _, _) = s.send("POST", "/refunds/o2", REFUND).await;
    assert_eq!(status, StatusCode::OK);
    let list = s.deliveries().await;
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].subscriber, "ledger");
    let event = s.store.event(list[0].event_id).await.unwrap().unwrap();
    assert_eq!(event.name, "RefundIssued");
    let payload: Value = serde_json::from_str(&event.payload).unwrap();
    assert_eq!(payload, json!({"order_id": "o2", "amount_cents": 250}));
    // A new chain: the emitted event is 0 deep.
    let claimed = s.claim(1).await;
    assert_eq!(claimed[0].event_depth, 0);
}

#[tokio::test]
async fn a_route_past_its_timeout_is_504() {
    let s = Server::start(None).await;
    s.provider.set(Behaviour::Slow(Duration::from_secs(5)));
    let started = Instant::now();
    let (status, headers, body) = s.send("GET", "/ping", "").await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(body["error"]["kind"], "deadline_exceeded");
    assert!(headers.get(header::RETRY_AFTER).is_none());
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "answered at the 1s timeout, not the provider's 5s: {took:?}"
    );
}

#[tokio::test]
async fn a_route_runs_while_its_connections_breaker_is_open() {
    let s = Server::start(None).await;
    s.open_breaker().await;
    let open = s.store.breakers().await.unwrap();
    assert!(
        open.iter()
            .any(|b| b.breaker.connection == "payments" && b.breaker.state != jadpo_core::BreakerState::Closed),
        "{open:?}"
    );
    let (status, _, body) = s.send("GET", "/ping", "").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"ok": true})));
    assert_eq!(s.provider.calls(), 1, "the call was made, not held");
}

impl Server {
    fn routes() -> Routes {
        let mut routes = Routes::new();
        routes.insert(
            "ledger",
            Route {
                budget: Budget::DEFAULT,
                connections: vec!["payments".into()],
            },
        );
        routes
    }

    async fn claim(&self, limit: usize) -> Vec<jadpo_store::Claimed> {
        let now = Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
        self.store
            .claim(&ClaimRequest {
                worker: "t",
                routes: &Server::routes(),
                now,
                limit,
                lease: Duration::from_secs(60),
            })
            .await
            .unwrap()
            .claimed
    }

    /// Opens `payments`' breaker as the workers would: `ledger`
    /// deliveries whose calls found it unavailable, five in a row.
    async fn open_breaker(&self) {
        let now = Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
        let event = NewEvent {
            name: "RefundIssued".into(),
            payload: r#"{"order_id":"o","amount_cents":1}"#.into(),
            subscribers: vec!["ledger".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        };
        self.store.emit(&vec![event; 5], now).await.unwrap();
        for c in self.claim(5).await {
            self.store
                .finish(&Finish {
                    calls: vec![("payments".into(), CallVerdict::Unavailable)],
                    claimed: None,
                    ..c.finish(
                        Outcome::Retry {
                            at: now.plus(Duration::from_secs(3_600)),
                            failure: FailureRecord::new("http.503", FailureKind::Unavailable),
                        },
                        now,
                        now,
                    )
                })
                .await
                .unwrap();
        }
    }
}

/// What a route emits joins the trace of the request that ran it, and its
/// calls carry that trace on.
#[tokio::test]
async fn a_routes_emits_and_calls_join_its_callers_trace() {
    let s = Server::start(None).await;
    s.provider.set(Behaviour::Up);
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = s
        .client
        .post(format!("{}/app/refunds/o3", s.base))
        .header("content-type", "application/json")
        .header("traceparent", traceparent)
        .body(REFUND)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let list = s.deliveries().await;
    let event = s.store.event(list[0].event_id).await.unwrap().unwrap();
    assert_eq!(event.trace.as_ref().map(|t| t.traceparent()), Some(traceparent));
    let called = s.provider.requests();
    let sent = called[0].header("traceparent").expect("the call carries the trace");
    assert!(
        sent.contains("4bf92f3577b34da6a3ce929d0e0e4736") && sent != traceparent,
        "{sent}"
    );
}
