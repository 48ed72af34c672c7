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
//! arrives (at least once with its key, or exactly once on NATS).

mod broker_support;

use broker_support::*;
use jadpo_core::{CallVerdict, FailureKind};
use jadpo_runtime::connection::broker::PublishRequest;
use std::sync::Arc;
use std::time::Duration;

mod redis_stream {
    use super::*;
    use redis::AsyncCommands;

    /// A stream of its own on the shared server, made as a consumer would.
    async fn stream(conn: &mut redis::aio::MultiplexedConnection) -> String {
        let key = format!("jadpo-test-{}", unique());
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg("readers")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(conn)
            .await
            .unwrap();
        key
    }

    async fn shared() -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(SHARED_REDIS).unwrap();
        match client.get_multiplexed_async_connection().await {
            Ok(c) => Some(c),
            Err(e) => {
                jadpo_testing::skip::missing(
                    &format!("Redis at {SHARED_REDIS}"),
                    &e.to_string(),
                    "start redis-server on 127.0.0.1:6379",
                );
                None
            }
        }
    }

    /// Every entry of `key`: its fields, in order.
    async fn entries(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<Vec<(String, String)>> {
        let reply: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(key)
            .arg("-")
            .arg("+")
            .query_async(conn)
            .await
            .unwrap();
        reply.into_iter().map(|(_, fields)| fields).collect()
    }

    #[tokio::test]
    async fn a_publish_is_one_entry_with_its_body_headers_and_key() {
        let Some(mut conn) = shared().await else { return };
        let key = stream(&mut conn).await;
        let connections = connections(
            r#"connection bus { driver: redis  url: env("BUS_URL")  headers: { "Source": "jadpo" }
               signing_secret: secret("BUS_SECRET") }"#,
            SHARED_REDIS,
        );
        let mut req = request("bus", &key);
        req.headers = vec![("Tenant".into(), "t1".into())];
        req.idempotency_key = Some("pay_1".into());
        req.trace = Some(jadpo_core::TraceContext::from_ids(7, 9, 1, None).unwrap());
        let out = publish(&connections, req).await;
        assert_eq!(out.result, Ok(()));
        assert_eq!((out.sends, out.verdict), (1, Some(CallVerdict::Answered)));

        let got = entries(&mut conn, &key).await;
        assert_eq!(got.len(), 1, "{got:?}");
        let fields = &got[0];
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "body",
                "source",
                "Tenant",
                "idempotency-key",
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "traceparent"
            ],
            "the body, then the connection's headers, the publish's and Jadpo's"
        );
        let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(field("body"), r#"{"id":"pay_1"}"#);
        assert_eq!((field("source"), field("Tenant")), ("jadpo".into(), "t1".into()));
        assert_eq!(field("idempotency-key"), "pay_1");
        assert_eq!(field("webhook-id"), "msg_1");
        let traceparent = field("traceparent");
        assert!(traceparent.starts_with(&format!("00-{:032x}-", 7)), "{traceparent}");
        let key_ = jadpo_runtime::connection::signing::SigningKey::from_secret(SECRET).unwrap();
        let ts: i64 = field("webhook-timestamp").parse().unwrap();
        assert!(key_.verify("msg_1", ts, field("body").as_bytes(), &field("webhook-signature")));
        let _: () = conn.del(&key).await.unwrap();
    }

    #[tokio::test]
    async fn a_stream_that_does_not_exist_fails_once_and_is_not_sent_again() {
        let Some(mut conn) = shared().await else { return };
        let key = format!("jadpo-test-missing-{}", unique());
        let connections = connections(
            r#"connection bus { driver: redis  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
            SHARED_REDIS,
        );
        let out = publish(&connections, request("bus", &key)).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("redis.no_target", FailureKind::NotFound)
        );
        assert_eq!(
            (out.sends, out.verdict),
            (1, Some(CallVerdict::Answered)),
            "an answer: not again"
        );
        let exists: bool = conn.exists(&key).await.unwrap();
        assert!(!exists, "no stream was made");
    }

    #[tokio::test]
    async fn a_key_of_another_type_is_refused() {
        let Some(mut conn) = shared().await else { return };
        let key = format!("jadpo-test-string-{}", unique());
        let _: () = conn.set(&key, "x").await.unwrap();
        let connections = connections(r#"connection bus { driver: redis  url: env("BUS_URL") }"#, SHARED_REDIS);
        let out = publish(&connections, request("bus", &key)).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("redis.refused", FailureKind::Rejected)
        );
        assert_eq!(out.verdict, Some(CallVerdict::Answered));
        let _: () = conn.del(&key).await.unwrap();
    }

    #[tokio::test]
    async fn max_len_trims_the_stream() {
        let Some(mut conn) = shared().await else { return };
        let key = stream(&mut conn).await;
        let connections = connections(
            r#"connection bus { driver: redis  url: env("BUS_URL")  max_len: 1 }"#,
            SHARED_REDIS,
        );
        for _ in 0..300 {
            assert_eq!(publish(&connections, request("bus", &key)).await.result, Ok(()));
        }
        let len: usize = redis::cmd("XLEN").arg(&key).query_async(&mut conn).await.unwrap();
        // `~`: Redis trims whole nodes (100 entries by default), never below
        // the length asked for.
        assert!((1..300).contains(&len), "{len}");
        let _: () = conn.del(&key).await.unwrap();
    }

    #[tokio::test]
    async fn an_unreachable_server_is_unavailable_and_counts_for_the_breaker() {
        let connections = connections(
            r#"connection bus { driver: redis  url: env("BUS_URL")  timeout: 2s }"#,
            &format!("redis://127.0.0.1:{}", closed_port()),
        );
        let out = publish(&connections, request("bus", "anything")).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("redis.never_left", FailureKind::Unavailable)
        );
        assert_eq!(out.verdict, Some(CallVerdict::Unavailable));
    }

    /// The outage through the engine, on a Redis of the test's own.
    #[tokio::test]
    async fn an_outage_holds_probes_and_releases_every_message() {
        outage(Outage::Redis).await;
    }
}

