//! How a call ends, row by row (its failure kind and its verdict for the
//! breaker, docs/retries.md), through real HTTP to a test provider on
//! loopback; signing checked by the provider.

mod connection_support;

use connection_support::*;
use jadpo_core::CallVerdict::{Answered, Unavailable};
use jadpo_core::FailureKind;
use jadpo_lang::Method;
use jadpo_runtime::connection::CallRequest;
use jadpo_runtime::provider::{Behaviour, TestProvider};
use serde_json::json;
use std::time::Duration;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::test]
async fn every_answered_row() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    let table = [
        (200, "ok", Answered),
        (201, "ok", Answered),
        (204, "ok", Answered),
        (404, "not_found", Answered),
        (409, "conflict", Answered),
        (400, "rejected", Answered),
        (422, "rejected", Answered),
        (401, "unauthorized", Answered),
        (403, "unauthorized", Answered),
        (410, "rejected", Answered),
        (451, "rejected", Answered),
        // A redirect is not followed: an answer that refuses the call.
        (302, "rejected", Answered),
        (408, "unavailable", Unavailable),
        (429, "rate_limited", Unavailable),
        (500, "unavailable", Unavailable),
        (502, "unavailable", Unavailable),
        (503, "unavailable", Unavailable),
        (599, "unavailable", Unavailable),
    ];
    for (status, want_kind, want_verdict) in table {
        provider.set(Behaviour::Status(status));
        let out = call(&connections, post(json!({"n": status}))).await;
        assert_eq!(kind(&out), want_kind, "{status}: {out:?}");
        assert_eq!(out.verdict, Some(want_verdict), "{status}");
        assert_eq!(out.status, Some(status));
        assert_eq!(out.sends, 1);
        if let Err(f) = &out.result {
            assert_eq!(f.code, format!("http.{status}"));
        }
    }
    assert_eq!(provider.calls(), table.len() as u64);
}

#[tokio::test]
async fn a_success_carries_the_answer() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    let out = call(&connections, post(json!({"amount": 12}))).await;
    let response = out.result.expect("200");
    assert_eq!(response.status, 200);
    let body: serde_json::Value = response.json().unwrap();
    assert_eq!(body["ok"], true);
    let seen = &provider.requests()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/things");
    assert_eq!(seen.json().unwrap(), json!({"amount": 12}));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(seen.header("idempotency-key"), None);
}

#[tokio::test]
async fn the_base_url_path_is_kept_and_headers_are_sent() {
    let provider = TestProvider::start().await;
    let app = one_connection("    headers: { \"Authorization\": secret(\"TOKEN\"), \"X-Tenant\": \"acme\" }");
    let connections = resolve(
        &app,
        &format!("{}/v1/", provider.url()),
        &[("TOKEN", "Bearer sk_test_1")],
    );
    let out = call(&connections, request(Method::Get, "/payments/p%201")).await;
    assert_eq!(kind(&out), "ok");
    let seen = &provider.requests()[0];
    assert_eq!(seen.path, "/v1/payments/p%201");
    assert_eq!(seen.header("authorization"), Some("Bearer sk_test_1"));
    assert_eq!(seen.header("x-tenant"), Some("acme"));
    assert_eq!(seen.body, b"");
}

#[tokio::test]
async fn rate_limited_keeps_retry_after() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    provider.set(Behaviour::RateLimited { retry_after_s: 7 });
    let out = call(&connections, post(json!({}))).await;
    let failure = out.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::RateLimited);
    assert_eq!(failure.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(out.verdict, Some(Unavailable));
}

#[tokio::test]
async fn refused_never_left() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    provider.set(Behaviour::Refuse);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "unavailable", "{out:?}");
    assert_eq!(code(&out), "http.never_left");
    assert_eq!(out.verdict, Some(Unavailable));
    assert_eq!(out.status, None);
    assert_eq!(provider.calls(), 0);
    // And listening again on the same port.
    provider.set(Behaviour::Up);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    assert_eq!(provider.calls(), 1);
}

#[tokio::test]
async fn a_connect_that_hangs_never_left() {
    // A port that takes the TCP connection and never answers the TLS
    // handshake: the connect hangs, and the POST never left, so it is
    // `unavailable`, not `outcome_unknown`.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", silent.local_addr().unwrap());
    let connections = resolve(&one_connection("    timeout: 400ms"), &url, &[]);
    let started = tokio::time::Instant::now();
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(code(&out), "http.never_left", "{out:?}");
    assert_eq!(kind(&out), "unavailable");
    assert_eq!(out.verdict, Some(Unavailable));
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(silent);
}

