//! The edge as an attacker meets it, over real sockets to the server on
//! 127.0.0.1:0 (a real SQLite file, a real provider): foreign `Host` and
//! `Origin` without a token, bodies that are not JSON, and clients that are
//! slow, silent, idle or too many (docs/security.md).
//!
//! The server's own limits are real time, so these tests set them short and
//! wait for what must happen with a generous bound; where a test shows that
//! something did *not* happen yet, a slow machine can only make it pass
//! for the right reason.

use super::server::{Limits, Serving};
use jadpo_runtime::provider::TestProvider;
use jadpo_store::sqlite::SqliteStore;
use jadpo_store::{DeliveryFilter, Store};
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const APP: &str = r#"
event Pay { id: string }
connection payments { base_url: env("PAYMENTS_URL") }
action record(id: string) { call payments.post("/ledger/{id}") }
subscriber audit { on: Pay  run: record(event.id) }
route refund { post: "/refunds/{id}"  run: record(path.id) }
"#;

/// What a test can wait for; never a backoff, only the server's answer.
const BOUND: Duration = Duration::from_secs(20);

struct Edge {
    addr: String,
    store: SqliteStore,
    provider: TestProvider,
    _dir: tempfile::TempDir,
    serving: Serving,
}

impl Edge {
    async fn start(token: Option<&str>, limits: Limits) -> Edge {
        let provider = TestProvider::start().await;
        let dir = tempfile::tempdir().unwrap();
        let (jadpo, store) = crate::api::tests::with_payments(APP, dir.path(), &provider).await;
        let router = super::router_of_stores(vec![("default".into(), jadpo)], token.map(str::to_owned), true, &limits);
        let serving = Serving::start(router, limits).await;
        Edge {
            addr: serving.addr.to_string(),
            store,
            provider,
            _dir: dir,
            serving,
        }
    }

    async fn events(&self) -> usize {
        self.store.list(&DeliveryFilter::default()).await.unwrap().len()
    }

    /// Sends `head` (request line and headers, without the blank line) and
    /// `body`; the status and the error code of the answer.
    async fn send(&self, head: &str, body: &str) -> (u16, String) {
        self.send_from("127.0.0.1", head, body).await
    }

    /// As [`Edge::send`], from the loopback address `from` (127.0.0.0/8 is
    /// all this machine's): another client, as the server counts them.
    async fn send_from(&self, from: &str, head: &str, body: &str) -> (u16, String) {
        answer(&mut self.request_from(from, head, body).await).await
    }

    /// The socket `head` and `body` were sent on from `from`, its answer
    /// still to read.
    async fn request_from(&self, from: &str, head: &str, body: &str) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let mut s = socket.connect(self.addr.parse().unwrap()).await.unwrap();
        let request = format!(
            "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        s
    }
}

/// Reads an answer to its end (the server closes); its status and error
/// code.
async fn answer(s: &mut TcpStream) -> (u16, String) {
    let mut out = Vec::new();
    tokio::time::timeout(BOUND, s.read_to_end(&mut out))
        .await
        .expect("the server answers")
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (status, code)
}

/// Until the server closes `s`: true if it did within [`BOUND`].
async fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let waited = tokio::time::timeout(BOUND, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    waited.is_ok()
}

