//! Alerts through the real binary: two `jadpo dev` processes on one
//! PostgreSQL store, a provider outage, and a local alert receiver that
//! gets exactly one alert and one `resolved` message, each signed. The
//! processes run 60 times faster (`--time-scale 60`), so the breaker's
//! minute of pause is a second of the test.

#[path = "support/process.rs"]
mod process;

use jadpo_runtime::provider::{Behaviour, Recorded, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_testing::process::Logged;
use process::{jadpo, post, wait_until};

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: "PAY_URL" }
connection ops {
    base_url: "OPS_URL"
    signing_secret: secret("OPS_SIGNING")
}
action charge(id: string) { call pay.post("/charge", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
alerts { connection: ops  path: "/jadpo/alerts" }
"#;

const SIGNING: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn alerts_at(ops: &TestProvider) -> Vec<Recorded> {
    ops.requests()
        .into_iter()
        .filter(|r| r.path == "/jadpo/alerts")
        .collect()
}

#[test]
fn two_processes_send_one_alert_and_one_resolved_message_per_outage() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let (pay, ops) = rt.block_on(async { (TestProvider::start().await, TestProvider::start().await) });
    pay.set(Behaviour::Down);
    let url = schema.url_with_search_path();
    let dir = tempfile::tempdir().unwrap();
    let app = APP.replace("PAY_URL", &pay.url()).replace("OPS_URL", &ops.url());
    std::fs::write(dir.path().join("app.jadpo"), app).unwrap();
    let mut children: Vec<Logged> = (0..2)
        .map(|_| {
            Logged::spawn(jadpo(dir.path()).env("OPS_SIGNING", SIGNING).args([
                "dev",
                "--store",
                &url,
                "--port",
                "0",
                "--time-scale",
                "60",
            ]))
        })
        .collect();
    let ports: Vec<u16> = children.iter_mut().map(|c| c.port("api.listening")).collect();
    for i in 0..10 {
        let body = format!(r#"{{"id":"p{i}"}}"#);
        assert_eq!(post(ports[i % 2], "/events/Paid", &body), 202);
    }
    wait_until("the outage's alert", || !alerts_at(&ops).is_empty());
    pay.set(Behaviour::Up);
    wait_until("the resolved message", || alerts_at(&ops).len() >= 2);
    // A second outage, its alert and its resolved message: the senders
    // have looked many times since the first outage's messages were due,
    // so a second copy of either would have gone out before these.
    pay.set(Behaviour::Down);
    for i in 10..20 {
        let body = format!(r#"{{"id":"p{i}"}}"#);
        assert_eq!(post(ports[i % 2], "/events/Paid", &body), 202);
    }
    wait_until("the second outage's alert", || alerts_at(&ops).len() >= 3);
    pay.set(Behaviour::Up);
    wait_until("the second resolved message", || alerts_at(&ops).len() >= 4);
    let sent = alerts_at(&ops);
    let bodies: Vec<serde_json::Value> = sent.iter().map(|r| r.json().unwrap()).collect();
    assert_eq!(
        sent.len(),
        4,
        "one alert and one resolved message per outage: {bodies:#?}"
    );
    let statuses: Vec<_> = bodies.iter().map(|b| b["status"].as_str()).collect();
    assert_eq!(
        statuses,
        [Some("raised"), Some("resolved"), Some("raised"), Some("resolved")],
        "{bodies:#?}"
    );
    assert_ne!(bodies[0]["id"], bodies[2]["id"], "two outages, two alerts: {bodies:#?}");
    assert_eq!(bodies[2]["event"], "delivery.alert");
    assert_eq!(bodies[3]["event"], "delivery.alert_resolved");
    for (r, body) in sent.iter().zip(&bodies) {
        assert_eq!(r.status, 200);
        r.verify_signature(SIGNING).unwrap();
        assert_eq!(body["connection"], "pay");
        assert_eq!(body["alert"], "connection_unavailable");
    }
    assert_eq!(bodies[0]["event"], "delivery.alert");
    assert_eq!(bodies[1]["event"], "delivery.alert_resolved");
    assert!(bodies[1]["released"].as_u64().is_some() && bodies[1]["ended_at"].is_string());
    assert_ne!(sent[0].header("webhook-id"), sent[1].header("webhook-id"));
    for child in children {
        let (status, logs) = child.terminate();
        assert!(status.success(), "{logs}");
    }
}