mod mixed {
    /// An HTTP and a broker connection in one action keep their rules.
    #[tokio::test]
    async fn a_broker_outage_holds_an_action_that_also_calls_http() {
        super::mixed_outage().await;
    }
}

mod nats_jetstream {
    use super::*;
    use async_nats::jetstream;
    use futures::StreamExt;

    /// A stream of its own on the shared server, capturing `SUBJECT.>`.
    async fn stream() -> Option<(jetstream::Context, String)> {
        let client = match async_nats::connect(SHARED_NATS).await {
            Ok(c) => c,
            Err(e) => {
                jadpo_testing::skip::missing(
                    &format!("NATS at {SHARED_NATS}"),
                    &e.to_string(),
                    "start nats-server -js on 127.0.0.1:4222",
                );
                return None;
            }
        };
        let js = jetstream::new(client);
        let name = format!("T{}", unique().replace('-', "_"));
        js.create_stream(jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            storage: jetstream::stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
        Some((js, name))
    }

    /// Every message of the stream: its headers and body.
    async fn messages(js: &jetstream::Context, name: &str) -> Vec<(async_nats::HeaderMap, String)> {
        let consumer = js
            .get_stream(name)
            .await
            .unwrap()
            .create_consumer(jetstream::consumer::pull::Config::default())
            .await
            .unwrap();
        let mut batch = consumer
            .fetch()
            .max_messages(100)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(m) = batch.next().await {
            let m = m.unwrap();
            out.push((
                m.headers.clone().unwrap_or_default(),
                String::from_utf8(m.payload.to_vec()).unwrap(),
            ));
        }
        js.delete_stream(name).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_publish_is_one_message_with_its_body_headers_and_key() {
        let Some((js, name)) = stream().await else { return };
        let connections = connections(
            r#"connection bus { driver: nats  url: env("BUS_URL")  headers: { "Source": "jadpo" } }"#,
            SHARED_NATS,
        );
        let mut req = request("bus", &format!("{name}.payments"));
        req.headers = vec![("Tenant".into(), "t1".into())];
        req.idempotency_key = Some("pay_1".into());
        let out = publish(&connections, req).await;
        assert_eq!(out.result, Ok(()));
        assert_eq!(out.verdict, Some(CallVerdict::Answered));
        let got = messages(&js, &name).await;
        assert_eq!(got.len(), 1);
        let (headers, body) = &got[0];
        assert_eq!(body, r#"{"id":"pay_1"}"#);
        let header = |n: &str| headers.get(n).map(|v| v.to_string());
        assert_eq!(header("source").as_deref(), Some("jadpo"));
        assert_eq!(header("Tenant").as_deref(), Some("t1"));
        assert_eq!(header("idempotency-key").as_deref(), Some("pay_1"));
        assert_eq!(
            headers
                .get(async_nats::header::NATS_MESSAGE_ID)
                .map(|v| v.to_string())
                .as_deref(),
            Some("pay_1")
        );
    }

    #[tokio::test]
    async fn a_resend_of_one_key_is_dropped_by_the_stream() {
        let Some((js, name)) = stream().await else { return };
        let connections = connections(r#"connection bus { driver: nats  url: env("BUS_URL") }"#, SHARED_NATS);
        for key in ["k1", "k1", "k2"] {
            let mut req = request("bus", &format!("{name}.payments"));
            req.idempotency_key = Some(key.into());
            assert_eq!(
                publish(&connections, req).await.result,
                Ok(()),
                "a duplicate is acknowledged too"
            );
        }
        assert_eq!(messages(&js, &name).await.len(), 2, "k1 once, k2 once");
    }

    #[tokio::test]
    async fn a_message_over_the_servers_limit_is_rejected_and_not_sent_again() {
        let Some((js, name)) = stream().await else { return };
        let connections = connections(
            r#"connection bus { driver: nats  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
            SHARED_NATS,
        );
        let mut req = request("bus", &format!("{name}.payments"));
        // The server's `max_payload` is 1 MiB unless it is set otherwise.
        req.body = Some(serde_json::json!({ "blob": "x".repeat(2 << 20) }));
        let out = publish(&connections, req).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("nats.too_large", FailureKind::Rejected)
        );
        assert_eq!((out.sends, out.verdict), (1, Some(CallVerdict::Answered)));
        assert!(messages(&js, &name).await.is_empty());
    }

    #[tokio::test]
    async fn a_subject_no_stream_captures_fails_once_and_is_not_sent_again() {
        let Some((js, name)) = stream().await else { return };
        let connections = connections(
            r#"connection bus { driver: nats  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
            SHARED_NATS,
        );
        let out = publish(&connections, request("bus", &format!("nowhere.{name}"))).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("nats.no_target", FailureKind::NotFound)
        );
        assert_eq!((out.sends, out.verdict), (1, Some(CallVerdict::Answered)));
        js.delete_stream(&name).await.unwrap();
    }

    #[tokio::test]
    async fn an_unreachable_server_is_unavailable_and_counts_for_the_breaker() {
        let connections = connections(
            r#"connection bus { driver: nats  url: env("BUS_URL")  timeout: 2s }"#,
            &format!("nats://127.0.0.1:{}", closed_port()),
        );
        let out = publish(&connections, request("bus", "anything")).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("nats.never_left", FailureKind::Unavailable)
        );
        assert_eq!(out.verdict, Some(CallVerdict::Unavailable));
    }

    #[tokio::test]
    async fn an_outage_holds_probes_and_releases_every_message_once() {
        outage(Outage::Nats).await;
    }
}

mod amqp_rabbitmq {
    use super::*;

