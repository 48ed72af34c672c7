//! Alerts that reach people, end to end through the embedded API on a real
//! SQLite file and real HTTP: a provider's outage raises one alert, POSTed
//! signed to the app's alert route, retried when the receiver fails, and
//! followed by one `resolved` message when the breaker closes. Time is a
//! manual clock: the test moves it past each pause and backoff.

use jadpo::runtime::provider::{Behaviour, Recorded, TestProvider};
use jadpo::runtime::ManualClock;
use jadpo::store::sqlite::SqliteStore;
use jadpo::store::Store;
use jadpo_core::alert::SendState;
use jadpo_core::Timestamp;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: env("PAY_URL") }
connection ops {
    base_url: env("OPS_URL")
    headers: { "Authorization": secret("OPS_TOKEN") }
    signing_secret: secret("OPS_SIGNING")
}
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
alerts { connection: ops  path: "/jadpo/alerts" }
"#;

const SIGNING: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

use jadpo_testing::wait::eventually;

fn alerts_at(ops: &TestProvider) -> Vec<Recorded> {
    ops.requests()
        .into_iter()
        .filter(|r| r.path == "/jadpo/alerts")
        .collect()
}

#[tokio::test]
async fn an_outage_sends_one_alert_and_one_resolved_message_signed_and_retried() {
    let (pay, ops) = (TestProvider::start().await, TestProvider::start().await);
    pay.set(Behaviour::Down);
    // The receiver fails the first send of the alert.
    ops.script([Behaviour::Status(503)]);
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display()))
        .await
        .unwrap();
    let clock = ManualClock::new(T0);
    let (pay_url, ops_url) = (pay.url(), ops.url());
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .env(move |k| match k {
            "PAY_URL" => Some(pay_url.clone()),
            "OPS_URL" => Some(ops_url.clone()),
            "OPS_TOKEN" => Some("Bearer t0ken".into()),
            "OPS_SIGNING" => Some(SIGNING.into()),
            _ => None,
        })
        .clock(Arc::new(clock.clone()))
        .build(store.clone())
        .await
        .unwrap();
    let running = jadpo.start();
    for i in 0..5 {
        jadpo.emit("Paid", &json!({"id": format!("p{i}")})).await.unwrap();
    }
    // Five unavailable attempts open the breaker; the next sweep raises
    // the alert and the sender posts it, to a receiver that fails it.
    eventually("the breaker opened", async || {
        let b = store.breakers().await.unwrap();
        b.iter().any(|b| !b.breaker.is_closed()).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(1));
    let first = eventually("the alert's first send", async || alerts_at(&ops).first().cloned()).await;
    assert_eq!(first.status, 503);
    // The claim counts the attempt before the call is made, so the state
    // reads `retrying` while the first send is in flight: wait for its
    // outcome, not just the state.
    let kept = eventually("the failed send is kept for a retry", async || {
        let a = store.alerts(10).await.unwrap().remove(0);
        (a.sends.state() == SendState::Retrying && a.sends.last_error.is_some()).then_some(a)
    })
    .await;
    assert_eq!(kept.sends.last_error.as_deref(), Some("http.503"));
    // Its backoff (at most 5 s) passes: sent again, the same message.
    clock.advance(Duration::from_secs(5));
    let second = eventually("the alert sent again", async || alerts_at(&ops).get(1).cloned()).await;
    assert_eq!(second.status, 200);
    assert_eq!(
        second.header("webhook-id"),
        first.header("webhook-id"),
        "a resend keeps its id"
    );
    assert_eq!(second.body, first.body);
    let body = second.json().unwrap();
    assert_eq!(body["event"], "delivery.alert");
    assert_eq!(body["alert"], "connection_unavailable");
    assert_eq!(body["status"], "raised");
    assert_eq!(body["connection"], "pay");
    assert_eq!(body["id"], kept.public_id.as_str());
    assert!(body["since"].is_string() && body["raised_at"].is_string(), "{body}");
    eventually("the send recorded as sent", async || {
        let a = store.alerts(10).await.unwrap().remove(0);
        (a.sends.state() == SendState::Sent).then_some(())
    })
    .await;

    // The provider answers again. The five retries come due within 30 s
    // and are held; after the minute's pause the probe closes the breaker
    // and releases the rest, and the resolved message goes out.
    pay.set(Behaviour::Up);
    clock.advance(Duration::from_secs(30));
    eventually("the retries held", async || {
        let b = store.breakers().await.unwrap();
        (b.iter().map(|b| b.held).sum::<u64>() == 5).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(31));
    let resolved = eventually("the resolved message", async || alerts_at(&ops).get(2).cloned()).await;
    assert_eq!(resolved.status, 200);
    let body = resolved.json().unwrap();
    assert_eq!(body["event"], "delivery.alert_resolved");
    assert_eq!(body["status"], "resolved");
    assert_eq!(body["connection"], "pay");
    assert_eq!(body["released"], 4, "the probe and four released: {body}");
    assert!(body["ended_at"].is_string(), "{body}");
    assert_ne!(resolved.header("webhook-id"), first.header("webhook-id"));

    // Long after, a second outage's alert goes out: the sender has looked
    // since time moved, and sent nothing more for the first outage.
    clock.advance(Duration::from_secs(600));
    pay.set(Behaviour::Down);
    for i in 5..10 {
        jadpo.emit("Paid", &json!({"id": format!("p{i}")})).await.unwrap();
    }
    eventually("the breaker opened again", async || {
        let b = store.breakers().await.unwrap();
        b.iter().any(|b| !b.breaker.is_closed()).then_some(())
    })
    .await;
    clock.advance(Duration::from_secs(1));
    let again = eventually("the second outage's alert", async || alerts_at(&ops).get(3).cloned()).await;
    let body = again.json().unwrap();
    assert_eq!(
        (&body["event"], &body["status"]),
        (&json!("delivery.alert"), &json!("raised")),
        "{body}"
    );
    assert_ne!(again.header("webhook-id"), first.header("webhook-id"));
    assert_ne!(body["id"], kept.public_id.as_str(), "a new alert: {body}");

    // Every send carried the connection's headers and a signature the
    // receiver's secret verifies; nothing more was sent.
    let all = alerts_at(&ops);
    assert_eq!(
        all.len(),
        4,
        "one alert sent twice, one resolved message, the second outage's alert"
    );
    for r in &all {
        assert_eq!(r.method, "POST");
        assert_eq!(r.header("authorization"), Some("Bearer t0ken"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        r.verify_signature(SIGNING).unwrap();
        assert!(r.header("webhook-id").unwrap().starts_with("msg_"));
    }
    // The alert's sends never counted towards the alert connection's breaker.
    assert!(store
        .breakers()
        .await
        .unwrap()
        .iter()
        .all(|b| b.breaker.connection != "ops"));
    running.stop().await;
}
