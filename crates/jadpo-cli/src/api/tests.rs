//! The API over real HTTP (reqwest) to the router served on 127.0.0.1:0,
//! on a real SQLite file.

use crate::http::router;
use crate::http::server::{Limits, Serving};
use jadpo_core::{Budget, DeliveryId, FailureKind, FailureRecord, Outcome, Timestamp};
use jadpo_runtime::provider::TestProvider;
use jadpo_store::sqlite::SqliteStore;
use jadpo_store::{ClaimRequest, Finish, NewEvent, Route, Routes, Store};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

/// A Jadpo on a new SQLite file in `dir` whose `PAYMENTS_URL` is
/// `provider`'s: the app's calls reach a real local provider.
pub(crate) async fn with_payments(
    app: &str,
    dir: &std::path::Path,
    provider: &jadpo_runtime::provider::TestProvider,
) -> (jadpo::Jadpo<SqliteStore>, SqliteStore) {
    let url = format!("sqlite:{}", dir.join("jadpo.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    let provider_url = provider.url();
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", app)
        .unwrap()
        .env(move |k| (k == "PAYMENTS_URL").then(|| provider_url.clone()))
        .build(store.clone())
        .await
        .unwrap();
    (jadpo, store)
}

pub(crate) const APP: &str = r#"
event PaymentReceived { payment_id: string  amount_cents: int }
connection payments { base_url: env("PAYMENTS_URL") }
connection mailer { base_url: "http://127.0.0.1:9" }
action record_payment(payment_id: string) { call payments.post("/p/{payment_id}", body: event) }
action notify(id: string) uses mailer
subscriber record { on: PaymentReceived  run: record_payment(event.payment_id) }
subscriber audit { on: PaymentReceived  run: notify(event.payment_id) }
"#;

pub(crate) struct Server {
    pub base: String,
    pub client: reqwest::Client,
    pub store: SqliteStore,
    dir: tempfile::TempDir,
    _serving: Serving,
}

impl Server {
    pub(crate) async fn start(token: Option<&str>) -> Server {
        Server::start_on(token, true).await
    }

    /// As `start`, saying whether the server is bound to loopback only.
    pub(crate) async fn start_on(token: Option<&str>, loopback: bool) -> Server {
        Server::start_with(APP, token, loopback, None).await
    }

    /// As `start`, on a store that keeps a scaled clock at `scale`, as
    /// after a `jadpo dev --time-scale` on it.
    pub(crate) async fn start_scaled(token: Option<&str>, scale: u32) -> Server {
        Server::start_with(APP, token, true, Some(scale)).await
    }

    pub(crate) async fn start_with(app: &str, token: Option<&str>, loopback: bool, scale: Option<u32>) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
        let store = SqliteStore::open(&url).await.unwrap();
        if let Some(scale) = scale {
            let now = Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
            store
                .keep_clock_anchor(jadpo_core::clock::Anchor::first(scale, now))
                .await
                .unwrap();
        }
        let app = jadpo::check_app("app.jadpo", app).unwrap();
        let jadpo = crate::operator::jadpo(app, store.clone()).await.unwrap();
        Server::serve(jadpo, store, dir, token, loopback).await
    }

    /// The API over `app` on a new store, whose `PAYMENTS_URL` is
    /// `provider`'s; its workers are not started.
    pub(crate) async fn start_app(app: &str, provider: &TestProvider, token: Option<&str>) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let (jadpo, store) = with_payments(app, dir.path(), provider).await;
        Server::serve(jadpo, store, dir, token, true).await
    }

    async fn serve(
        jadpo: jadpo::Jadpo<SqliteStore>,
        store: SqliteStore,
        dir: tempfile::TempDir,
        token: Option<&str>,
        loopback: bool,
    ) -> Server {
        let serving = Serving::start(router(jadpo, token.map(str::to_owned), loopback), Limits::default()).await;
        Server {
            base: format!("http://{}", serving.addr),
            client: reqwest::Client::new(),
            store,
            dir,
            _serving: serving,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn post(&self, path: &str, body: &str) -> (StatusCode, Value) {
        self.post_with(path, body, &[]).await
    }

    pub(crate) async fn post_with(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> (StatusCode, Value) {
        let mut request = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_owned());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let r = request.send().await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// One `audit` delivery, claimed and finished as `outcome`.
    pub(crate) async fn finished(&self, outcome: Outcome) -> DeliveryId {
        self.finished_with_key(outcome, None).await
    }

    /// As [`Server::finished`], the delivery keyed `key`.
    pub(crate) async fn finished_with_key(&self, outcome: Outcome, key: Option<&str>) -> DeliveryId {
        let now = Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
        self.store
            .emit(
                &[NewEvent {
                    name: "PaymentReceived".into(),
                    payload: r#"{"payment_id":"p","amount_cents":1}"#.into(),
                    subscribers: vec!["audit".into()],
                    idempotency_key: None,
                    trace: None,
                    keys: key
                        .map(|k| {
                            let k = jadpo_core::key::Key::new(jadpo_core::key::KeyValue::Str(k)).unwrap();
                            [("audit".to_string(), k.into())].into()
                        })
                        .unwrap_or_default(),
                }],
                now,
            )
            .await
            .unwrap();
        let mut routes = Routes::new();
        routes.insert(
            "audit",
            Route {
                budget: Budget::DEFAULT,
                connections: vec!["mailer".into()],
            },
        );
        let claimed = self
            .store
            .claim(&ClaimRequest {
                worker: "t",
                routes: &routes,
                now,
                limit: 10,
                lease: Duration::from_secs(60),
            })
            .await
            .unwrap()
            .claimed;
        assert_eq!(claimed.len(), 1);
        let c = &claimed[0];
        self.store
            .finish(&Finish {
                claimed: None,
                ..c.finish(outcome, now, now)
            })
            .await
            .unwrap();
        c.delivery.id
    }
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("an error body: {body}"))
}

#[tokio::test]
async fn emit_answers_202_with_the_event_and_its_deliveries() {
    let s = Server::start(None).await;
    let (status, body) = s
        .post(
            "/events/PaymentReceived",
            r#"{"payment_id": "p1", "amount_cents": 100}"#,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["event_id"], 1);
    assert_eq!(body["deliveries"], 2);
    // The public id: a UUIDv7 (version nibble 7), unique across stores.
    let public_id = body["public_id"].as_str().unwrap();
    assert_eq!((public_id.len(), &public_id[14..15]), (36, "7"), "{public_id}");
    let (_, list) = s.get("/deliveries").await;
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert!(list[0]["event"] == "PaymentReceived" && list[0]["state"] == "due");
}

#[tokio::test]
async fn an_invalid_event_is_400_naming_its_field() {
    let s = Server::start(None).await;
    for (payload, field) in [
        (r#"{"payment_id": "p1"}"#, "amount_cents"),
        (r#"{"payment_id": "p1", "amount_cents": "many"}"#, "amount_cents"),
        (
            r#"{"payment_id": "p1", "amount_cents": 1, "secret_note": "x"}"#,
            "secret_note",
        ),
        // Above i64::MAX: an `int` is 64-bit signed.
        (
            r#"{"payment_id": "p1", "amount_cents": 18446744073709551615}"#,
            "amount_cents",
        ),
        (
            r#"{"payment_id": "p1", "amount_cents": 9223372036854775808}"#,
            "amount_cents",
        ),
    ] {
        let (status, body) = s.post("/events/PaymentReceived", payload).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error_code(&body), "event.invalid");
        assert_eq!(body["error"]["field"], field);
        assert!(body["error"]["message"].is_string());
        assert!(!body.to_string().contains("p1"), "the payload is not echoed: {body}");
    }
    let (status, body) = s.post("/events/PaymentReceived", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "event.invalid");
    let (_, list) = s.get("/deliveries").await;
    assert_eq!(list, json!([]), "nothing was written");
}

#[tokio::test]
async fn an_unknown_event_is_404() {
    let s = Server::start(None).await;
    let (status, body) = s.post("/events/Refund", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "event.unknown");
    let (status, body) = s.get("/no/such/route").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "api.not_found");
    let (status, body) = s.get("/events/PaymentReceived").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_code(&body), "api.method_not_allowed");
}

#[tokio::test]
async fn a_payload_over_the_limit_is_413() {
    let s = Server::start(None).await;
    let limit = jadpo_runtime::emit::MAX_PAYLOAD_BYTES;
    let big = format!(r#"{{"payment_id": "{}", "amount_cents": 1}}"#, "x".repeat(limit + 1));
    let (status, body) = s.post("/events/PaymentReceived", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&body), "event.too_large");
    // Sent without a length, in chunks, over a plain socket.
    let status = chunked_post(&s.base, "/events/PaymentReceived", big.as_bytes()).await;
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    // Just under the limit is accepted.
    let fits = format!(r#"{{"payment_id": "{}", "amount_cents": 1}}"#, "x".repeat(limit - 64));
    let (status, _) = s.post("/events/PaymentReceived", &fits).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

/// POSTs `body` with `Transfer-Encoding: chunked`; returns the status line.
async fn chunked_post(base: &str, path: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(8192) {
        // The server may answer and close before the whole body is sent.
        if tcp
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .is_err()
            || tcp.write_all(chunk).await.is_err()
            || tcp.write_all(b"\r\n").await.is_err()
        {
            break;
        }
    }
    let _ = tcp.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).lines().next().unwrap_or("").to_owned()
}

#[tokio::test]
async fn the_token_is_required_when_set() {
    let s = Server::start(Some("s3cret-token")).await;
    let emit = |auth: Option<&str>| {
        let mut r = s
            .client
            .post(s.url("/events/PaymentReceived"))
            .header("content-type", "application/json")
            .body(r#"{"payment_id": "p1", "amount_cents": 100}"#);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    let r = emit(None).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let body: Value = r.json().await.unwrap();
    assert_eq!(error_code(&body), "api.unauthorized");
    for wrong in [
        "Bearer nope",
        "Bearer s3cret-toke",
        "Bearer s3cret-token-and-more",
        "Basic s3cret-token",
        "s3cret-token",
    ] {
        let r = emit(Some(wrong)).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{wrong}");
        let body = r.text().await.unwrap();
        assert!(!body.contains("s3cret"), "the token is never echoed: {body}");
    }
    // The scheme in any case (RFC 9110, 11.1).
    for right in [
        "Bearer s3cret-token",
        "bearer s3cret-token",
        "BEARER s3cret-token",
        "bEaReR s3cret-token",
    ] {
        assert_eq!(
            emit(Some(right)).await.unwrap().status(),
            StatusCode::ACCEPTED,
            "{right}"
        );
    }
    for path in ["/deliveries", "/deliveries/1", "/breakers", "/metrics"] {
        let (status, _) = s.get(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let r = s
            .client
            .get(s.url(path))
            .bearer_auth("s3cret-token")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let (status, _) = s.post("/deliveries/1/retry", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Health checks need no token.
    assert_eq!(s.get("/healthz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn without_a_token_everything_is_open() {
    let s = Server::start(None).await;
    let (status, _) = s.get("/breakers").await;
    assert_eq!(status, StatusCode::OK);
}

/// A keyed subscriber's deliveries carry their key and are found by it;
/// an emit whose key cannot be one is refused, naming the field.
#[tokio::test]
async fn deliveries_are_found_by_their_key() {
    let app = APP.replace(
        "run: notify(event.payment_id) }",
        "run: notify(event.payment_id)  key: event.payment_id }",
    );
    let s = Server::start_with(&app, None, true, None).await;
    for id in ["p-1", "p-2", "p-1"] {
        let body = format!(r#"{{"payment_id": "{id}", "amount_cents": 5}}"#);
        assert_eq!(s.post("/events/PaymentReceived", &body).await.0, StatusCode::ACCEPTED);
    }
    let (status, list) = s.get("/deliveries?key=p-1").await;
    assert_eq!(status, StatusCode::OK);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "audit's two deliveries of p-1: {list:?}");
    assert!(list.iter().all(|d| d["key"] == "p-1" && d["subscriber"] == "audit"));
    assert!(list[0]["id"].as_i64() > list[1]["id"].as_i64(), "newest first");
    let record = s.get("/deliveries?subscriber=record&limit=1").await.1;
    assert_eq!(record[0]["key"], Value::Null, "an unkeyed subscriber's has none");
    let (status, one) = s.get(&format!("/deliveries/{}", list[0]["id"])).await;
    assert_eq!((status, &one["key"]), (StatusCode::OK, &json!("p-1")));
    let (status, body) = s
        .post("/events/PaymentReceived", r#"{"payment_id": "", "amount_cents": 5}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_code(&body), "event.key_invalid");
    assert_eq!(body["error"]["field"], "payment_id");
    assert_eq!(s.get("/deliveries?key=").await.1, json!([]));
}

#[tokio::test]
async fn deliveries_filter_and_show_one_with_its_history() {
    let s = Server::start(None).await;
    let failed = s
        .finished(Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)))
        .await;
    s.finished(Outcome::Succeeded).await;
    let (status, list) = s.get("/deliveries?state=failed").await;
    assert_eq!(status, StatusCode::OK);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], failed.0);
    assert_eq!(list[0]["last_failure_code"], "http.400");
    assert_eq!(list[0]["last_failure_kind"], "rejected");
    assert_eq!(
        s.get("/deliveries?subscriber=audit&limit=1")
            .await
            .1
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        s.get("/deliveries?connection=mailer").await.1.as_array().unwrap().len(),
        2
    );
    assert_eq!(s.get("/deliveries?connection=payments").await.1, json!([]));
    // The next page: older than the newest one listed.
    let all = s.get("/deliveries").await.1;
    let newest = all[0]["id"].as_i64().unwrap();
    let older = s.get(&format!("/deliveries?before={newest}")).await.1;
    assert_eq!(older.as_array().unwrap().len(), all.as_array().unwrap().len() - 1);
    assert!(older
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["id"].as_i64().unwrap() < newest));
    for bad in [
        "/deliveries?state=sleeping",
        "/deliveries?limit=0",
        "/deliveries?event=x",
        "/deliveries?before=x",
        "/deliveries?colour=red",
        // Which one was meant? Not the last one, silently.
        "/deliveries?state=held&state=failed",
        "/deliveries?limit=1&limit=1",
        "/deliveries?store=default&store=default",
    ] {
        let (status, body) = s.get(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(error_code(&body), "query.invalid");
    }

    let (status, one) = s.get(&format!("/deliveries/{failed}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["state"], "failed");
    assert_eq!(one["history"][0]["code"], "http.400");
    assert_eq!(one["history"][0]["kind"], "rejected");
    // The same JSON as the command line.
    assert_eq!(one["event"], "PaymentReceived");
    for path in ["/deliveries/9999", "/deliveries/abc"] {
        let (status, body) = s.get(path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(error_code(&body), "delivery.not_found");
    }
}

#[tokio::test]
async fn retry_gives_a_failed_delivery_a_fresh_budget() {
    let s = Server::start(None).await;
    let failed = s
        .finished(Outcome::Parked(FailureRecord::new(
            "http.timeout",
            FailureKind::OutcomeUnknown,
        )))
        .await;
    let (status, body) = s.post(&format!("/deliveries/{failed}/retry"), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "due");
    assert_eq!(body["attempts"], 0);
    assert!(body["due_at"].is_string());
    let (status, body) = s.post(&format!("/deliveries/{failed}/retry"), "").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "delivery.not_retryable");
    let (status, body) = s.post("/deliveries/9999/retry", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "delivery.not_found");
}

#[tokio::test]
async fn skip_records_who_skipped_a_failed_delivery_and_calls_nothing() {
    let s = Server::start(None).await;
    let parked = s
        .finished(Outcome::Parked(FailureRecord::new(
            "http.timeout",
            FailureKind::OutcomeUnknown,
        )))
        .await;
    for (query, why) in [
        ("?by=", "an empty name"),
        ("?by=a%0Ab", "a control character"),
        ("?who=ana", "an unknown parameter"),
    ] {
        let (status, body) = s.post(&format!("/deliveries/{parked}/skip{query}"), "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{why}: {body}");
        assert_eq!(error_code(&body), "query.invalid", "{why}");
    }
    let other = s
        .finished(Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)))
        .await;
    let (status, body) = s.post(&format!("/deliveries/{parked}/skip?by=ana"), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "parked", "it keeps its state");
    assert_eq!(body["skipped_by"], "ana");
    assert!(body["skipped_at"].is_string());
    assert_eq!(body["last_failure_code"], "http.timeout");
    assert_eq!(body["history"].as_array().unwrap().len(), 1, "nothing was called");
    let (status, body) = s.post(&format!("/deliveries/{parked}/skip"), "").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "delivery.not_skippable");
    assert!(body["error"]["message"].as_str().unwrap().contains("by ana"), "{body}");
    let (_, emitted) = s
        .post(
            "/events/PaymentReceived",
            r#"{"payment_id": "p9", "amount_cents": 100}"#,
        )
        .await;
    let due = &emitted["delivery_ids"][0];
    let (status, body) = s.post(&format!("/deliveries/{due}/skip"), "").await;
    assert_eq!(status, StatusCode::CONFLICT, "a due delivery is not skipped");
    assert_eq!(error_code(&body), "delivery.not_skippable");
    let (status, body) = s.post(&format!("/deliveries/{other}/skip"), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["skipped_by"], "api", "the surface, when no name is given");
    let (status, body) = s.post("/deliveries/9999/skip", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_code(&body), "delivery.not_found");
}

#[tokio::test]
async fn breakers_list_every_connection_of_the_app() {
    let s = Server::start(None).await;
    let (status, list) = s.get("/breakers").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["connection"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mailer", "payments"]);
    assert_eq!(list[0]["state"], "closed");
    assert_eq!(list[0]["held"], 0);
    assert_eq!(list[0]["pause_ms"], 0);
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_the_store_gauges() {
    let s = Server::start(None).await;
    s.finished(Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)))
        .await;
    s.post(
        "/events/PaymentReceived",
        r#"{"payment_id": "p1", "amount_cents": 100}"#,
    )
    .await;
    let r = s.client.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = r.text().await.unwrap();
    for line in [
        "jadpo_deliveries{state=\"failed\"} 1",
        "jadpo_deliveries{state=\"due\"} 2",
        "jadpo_deliveries{state=\"held\"} 0",
        "jadpo_breaker_state{connection=\"payments\",state=\"closed\"} 1",
        "jadpo_breaker_state{connection=\"payments\",state=\"open\"} 0",
        "jadpo_breaker_held{connection=\"mailer\"} 0",
        "jadpo_held 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // Every sample line is `name{labels} number`.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = l.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{l}");
    }
}

#[tokio::test]
async fn healthz_is_503_when_the_store_does_not_answer() {
    let s = Server::start(None).await;
    let (status, body) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    // The file is no longer a database.
    let path = s.dir.path().join("jadpo.db");
    for suffix in ["", "-wal", "-shm"] {
        let p = format!("{}{suffix}", path.display());
        if std::path::Path::new(&p).exists() {
            std::fs::write(&p, vec![b'x'; 8192]).unwrap();
        }
    }
    let (status, body) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(error_code(&body), "store.unavailable");
}

/// A client that sends again under its `Idempotency-Key` gets the first
/// event back (200, `duplicate`), and nothing more is made; the key with
/// another payload is 409.
#[tokio::test]
async fn emit_with_an_idempotency_key_makes_one_event() {
    let s = Server::start(None).await;
    let body = r#"{"payment_id": "p1", "amount_cents": 100}"#;
    let key = [("Idempotency-Key", "order-1")];
    let (status, first) = s.post_with("/events/PaymentReceived", body, &key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first.get("duplicate"), None);
    let (status, again) = s.post_with("/events/PaymentReceived", body, &key).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    let mut expected = first.clone();
    expected["duplicate"] = json!(true);
    assert_eq!(again, expected);
    let (status, refused) = s
        .post_with(
            "/events/PaymentReceived",
            r#"{"payment_id": "p1", "amount_cents": 999}"#,
            &key,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(error_code(&refused), "event.idempotency_conflict");
    let long = "k".repeat(256);
    let (status, refused) = s
        .post_with("/events/PaymentReceived", body, &[("Idempotency-Key", long.as_str())])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(error_code(&refused), "event.idempotency_key_invalid");
    let (_, list) = s.get("/deliveries").await;
    assert_eq!(list.as_array().unwrap().len(), 2, "one event's two deliveries");
}

#[tokio::test]
async fn alerts_list_what_the_store_raised_newest_first() {
    use jadpo_store::conformance::{at, open_breaker, LEASE};
    let s = Server::start(None).await;
    let (status, list) = s.get("/alerts").await;
    assert_eq!((status, list), (StatusCode::OK, json!([])));
    open_breaker(&s.store, 0).await;
    let raised = s.store.sweep(at(1), LEASE).await.unwrap().alerts;
    assert_eq!(raised.len(), 1);
    let (status, list) = s.get("/alerts").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["alert"], "connection_unavailable");
    assert_eq!(list[0]["connection"], "payments");
    assert_eq!(list[0]["status"], "raised");
    assert_eq!(list[0]["event"], "delivery.alert");
    assert_eq!(list[0]["send"]["state"], "unsent", "no route in this app");
    assert!(
        list[0]["raised_at"].is_string() && list[0]["since"].is_string() && list[0]["id"].is_string(),
        "{list}"
    );
}

#[tokio::test]
async fn breakers_show_each_connections_limits_tokens_slots_and_pause() {
    use jadpo_core::limit::Rate;
    use jadpo_store::SharedMemoryStore;
    let app = jadpo::check_app(
        "app.jadpo",
        r#"
event E { id: string }
connection pay { base_url: "http://127.0.0.1:9"  rate: 10/s  concurrency: 2 }
connection free { base_url: "http://127.0.0.1:9" }
action a(id: string) { call pay.post("/x", body: event) }
subscriber s { on: E  run: a(event.id) }
"#,
    )
    .unwrap();
    let store = SharedMemoryStore::new(jadpo_core::BreakerPolicy::DEFAULT);
    let now = Timestamp::from_millis(1_700_000_000_000);
    let limits = crate::views::limits(&store, Some(&app), now).await.unwrap();
    assert_eq!(
        limits["pay"],
        json!({"rate": "10/s", "concurrency": 2, "tokens": 1, "slots_in_use": 0, "waiting": 0,
               "paused_until": null, "slowed_until": null})
    );
    assert!(!limits.contains_key("free"), "no limits, no state");
    assert_eq!(
        crate::views::rate_text(&Rate::new(600, Duration::from_secs(60)).unwrap()),
        "600/min"
    );
    let list = crate::views::breakers(&store, Some(&app)).await.unwrap();
    let json = crate::views::breakers_with_limits_json(&list, &limits);
    let by_name = |n: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|b| b["connection"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("pay")["limits"]["rate"], "10/s");
    assert_eq!(by_name("free")["limits"], Value::Null);
    let process = super::metrics::ProcessPart {
        claims: Default::default(),
        timings: Default::default(),
        counted: &[""],
    };
    let text = super::metrics::render(&store, &app, now, &process).await.unwrap();
    for line in [
        "jadpo_connection_tokens{connection=\"pay\"} 1",
        "jadpo_connection_slots_in_use{connection=\"pay\"} 0",
        "jadpo_connection_waiting{connection=\"pay\"} 0",
        "jadpo_connection_paused{connection=\"pay\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }

    // Three deliveries at once: the bucket's one token lets one run, and
    // the queue behind `pay` is the other two.
    let events: Vec<NewEvent> = (0..3)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!(r#"{{"id":"{i}"}}"#),
            subscribers: vec!["s".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    store.emit(&events, now).await.unwrap();
    let mut routes = Routes::new();
    routes.insert(
        "s",
        Route {
            budget: Budget::DEFAULT,
            connections: vec!["pay".into()],
        },
    );
    routes.limit("pay", app.connections["pay"].limits());
    let r = store
        .claim(&ClaimRequest {
            worker: "w",
            routes: &routes,
            now,
            limit: 10,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!((r.claimed.len(), r.waiting.len()), (1, 2));
    let limits = crate::views::limits(&store, Some(&app), now).await.unwrap();
    assert_eq!(
        (
            &limits["pay"]["tokens"],
            &limits["pay"]["slots_in_use"],
            &limits["pay"]["waiting"]
        ),
        (&json!(0), &json!(1), &json!(2))
    );
    let process = super::metrics::ProcessPart {
        claims: Default::default(),
        timings: Default::default(),
        counted: &[""],
    };
    let text = super::metrics::render(&store, &app, now, &process).await.unwrap();
    assert!(
        text.lines()
            .any(|l| l == "jadpo_connection_waiting{connection=\"pay\"} 2"),
        "{text}"
    );
}

/// Two stores behind one API: an emit goes to its event's store, and the
/// reading routes read the store `?store=` names.
#[tokio::test]
async fn an_app_with_two_stores_is_served_whole() {
    const TWO: &str = r#"
store main  { url: "sqlite:main.db" }
store audit { url: "sqlite:audit.db" }
event Paid { id: string }
event Audited in audit { id: string }
action noop(id: string) uses mailer
connection mailer { base_url: "http://127.0.0.1:9" }
subscriber paid { on: Paid  run: noop(event.id) }
subscriber audited { on: Audited  run: noop(event.id) }
"#;
    let dir = tempfile::tempdir().unwrap();
    let app = jadpo::check_app("app.jadpo", TWO).unwrap();
    let mut stores = Vec::new();
    for name in ["main", "audit"] {
        let url = format!("sqlite:{}", dir.path().join(format!("{name}.db")).display());
        let store = SqliteStore::open(&url).await.unwrap();
        let jadpo = crate::operator::jadpo(app.clone(), store).await.unwrap();
        stores.push((name.to_owned(), jadpo));
    }
    let (main, audit) = (stores[0].1.store().clone(), stores[1].1.store().clone());
    let serving = Serving::start(
        crate::http::router_of_stores(stores, None, true, &Limits::default()),
        Limits::default(),
    )
    .await;
    let base = format!("http://{}", serving.addr);
    let client = reqwest::Client::new();
    let post = |path: &'static str| {
        client
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(r#"{"id":"x"}"#)
            .send()
    };
    assert_eq!(post("/events/Audited").await.unwrap().status(), StatusCode::ACCEPTED);
    assert_eq!(post("/events/Paid").await.unwrap().status(), StatusCode::ACCEPTED);
    assert_eq!(post("/events/Paid").await.unwrap().status(), StatusCode::ACCEPTED);
    assert_eq!(
        audit.list(&Default::default()).await.unwrap().len(),
        1,
        "Audited lives in audit"
    );
    assert_eq!(main.list(&Default::default()).await.unwrap().len(), 2);
    let count = |path: &'static str| {
        let client = client.clone();
        let url = format!("{base}{path}");
        async move {
            let r = client.get(url).send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, list) = count("/deliveries?store=audit").await;
    assert_eq!((status, list.as_array().unwrap().len()), (StatusCode::OK, 1));
    assert_eq!(list[0]["event"], "Audited");
    let (_, list) = count("/deliveries").await;
    assert_eq!(list.as_array().unwrap().len(), 2, "the first store by default");
    let (status, body) = count("/breakers?store=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "store.unknown");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("main, audit"),
        "{body}"
    );
    let (status, _) = count("/deliveries?store=main&state=due").await;
    assert_eq!(status, StatusCode::OK, "`store` is not a filter the list refuses");
}