    /// A queue of its own on the shared server, bound to `amq.direct` by its
    /// name, and a channel to read it.
    async fn queue() -> Option<(lapin::Channel, String)> {
        if let Err(e) = lapin::Connection::connect(SHARED_AMQP, lapin::ConnectionProperties::default()).await {
            jadpo_testing::skip::missing(
                "RabbitMQ at 127.0.0.1:5672",
                &e.to_string(),
                "start rabbitmq-server (guest/guest)",
            );
            return None;
        }
        let channel = amqp_channel(SHARED_AMQP).await;
        let name = format!("jadpo-test-{}", unique());
        channel
            .queue_declare(name.as_str().into(), Default::default(), expiring())
            .await
            .unwrap();
        channel
            .queue_bind(
                name.as_str().into(),
                "amq.direct".into(),
                name.as_str().into(),
                Default::default(),
                Default::default(),
            )
            .await
            .unwrap();
        Some((channel, name))
    }

    const DIRECT: &str =
        r#"connection bus { driver: amqp  url: env("BUS_URL")  exchange: "amq.direct"  retry: { attempts: 3 } }"#;

    #[tokio::test]
    async fn a_publish_is_one_persistent_message_with_its_body_headers_and_key() {
        let Some((channel, name)) = queue().await else { return };
        let connections = connections(
            r#"connection bus { driver: amqp  url: env("BUS_URL")  exchange: "amq.direct"  headers: { "Source": "jadpo" } }"#,
            SHARED_AMQP,
        );
        let mut req = request("bus", &name);
        req.headers = vec![("Tenant".into(), "t1".into())];
        req.idempotency_key = Some("pay_1".into());
        let out = publish(&connections, req).await;
        assert_eq!(out.result, Ok(()));
        assert_eq!(out.verdict, Some(CallVerdict::Answered));
        let got = amqp_messages(&channel, &name).await;
        assert_eq!(got.len(), 1);
        let m = &got[0];
        assert_eq!(m.body, r#"{"id":"pay_1"}"#);
        assert_eq!(m.message_id.as_deref(), Some("pay_1"));
        assert_eq!(m.delivery_mode, Some(2), "persistent");
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert_eq!(m.headers.get("source").map(String::as_str), Some("jadpo"));
        assert_eq!(m.headers.get("Tenant").map(String::as_str), Some("t1"));
        assert_eq!(m.headers.get("idempotency-key").map(String::as_str), Some("pay_1"));
    }

    #[tokio::test]
    async fn an_unroutable_message_fails_once_and_is_not_sent_again() {
        let connections = connections(DIRECT, SHARED_AMQP);
        if queue().await.is_none() {
            return;
        }
        let out = publish(&connections, request("bus", &format!("nobody-{}", unique()))).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("amqp.no_target", FailureKind::NotFound)
        );
        assert_eq!((out.sends, out.verdict), (1, Some(CallVerdict::Answered)));
    }