#[tokio::test]
async fn without_a_token_a_foreign_host_is_refused_and_nothing_is_done() {
    let e = Edge::start(None, Limits::default()).await;
    let port = e.addr.rsplit(':').next().unwrap();
    let json = "Content-Type: application/json";
    // A DNS-rebound page posts under its own name.
    for head in [
        format!("POST /events/Pay HTTP/1.1\r\nHost: attacker.example:{port}\r\n{json}"),
        format!("POST /app/refunds/r1 HTTP/1.1\r\nHost: attacker.example:{port}\r\n{json}"),
        format!("POST /deliveries/1/retry HTTP/1.1\r\nHost: attacker.example:{port}"),
        format!("GET /deliveries HTTP/1.1\r\nHost: attacker.example:{port}"),
        format!("GET /ui/deliveries HTTP/1.1\r\nHost: 127.0.0.1.attacker.example:{port}"),
        "GET /deliveries HTTP/1.0".to_owned(),
    ] {
        let body = if head.starts_with("POST /events") || head.starts_with("POST /app") {
            r#"{"id": "p1"}"#
        } else {
            ""
        };
        assert_eq!(
            e.send(&head, body).await,
            (421, "request.host_refused".into()),
            "{head}"
        );
    }
    assert_eq!(e.events().await, 0);
    assert_eq!(e.provider.calls(), 0, "no route ran");
    for host in ["127.0.0.1", "localhost", "[::1]"] {
        let head = format!("POST /events/Pay HTTP/1.1\r\nHost: {host}:{port}\r\n{json}");
        assert_eq!(e.send(&head, r#"{"id": "p1"}"#).await.0, 202, "{host}");
    }
}

#[tokio::test]
async fn without_a_token_a_foreign_origin_is_refused() {
    let e = Edge::start(None, Limits::default()).await;
    let port = e.addr.rsplit(':').next().unwrap();
    let host = format!("Host: 127.0.0.1:{port}");
    for origin in ["http://evil.example", "null", "http://127.0.0.1.evil.example"] {
        let head = format!("POST /events/Pay HTTP/1.1\r\n{host}\r\nOrigin: {origin}\r\nContent-Type: application/json");
        assert_eq!(
            e.send(&head, r#"{"id": "p1"}"#).await,
            (403, "request.origin_refused".into()),
            "{origin}"
        );
        let head =
            format!("POST /app/refunds/r1 HTTP/1.1\r\n{host}\r\nOrigin: {origin}\r\nContent-Type: application/json");
        assert_eq!(e.send(&head, "{}").await.0, 403, "{origin}");
    }
    assert_eq!((e.events().await, e.provider.calls()), (0, 0));
    // The console's own pages, served from loopback, post with their origin.
    let head = format!(
        "POST /events/Pay HTTP/1.1\r\n{host}\r\nOrigin: http://127.0.0.1:{port}\r\nContent-Type: application/json"
    );
    assert_eq!(e.send(&head, r#"{"id": "p1"}"#).await.0, 202);
}

#[tokio::test]
async fn with_a_token_any_host_is_served_behind_the_token() {
    let token = "test-token-0123456789abcdef012345";
    let e = Edge::start(Some(token), Limits::default()).await;
    let head = format!(
        "POST /events/Pay HTTP/1.1\r\nHost: jadpo.internal.example\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json"
    );
    assert_eq!(e.send(&head, r#"{"id": "p1"}"#).await.0, 202, "a proxy's name");
}

#[tokio::test]
async fn a_body_that_does_not_say_json_is_415_with_or_without_a_token() {
    let token = "test-token-0123456789abcdef012345";
    for with_token in [false, true] {
        let e = Edge::start(with_token.then_some(token), Limits::default()).await;
        let auth = if with_token {
            format!("\r\nAuthorization: Bearer {token}")
        } else {
            String::new()
        };
        for (path, kind) in [
            ("/events/Pay", "text/plain"),
            ("/events/Pay", "application/x-www-form-urlencoded"),
            ("/app/refunds/r1", "text/plain;charset=UTF-8"),
            ("/events/Pay", ""),
        ] {
            let kind = if kind.is_empty() {
                String::new()
            } else {
                format!("\r\nContent-Type: {kind}")
            };
            let head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1{auth}{kind}");
            assert_eq!(
                e.send(&head, r#"{"id": "p1"}"#).await,
                (415, "request.not_json".into()),
                "{path} {kind}"
            );
        }
        assert_eq!((e.events().await, e.provider.calls()), (0, 0));
        // Without a body, nothing to declare.
        let head = format!("POST /deliveries/999/retry HTTP/1.1\r\nHost: 127.0.0.1{auth}");
        assert_eq!(e.send(&head, "").await, (404, "delivery.not_found".into()));
    }
}

#[tokio::test]
async fn a_length_over_the_limit_is_refused_before_the_body_is_read() {
    // A body timeout of an hour: only a refusal that reads nothing answers.
    let limits = Limits {
        body_timeout: Duration::from_secs(3600),
        ..Limits::default()
    };
    let e = Edge::start(None, limits).await;
    for (path, code) in [("/events/Pay", "event.too_large"), ("/ui/login", "request.too_large")] {
        let mut s = TcpStream::connect(&e.addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{{"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        assert_eq!(answer(&mut s).await, (413, code.into()), "{path}");
    }
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closed() {
    let limits = Limits {
        body_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let e = Edge::start(None, limits).await;
    for path in ["/events/Pay", "/ui/login"] {
        let mut s = TcpStream::connect(&e.addr).await.unwrap();
        let head =
            format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{");
        s.write_all(head.as_bytes()).await.unwrap();
        assert_eq!(answer(&mut s).await, (408, "request.timeout".into()), "{path}");
    }
    assert_eq!(e.events().await, 0);
}

#[tokio::test]
async fn headers_trickled_byte_by_byte_are_cut_off_at_the_header_timeout() {
    let limits = Limits {
        header_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let e = Edge::start(None, limits).await;
    let mut s = TcpStream::connect(&e.addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // A byte every 50 ms would keep a timeout that restarts on each read
    // alive for ever; the server must close within the bound anyway.
    let trickle = async {
        for _ in 0..(BOUND.as_millis() / 50) {
            if s.write_all(b"X").await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    assert!(trickle.await, "the server kept a trickling header past its timeout");
}

#[tokio::test]
async fn silent_and_idle_connections_are_closed() {
    let limits = Limits {
        header_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let e = Edge::start(None, limits).await;
    let mut silent = TcpStream::connect(&e.addr).await.unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a connection that never sends is closed"
    );
    // A keep-alive connection, after one answer, waiting for nothing.
    let mut idle = TcpStream::connect(&e.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert!(
        closed_by_server(&mut idle).await,
        "an idle keep-alive connection is closed"
    );
}

#[tokio::test]
async fn connections_over_the_cap_wait_until_one_closes() {
    let limits = Limits {
        max_connections: 2,
        header_timeout: Duration::from_secs(3600),
        ..Limits::default()
    };
    let e = Edge::start(None, limits).await;
    let held: Vec<TcpStream> = vec![
        TcpStream::connect(&e.addr).await.unwrap(),
        TcpStream::connect(&e.addr).await.unwrap(),
    ];
    let mut third = TcpStream::connect(&e.addr).await.unwrap(); // in the backlog
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut byte)).await;
    assert!(early.is_err(), "the third connection was served beside two others");
    drop(held);
    let mut rest = Vec::new();
    tokio::time::timeout(BOUND, third.read_to_end(&mut rest))
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert!(String::from_utf8_lossy(&rest).contains(" 200 "), "{rest:?}");
}

#[tokio::test]
async fn a_stop_waits_for_requests_under_way_at_most_the_shutdown_timeout() {
    let limits = Limits {
        body_timeout: Duration::from_secs(3600),
        shutdown_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let mut e = Edge::start(None, limits).await;
    let mut pending = TcpStream::connect(&e.addr).await.unwrap();
    pending
        .write_all(b"POST /events/Pay HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(&e.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    let served = e.serving.stop();
    let stopped = tokio::time::timeout(BOUND, served).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "the server stopped: {stopped:?}");
    assert!(closed_by_server(&mut idle).await);
    assert!(closed_by_server(&mut pending).await);
    assert_eq!(e.events().await, 0);
}

#[tokio::test]
async fn a_request_under_way_finishes_when_the_stop_comes() {
    let limits = Limits {
        shutdown_timeout: Duration::from_secs(3600),
        ..Limits::default()
    };
    let mut e = Edge::start(None, limits).await;
    // The route's call waits at the provider until a second call comes:
    // the request is under way, for sure, when the provider has the first.
    e.provider
        .set(jadpo_runtime::provider::Behaviour::Together { calls: 2 });
    let mut s = TcpStream::connect(&e.addr).await.unwrap();
    s.write_all(b"POST /app/refunds/r1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let waited = tokio::time::timeout(BOUND, async {
        while e.provider.calls() < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the route called the provider");
    let served = e.serving.stop();
    let other = reqwest::Client::new()
        .post(format!("{}/other", e.provider.url()))
        .send();
    assert_eq!(other.await.unwrap().status(), 200);
    assert_eq!(answer(&mut s).await.0, 200, "the request under way was answered");
    assert!(tokio::time::timeout(BOUND, served).await.is_ok());
}

const TOKEN: &str = "test-token-0123456789abcdef012345";

/// A first wait no test outlives, however slow the machine.
fn throttled_for_an_hour() -> Limits {
    Limits {
        throttle_first_wait: Duration::from_secs(3600),
        ..Limits::default()
    }
}

fn emit_with(token: &str) -> String {
    format!("POST /events/Pay HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json")
}

/// The `Retry-After` of the answer to `head` and `body` sent from `from`.
async fn retry_after(e: &Edge, from: &str, head: &str, body: &str) -> Option<u64> {
    let mut out = String::new();
    e.request_from(from, head, body)
        .await
        .read_to_string(&mut out)
        .await
        .unwrap();
    out.lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after: ").map(str::to_owned))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn wrong_tokens_from_one_address_are_slowed_down_and_no_other() {
    let e = Edge::start(Some(TOKEN), throttled_for_an_hour()).await;
    let body = r#"{"id": "p1"}"#;
    for i in 0..super::throttle::FREE_FAILURES {
        let answer = e
            .send_from("127.0.0.2", &emit_with("guess-0123456789abcdef0123456789"), body)
            .await;
        assert_eq!(answer, (401, "api.unauthorized".into()), "guess {i}");
    }
    // Now even the right token waits: it is not checked at all.
    let answer = e.send_from("127.0.0.2", &emit_with(TOKEN), body).await;
    assert_eq!(answer, (429, "auth.throttled".into()));
    let wait = retry_after(&e, "127.0.0.2", &emit_with(TOKEN), body).await;
    assert!(wait.is_some_and(|s| s > 3000 && s <= 3600), "the first wait: {wait:?}");
    // Another address is not slowed by them.
    assert_eq!(e.send_from("127.0.0.3", &emit_with(TOKEN), body).await.0, 202);
    // A missing token is no guess: it is told what to send.
    let head = "POST /events/Pay HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json";
    assert_eq!(e.send_from("127.0.0.4", head, body).await.0, 401);
    for _ in 0..super::throttle::FREE_FAILURES {
        assert_eq!(e.send_from("127.0.0.4", head, body).await.0, 401);
    }
    assert_eq!(e.events().await, 1);
}

#[tokio::test]
async fn a_right_token_clears_an_address_count() {
    let e = Edge::start(Some(TOKEN), throttled_for_an_hour()).await;
    let body = r#"{"id": "p1"}"#;
    let free = super::throttle::FREE_FAILURES;
    for _ in 0..free - 1 {
        assert_eq!(e.send_from("127.0.0.5", &emit_with("wrong"), body).await.0, 401);
    }
    assert_eq!(e.send_from("127.0.0.5", &emit_with(TOKEN), body).await.0, 202);
    for _ in 0..free - 1 {
        assert_eq!(e.send_from("127.0.0.5", &emit_with("wrong"), body).await.0, 401);
    }
    assert_eq!(e.send_from("127.0.0.5", &emit_with(TOKEN), body).await.0, 202);
}

#[tokio::test]
async fn the_console_sign_in_and_the_api_share_one_count() {
    let e = Edge::start(Some(TOKEN), throttled_for_an_hour()).await;
    let login = "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded";
    for _ in 0..super::throttle::FREE_FAILURES {
        assert_eq!(e.send_from("127.0.0.6", login, "token=guess").await.0, 401);
    }
    let refused = format!("token={TOKEN}");
    assert_eq!(
        e.send_from("127.0.0.6", login, &refused).await.0,
        429,
        "the sign-in waits"
    );
    assert!(retry_after(&e, "127.0.0.6", login, &refused).await.is_some());
    assert_eq!(
        e.send_from("127.0.0.6", &emit_with(TOKEN), r#"{"id": "p1"}"#).await,
        (429, "auth.throttled".into()),
        "and so does the API from that address"
    );
    assert_eq!(
        e.send_from("127.0.0.7", login, &refused).await.0,
        303,
        "another signs in"
    );
}
