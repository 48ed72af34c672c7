//! A connection's own `retry:`: resends inside one attempt, the waits
//! between them (observable in the outcome, so no test sleeps through a long
//! one), Retry-After, and the run's deadline.

mod connection_support;

use connection_support::*;
use jadpo_core::CallVerdict::{Answered, Unavailable};
use jadpo_core::{Backoff, FailureKind};
use jadpo_lang::Method;
use jadpo_runtime::connection::{CallRequest, Connections};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

async fn three_attempts() -> (TestProvider, Connections) {
    let provider = TestProvider::start().await;
    let app = one_connection("    timeout: 300ms\n    retry: { attempts: 3 }");
    let connections = resolve(&app, &provider.url(), &[]);
    (provider, connections)
}

#[tokio::test]
async fn down_down_up_succeeds_on_the_third_send() {
    let (provider, connections) = three_attempts().await;
    provider.script([Behaviour::Down, Behaviour::Down]);
    let out = call(&connections, post(json!({"n": 1}))).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    assert_eq!(out.sends, 3);
    // The breaker hears how the last send ended.
    assert_eq!(out.verdict, Some(Answered));
    assert_eq!(provider.calls(), 3);
    // Full jitter under a ceiling of 100 ms, then 200 ms.
    assert_eq!(out.waits.len(), 2);
    assert!(out.waits[0] <= Backoff::CALL.ceiling(1), "{:?}", out.waits);
    assert!(out.waits[1] <= Backoff::CALL.ceiling(2), "{:?}", out.waits);
    assert_eq!(out.skipped_wait, None);
    // Every send is the same call.
    let bodies: Vec<_> = provider.requests().iter().map(|r| r.body.clone()).collect();
    assert!(bodies.iter().all(|b| b == &bodies[0]));
}

#[tokio::test]
async fn down_three_times_is_unavailable_after_three_sends() {
    let (provider, connections) = three_attempts().await;
    provider.set(Behaviour::Down);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "unavailable");
    assert_eq!(code(&out), "http.503");
    assert_eq!(out.verdict, Some(Unavailable));
    assert_eq!(out.sends, 3);
    assert_eq!(out.waits.len(), 2);
    assert_eq!(provider.calls(), 3);
}

#[tokio::test]
async fn the_last_send_decides_the_verdict() {
    let (provider, connections) = three_attempts().await;
    provider.script([Behaviour::Down, Behaviour::Status(404)]);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "not_found");
    assert_eq!(out.verdict, Some(Answered));
    assert_eq!(out.sends, 2);
}

#[tokio::test]
async fn the_waits_are_the_seeds() {
    let (provider, connections) = three_attempts().await;
    provider.set(Behaviour::Down);
    let deadline = within(Duration::from_secs(30));
    let a = connections.call(post(json!({})), deadline, 99).await;
    let b = connections.call(post(json!({})), deadline, 99).await;
    assert_eq!(a.waits, b.waits);
}

#[tokio::test]
async fn answers_that_wont_change_are_not_resent() {
    let (provider, connections) = three_attempts().await;
    for status in [400, 401, 404, 409, 422] {
        provider.set(Behaviour::Status(status));
        let out = call(&connections, post(json!({}))).await;
        assert_eq!((out.sends, out.waits.len()), (1, 0), "{status}");
    }
    assert_eq!(provider.calls(), 5);
}

#[tokio::test]
async fn a_post_that_timed_out_is_never_resent() {
    let (provider, connections) = three_attempts().await;
    provider.set(Behaviour::Slow(Duration::from_secs(5)));
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "outcome_unknown");
    assert_eq!(out.sends, 1);
    assert_eq!(provider.calls(), 1);
}

#[tokio::test]
async fn an_idempotent_call_that_timed_out_is_resent() {
    let provider = TestProvider::start().await;
    let app = one_connection("    timeout: 200ms\n    retry: { attempts: 2 }");
    let connections = resolve(&app, &provider.url(), &[]);
    provider.set(Behaviour::Slow(Duration::from_secs(5)));
    let out = call(&connections, request(Method::Put, "/things/1")).await;
    assert_eq!(kind(&out), "unavailable");
    assert_eq!(out.verdict, Some(Unavailable));
    assert_eq!(out.sends, 2);

    let keyed = CallRequest {
        idempotency_key: Some("k-1".into()),
        ..post(json!({}))
    };
    provider.script([Behaviour::Slow(Duration::from_secs(5))]);
    provider.set(Behaviour::Up);
    let out = call(&connections, keyed).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    assert_eq!(out.sends, 2);
    let keys: Vec<_> = provider
        .requests()
        .iter()
        .skip(2)
        .map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(keys, [Some("k-1".to_owned()), Some("k-1".to_owned())]);
}