    #[tokio::test]
    async fn an_exchange_that_does_not_exist_fails_and_the_next_publish_still_goes() {
        let Some((channel, name)) = queue().await else { return };
        let connections = connections(
            r#"connection nowhere { driver: amqp  url: env("BUS_URL")  exchange: "jadpo-no-such-exchange" }
               connection bus { driver: amqp  url: env("BUS_URL")  exchange: "amq.direct" }"#,
            SHARED_AMQP,
        );
        let out = publish(&connections, request("nowhere", &name)).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("amqp.no_target", FailureKind::NotFound)
        );
        // The broker closed that channel; the connection opens another.
        let again = publish(&connections, request("nowhere", &name)).await;
        assert_eq!(again.result.unwrap_err().code, "amqp.no_target");
        assert_eq!(publish(&connections, request("bus", &name)).await.result, Ok(()));
        assert_eq!(amqp_messages(&channel, &name).await.len(), 1);
    }

    #[tokio::test]
    async fn a_refused_login_is_unauthorized() {
        if queue().await.is_none() {
            return;
        }
        let connections = connections(
            r#"connection bus { driver: amqp  url: env("BUS_URL")  exchange: "amq.direct" }"#,
            "amqp://guest:wrong@127.0.0.1:5672/%2f",
        );
        let out = publish(&connections, request("bus", "x")).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("amqp.unauthorized", FailureKind::Unauthorized)
        );
        assert_eq!(out.verdict, Some(CallVerdict::Answered));
    }

    #[tokio::test]
    async fn an_unreachable_server_is_unavailable_and_counts_for_the_breaker() {
        let connections = connections(
            r#"connection bus { driver: amqp  url: env("BUS_URL")  timeout: 2s }"#,
            &format!("amqp://guest:guest@127.0.0.1:{}/%2f", closed_port()),
        );
        let out = publish(&connections, request("bus", "x")).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("amqp.never_left", FailureKind::Unavailable)
        );
        assert_eq!(out.verdict, Some(CallVerdict::Unavailable));
    }

    /// The outage through the engine, RabbitMQ behind a proxy the test
    /// cuts.
    #[tokio::test]
    async fn an_outage_holds_probes_and_releases_every_message() {
        outage(Outage::Amqp).await;
    }
}

