//! What an event's values may not do to a provider call (docs/app-file.md,
//! `call`): move it to another path, or send a bad `Idempotency-Key`. An
//! app's actions run for a delivery through real HTTP to a recording
//! provider under a tenant's `base_url`; a refused call sends nothing.

use jadpo_core::{DeliveryId, Failure, FailureKind, Timestamp};
use jadpo_runtime::connection::Connections;
use jadpo_runtime::interpreter::AppExecutor;
use jadpo_runtime::provider::TestProvider;
use jadpo_runtime::run::{Executor, RunContext, RunKind};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const APP: &str = r#"
event Paid { payment_id: string  key: string }

connection payments { base_url: env("PAYMENTS_URL") }

action record(payment_id: string) {
    call payments.post("/payments/{payment_id}/record", body: event, idempotency_key: event.key)
}
action top(payment_id: string) { call payments.post("/{payment_id}/record") }

subscriber record_payment { on: Paid  run: record(event.payment_id) }
subscriber top_level { on: Paid  run: top(event.payment_id) }
"#;

const TENANT: &str = "/v1/tenants/acme";

struct World {
    provider: TestProvider,
    executor: AppExecutor,
}

async fn world() -> World {
    let app = Arc::new(jadpo_lang::check("app.jadpo", APP).app.expect("the app checks"));
    let provider = TestProvider::start().await;
    let url = format!("{}{TENANT}", provider.url());
    let env = move |k: &str| (k == "PAYMENTS_URL").then(|| url.clone());
    let connections = Arc::new(Connections::resolve(&app, &env).expect("resolved"));
    let executor = AppExecutor::new(app, connections, &env).expect("an executor");
    World { provider, executor }
}

impl World {
    /// Runs `subscriber`'s action for one delivery of `Paid` with `payload`.
    async fn run(&self, subscriber: &str, payload: Value) -> Result<(), Failure> {
        let ctx = RunContext {
            kind: RunKind::Delivery {
                id: DeliveryId(1),
                attempt: 1,
            },
            subscriber: subscriber.into(),
            event_name: "Paid".into(),
            event_public_id: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
            payload,
            started_at: Timestamp::from_millis(1_700_000_000_000),
            deadline: tokio::time::Instant::now() + Duration::from_secs(30),
            calls: Default::default(),
            path: Default::default(),
            depth: 0,
            emits: Default::default(),
            trace: None,
            spans: Default::default(),
        };
        self.executor.run(ctx).await
    }

    fn last_path(&self) -> String {
        self.provider.requests().last().expect("a request").path.clone()
    }
}

fn defect(result: Result<(), Failure>, code: &str, what: &str) {
    let failure = result.expect_err(what);
    assert_eq!(
        (failure.code.as_str(), failure.kind),
        (code, FailureKind::InternalFault),
        "{what}"
    );
}

#[tokio::test]
async fn a_path_parameter_never_leaves_its_segment_nor_the_tenant() {
    let w = world().await;
    let paid = |id: &str| json!({"payment_id": id, "key": "k-1"});
    w.run("record_payment", paid("p1")).await.expect("sent");
    assert_eq!(w.last_path(), format!("{TENANT}/payments/p1/record"));

    for id in ["..", ".", ""] {
        defect(w.run("record_payment", paid(id)).await, "call.path_segment_invalid", id);
        defect(w.run("top_level", paid(id)).await, "call.path_segment_invalid", id);
    }
    assert_eq!(w.provider.calls(), 1, "nothing was sent for them");

    // Anything else is one segment, encoded, under the tenant.
    for (id, segment) in [
        ("%2E%2E", "%252E%252E"),
        ("...", "..."),
        ("../..", "..%2F.."),
        ("a\\..", "a%5C.."),
    ] {
        w.run("top_level", paid(id)).await.expect(id);
        assert_eq!(w.last_path(), format!("{TENANT}/{segment}/record"), "{id}");
    }
}

#[tokio::test]
async fn an_idempotency_key_from_an_event_is_checked_as_an_emits() {
    let w = world().await;
    let paid = |key: &str| json!({"payment_id": "p1", "key": key});
    w.run("record_payment", paid("k-1")).await.expect("sent");
    let sent = w.provider.requests().remove(0);
    assert_eq!(sent.header("idempotency-key"), Some("k-1"));
    let longest = "k".repeat(255);
    w.run("record_payment", paid(&longest)).await.expect("255 bytes");
    assert_eq!(
        w.provider.requests()[1].header("idempotency-key"),
        Some(longest.as_str())
    );

    for key in [
        String::new(),
        "k".repeat(256),
        "k".repeat(10_000),
        "é-ключ".into(),
        "a\u{7f}".into(),
    ] {
        defect(
            w.run("record_payment", paid(&key)).await,
            "call.idempotency_key_invalid",
            &key,
        );
    }
    assert_eq!(w.provider.calls(), 2, "nothing was sent for them");
}