#[tokio::test]
async fn refused_sends_are_resent() {
    let (provider, connections) = three_attempts().await;
    provider.set(Behaviour::Refuse);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(code(&out), "http.never_left");
    assert_eq!(out.verdict, Some(Unavailable));
    assert_eq!(out.sends, 3);
}

#[tokio::test]
async fn retry_after_is_honoured_between_sends() {
    let (provider, connections) = three_attempts().await;
    provider.script([Behaviour::RateLimited { retry_after_s: 1 }]);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    assert_eq!(out.sends, 2);
    // Retry-After is a floor on the wait; the jitter can't draw above 1 s.
    assert_eq!(out.waits, [Duration::from_secs(1)]);
    let seen = provider.requests();
    let gap = seen[1].at.duration_since(seen[0].at);
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
}

#[tokio::test]
async fn a_wait_past_the_deadline_is_not_taken() {
    let (provider, connections) = three_attempts().await;
    provider.set(Behaviour::RateLimited { retry_after_s: 120 });
    let started = Instant::now();
    let out = connections
        .call(post(json!({})), within(Duration::from_secs(5)), 3)
        .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    let failure = out.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::RateLimited);
    // The delivery's own backoff honours it next.
    assert_eq!(failure.retry_after, Some(Duration::from_secs(120)));
    assert_eq!(out.sends, 1);
    assert!(out.waits.is_empty());
    assert_eq!(out.skipped_wait, Some(Duration::from_secs(120)));
    assert_eq!(out.verdict, Some(Unavailable));
    assert_eq!(provider.calls(), 1);
}

#[tokio::test]
async fn without_retry_a_call_is_sent_once() {
    let provider = TestProvider::start().await;
    let connections = resolve(&one_connection(""), &provider.url(), &[]);
    provider.set(Behaviour::Down);
    let out = call(&connections, post(json!({}))).await;
    assert_eq!((out.sends, out.skipped_wait), (1, None));
}

#[tokio::test]
async fn the_call_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (_provider, connections) = three_attempts().await;
    let fut = connections.call(post(json!({})), within(Duration::from_secs(1)), 1);
    assert_send(&fut);
    drop(fut);
    // Workers share one set of connections across tasks.
    let shared = std::sync::Arc::new(connections);
    let handle = tokio::spawn({
        let shared = shared.clone();
        async move {
            shared
                .call(post(json!({})), within(Duration::from_secs(5)), 1)
                .await
                .sends
        }
    });
    assert_eq!(handle.await.unwrap(), 1);
}

/// Each send signs with its own time: a resend carries a new
/// `webhook-timestamp` and a signature over it, under the same `webhook-id`,
/// so a receiver does not refuse it as too old after a long Retry-After.
#[tokio::test]
async fn each_resend_is_signed_with_its_own_time() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let provider = TestProvider::start().await;
    let app = one_connection("    timeout: 300ms\n    retry: { attempts: 3 }\n    signing_secret: secret(\"SIGNING\")");
    let mut connections = resolve(&app, &provider.url(), &[("SIGNING", SECRET)]);
    // The wall clock moves 320 s between sends, as a long Retry-After would.
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    connections.set_wall_clock(std::sync::Arc::new(move || {
        NOW_S + 320 * reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }));
    provider.expect_signature(Some(SECRET));
    provider.script([Behaviour::Down, Behaviour::Down]);
    let out = call(&connections, post(json!({"n": 1}))).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    let seen = provider.requests();
    assert_eq!(seen.len(), 3);
    for (i, r) in seen.iter().enumerate() {
        let expected = (NOW_S + 320 * i as i64).to_string();
        assert_eq!(r.header("webhook-timestamp"), Some(expected.as_str()));
        assert_eq!(r.header("webhook-id"), Some("msg_1"));
        r.verify_signature(SECRET).unwrap();
    }
}
