//! Publishing to real brokers: the shared servers started before every
//! session and CI (Redis at 127.0.0.1:6379, NATS with JetStream at
//! 127.0.0.1:4222), and servers of the test's own, killed and started
//! again, for an outage through the real engine and a clock the test moves.
//!
//! Per driver: a publish a consumer reads with its body, headers and key;
//! a missing target that fails with its code and is not sent again; an
//! unreachable broker that is `unavailable`; an outage that opens the
//! breaker, holds the deliveries without spending attempts, probes with a
//! real publish, releases them once the broker is back, and every message
//! arrives (at least once with its key, or exactly once on NATS). Above
//! the drivers, the engine's `rate:`, `concurrency:` and capabilities hold
//! a broker connection as an HTTP one (`brokers/rules.rs`).

mod broker_support;

use broker_support::*;
use jadpo_core::{CallVerdict, FailureKind};
use jadpo_runtime::connection::broker::PublishRequest;
use std::sync::Arc;
use std::time::Duration;

#[path = "brokers/redis.rs"]
mod redis_stream;

#[path = "brokers/rules.rs"]
mod rules;

mod mixed {
    /// An HTTP and a broker connection in one action keep their rules.
    #[tokio::test]
    async fn a_broker_outage_holds_an_action_that_also_calls_http() {
        super::mixed_outage().await;
    }
}

#[path = "brokers/nats.rs"]
mod nats_jetstream;

#[path = "brokers/amqp.rs"]
mod amqp_rabbitmq;

#[path = "brokers/mqtt.rs"]
mod mqtt_mosquitto;

/// A publish of `{"id":"pay_1"}` to `target`, its message id `msg_1`.
fn request(connection: &str, target: &str) -> PublishRequest {
    PublishRequest {
        connection: connection.into(),
        target: target.into(),
        target_template: "{stream}".into(),
        body: Some(serde_json::json!({"id": "pay_1"})),
        headers: vec![],
        idempotency_key: None,
        message_id: "msg_1".into(),
        trace: None,
        spans: Default::default(),
    }
}

async fn publish(
    connections: &jadpo_runtime::connection::Connections,
    req: PublishRequest,
) -> jadpo_runtime::connection::broker::PublishOutcome {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    connections.publish(req, deadline, 1).await
}