mod mqtt_mosquitto {
    use super::*;

    async fn reachable() -> bool {
        match tokio::net::TcpStream::connect("127.0.0.1:1883").await {
            Ok(_) => true,
            Err(e) => {
                jadpo_testing::skip::missing("Mosquitto at 127.0.0.1:1883", &e.to_string(), "start mosquitto");
                false
            }
        }
    }

    #[tokio::test]
    async fn a_publish_is_one_message_with_its_body_user_properties_and_key() {
        if !reachable().await {
            return;
        }
        let topic = format!("jadpo-test/{}", unique());
        let got = mqtt_subscribe(&format!("{topic}/#")).await;
        let connections = connections(
            r#"connection bus { driver: mqtt  url: env("BUS_URL")  headers: { "Source": "jadpo" } }"#,
            "mqtt://127.0.0.1:1883",
        );
        let mut req = request("bus", &format!("{topic}/payments"));
        req.headers = vec![("Tenant".into(), "t1".into())];
        req.idempotency_key = Some("pay_1".into());
        let out = publish(&connections, req).await;
        assert_eq!(out.result, Ok(()));
        assert_eq!(out.verdict, Some(CallVerdict::Answered));
        jadpo_testing::wait::until_async("the subscriber's copy", || async { !got.lock().unwrap().is_empty() }).await;
        let m = got.lock().unwrap()[0].clone();
        assert_eq!(m.topic, format!("{topic}/payments"));
        assert_eq!(m.body, r#"{"id":"pay_1"}"#);
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert_eq!(m.user_properties.get("source").map(String::as_str), Some("jadpo"));
        assert_eq!(m.user_properties.get("Tenant").map(String::as_str), Some("t1"));
        assert_eq!(
            m.user_properties.get("idempotency-key").map(String::as_str),
            Some("pay_1")
        );
    }

    #[tokio::test]
    async fn publishes_side_by_side_each_get_their_own_puback() {
        if !reachable().await {
            return;
        }
        let topic = format!("jadpo-test/{}", unique());
        let got = mqtt_subscribe(&format!("{topic}/#")).await;
        let connections = Arc::new(connections(
            r#"connection bus { driver: mqtt  url: env("BUS_URL") }"#,
            "mqtt://127.0.0.1:1883",
        ));
        let publishes = (0..200).map(|i| {
            let connections = connections.clone();
            let mut req = request("bus", &format!("{topic}/p{i}"));
            req.idempotency_key = Some(format!("k{i}"));
            tokio::spawn(async move { publish(&connections, req).await })
        });
        for p in publishes.collect::<Vec<_>>() {
            let out = p.await.unwrap();
            assert_eq!((out.result, out.sends), (Ok(()), 1));
        }
        jadpo_testing::wait::until_async("200 copies", || async { got.lock().unwrap().len() >= 200 }).await;
    }

    #[tokio::test]
    async fn an_unreachable_server_is_unavailable_and_counts_for_the_breaker() {
        let connections = connections(
            r#"connection bus { driver: mqtt  url: env("BUS_URL")  timeout: 2s }"#,
            &format!("mqtt://127.0.0.1:{}", closed_port()),
        );
        let out = publish(&connections, request("bus", "x")).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("mqtt.never_left", FailureKind::Unavailable)
        );
        assert_eq!(out.verdict, Some(CallVerdict::Unavailable));
    }

    /// The outage through the engine, Mosquitto behind a proxy the test
    /// cuts.
    #[tokio::test]
    async fn an_outage_holds_probes_and_releases_every_message() {
        outage(Outage::Mqtt).await;
    }
}

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