#[tokio::test]
async fn timeout_after_sending_depends_on_idempotency() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection("    timeout: 300ms"), &provider.url(), &[]);
    provider.set(Behaviour::Slow(Duration::from_secs(5)));

    let keyed = CallRequest {
        idempotency_key: Some("pay-42".into()),
        ..post(json!({}))
    };
    let cases = [
        ("POST", post(json!({})), "outcome_unknown"),
        ("PATCH", request(Method::Patch, "/things/1"), "outcome_unknown"),
        ("PUT", request(Method::Put, "/things/1"), "unavailable"),
        ("DELETE", request(Method::Delete, "/things/1"), "unavailable"),
        ("GET", request(Method::Get, "/things/1"), "unavailable"),
        ("POST with a key", keyed, "unavailable"),
    ];
    for (what, req, want) in cases {
        let out = call(&connections, req).await;
        assert_eq!(kind(&out), want, "{what}: {out:?}");
        assert_eq!(code(&out), "http.timeout", "{what}");
        assert_eq!(out.verdict, Some(Unavailable), "{what}");
        assert_eq!(out.sends, 1, "{what}");
    }
    let last = provider.requests().pop().unwrap();
    assert_eq!(last.header("idempotency-key"), Some("pay-42"));
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_may_have_acted() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    provider.set(Behaviour::Hangup);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "outcome_unknown", "{out:?}");
    assert_eq!(code(&out), "http.connection_lost");
    assert_eq!(out.verdict, Some(Unavailable));
    let out = call(&connections, request(Method::Put, "/things/1")).await;
    assert_eq!(kind(&out), "unavailable", "{out:?}");
    assert_eq!(provider.calls_while(&Behaviour::Hangup), 2);
}

#[tokio::test]
async fn the_runs_deadline_cuts_a_send_short() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection("    timeout: 10s"), &provider.url(), &[]);
    provider.set(Behaviour::Slow(Duration::from_secs(5)));
    let started = tokio::time::Instant::now();
    let out = connections
        .call(post(json!({})), within(Duration::from_millis(300)), 1)
        .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(kind(&out), "deadline_exceeded", "{out:?}");
    // The run's limit, not the provider, ended it: no verdict.
    assert_eq!(out.verdict, None);
    assert_eq!(out.sends, 1);
}

#[tokio::test]
async fn a_deadline_already_passed_sends_nothing() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    let out = connections.call(post(json!({})), tokio::time::Instant::now(), 1).await;
    assert_eq!(kind(&out), "deadline_exceeded");
    assert_eq!((out.sends, out.verdict), (0, None));
    assert_eq!(provider.calls(), 0);
}

#[tokio::test]
async fn signed_calls_verify_at_the_provider() {
    let provider = TestProvider::start().await;
    let app = one_connection("    signing_secret: secret(\"SIGNING\")");
    let mut connections = resolve(&app, &provider.url(), &[("SIGNING", SECRET)]);
    connections.set_wall_clock(std::sync::Arc::new(|| 1_700_000_123));
    provider.expect_signature(Some(SECRET));
    // In a trace: its headers are sent and the signature, which covers
    // the id, the time and the body only, still verifies.
    let trace =
        jadpo_core::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap();
    let req = CallRequest {
        message_id: "msg_2abc".into(),
        trace: Some(trace),
        spans: Default::default(),
        ..post(json!({"payment_id": "p1", "amount_cents": 1200}))
    };
    let out = call(&connections, req).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    let seen = &provider.requests()[0];
    assert!(seen
        .header("traceparent")
        .unwrap()
        .contains("4bf92f3577b34da6a3ce929d0e0e4736"));
    assert_eq!(seen.header("webhook-id"), Some("msg_2abc"));
    assert_eq!(seen.header("webhook-timestamp"), Some("1700000123"));
    assert!(seen.header("webhook-signature").unwrap().starts_with("v1,"));
    seen.verify_signature(SECRET).unwrap();
    assert!(seen.verify_signature("whsec_c2VjcmV0LW5vdC10aGUtc2FtZQ==").is_err());

    // A provider expecting another secret refuses the call: unauthorized.
    provider.expect_signature(Some("whsec_c2VjcmV0LW5vdC10aGUtc2FtZQ=="));
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "unauthorized");
    assert_eq!(out.verdict, Some(Answered));
}

#[tokio::test]
async fn a_secret_without_prefix_or_padding_signs_and_an_empty_body_is_signed_too() {
    let provider = TestProvider::start().await;
    let app = one_connection("    signing_secret: secret(\"BARE\")");
    // base64 of "secret-with-padding-34", its `==` left out, no `whsec_`.
    let connections = resolve(&app, &provider.url(), &[("BARE", "c2VjcmV0LXdpdGgtcGFkZGluZy0zNA")]);
    let out = call(&connections, request(Method::Get, "/ping")).await;
    assert_eq!(kind(&out), "ok");
    provider.requests()[0]
        .verify_signature("whsec_c2VjcmV0LXdpdGgtcGFkZGluZy0zNA==")
        .unwrap();
}

/// During a rotation the connection signs with both secrets, so a receiver
/// on either one verifies every message.
#[tokio::test]
async fn two_secrets_sign_for_a_receiver_on_either() {
    const OLD: &str = "whsec_c2VjcmV0LW5vdC10aGUtc2FtZQ==";
    let provider = TestProvider::start().await;
    let app = one_connection("    signing_secret: secret(\"SIGNING\")");
    let both = format!("{SECRET} {OLD}");
    let connections = resolve(&app, &provider.url(), &[("SIGNING", both.as_str())]);
    for receiver in [SECRET, OLD] {
        provider.expect_signature(Some(receiver));
        let out = call(&connections, post(json!({"n": 1}))).await;
        assert_eq!(kind(&out), "ok", "{receiver}: {out:?}");
    }
    let seen = provider.requests();
    assert_eq!(seen[0].header("webhook-signature").unwrap().matches("v1,").count(), 2);
}

#[tokio::test]
async fn unsigned_connections_send_no_signature() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    call(&connections, post(json!({}))).await;
    let seen = &provider.requests()[0];
    assert_eq!(seen.header("webhook-signature"), None);
    assert_eq!(seen.header("webhook-id"), None);
}

#[tokio::test]
async fn an_unknown_connection_is_a_defect() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    let out = call(
        &connections,
        CallRequest {
            connection: "mailer".into(),
            ..post(json!({}))
        },
    )
    .await;
    assert_eq!(kind(&out), "internal_fault");
    assert_eq!(code(&out), "connection.unknown");
    assert_eq!((out.sends, out.verdict), (0, None));
}

#[tokio::test]
async fn the_provider_counts_by_behaviour_and_flaps() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    provider.set(Behaviour::Down);
    call(&connections, post(json!({}))).await;
    call(&connections, post(json!({}))).await;
    provider.script([Behaviour::Status(418)]);
    assert_eq!(code(&call(&connections, post(json!({}))).await), "http.418");
    provider.set(Behaviour::Up);
    call(&connections, post(json!({}))).await;
    assert_eq!(provider.calls(), 4);
    assert_eq!(provider.calls_while(&Behaviour::Down), 2);
    assert_eq!(provider.calls_while(&Behaviour::Status(418)), 1);
    assert_eq!(provider.calls_while(&Behaviour::Up), 1);
    let statuses: Vec<u16> = provider.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 418, 200]);

    // Up for the first period, down for the second, and so on. A loaded
    // machine decides which phase a call lands in, so each call is checked
    // against the phase of its own arrival, and calls go on until both
    // phases have been seen.
    let flap = Duration::from_millis(200);
    let period = Behaviour::Flapping { period: flap };
    let before = std::time::Instant::now();
    provider.set(period.clone());
    let after = std::time::Instant::now();
    let ceiling = std::time::Instant::now() + Duration::from_secs(60);
    let (mut ups, mut downs, mut calls) = (0, 0, 0);
    while ups == 0 || downs == 0 {
        assert!(std::time::Instant::now() < ceiling, "never saw both phases");
        let out = call(&connections, post(json!({}))).await;
        calls += 1;
        let seen = provider.requests().pop().unwrap();
        // The phase began between `before` and `after`: a call that close
        // to a boundary could be in either, and says nothing.
        let phase = |from: std::time::Instant| seen.at.duration_since(from).as_nanos() / flap.as_nanos();
        if phase(after) != phase(before) {
            continue;
        }
        if phase(before) % 2 == 0 {
            assert_eq!((kind(&out), seen.status), ("ok", 200), "up in an even period");
            ups += 1;
        } else {
            assert_eq!((kind(&out), seen.status), ("unavailable", 503), "down in an odd period");
            downs += 1;
        }
    }
    assert_eq!(provider.calls_while(&period), calls);
    provider.clear();
    assert_eq!(provider.calls(), 0);
    assert!(provider.requests().is_empty());
}
