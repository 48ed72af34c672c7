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
async fn a_publish_is_one_persistent_signed_message_with_its_body_headers_and_key() {
    let Some((channel, name)) = queue().await else { return };
    let connections = connections(
        r#"connection bus { driver: amqp  url: env("BUS_URL")  exchange: "amq.direct"  headers: { "Source": "jadpo" }
           signing_secret: secret("BUS_SECRET") }"#,
        SHARED_AMQP,
    );
    let mut req = request("bus", &name);
    req.headers = vec![("Tenant".into(), "t1".into())];
    req.idempotency_key = Some("pay_1".into());
    req.trace = Some(jadpo_core::TraceContext::from_ids(7, 9, 1, None).unwrap());
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
    assert_signed(|n| m.headers.get(n).cloned(), &m.body);
    assert_traced(|n| m.headers.get(n).cloned());
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

/// A node under a memory alarm blocks its publishers. The first publish
/// is written before the broker blocks the connection and reads no more of
/// it: no confirm comes (`unconfirmed`), and the resend its key allows sees
/// the block and is not written (`overloaded`, counted for the breaker),
/// as is every publish after it, the blocked connection kept. Once the
/// alarm lifts, the first message goes in, once, and the next publish goes.
#[tokio::test]
async fn a_memory_alarm_is_overloaded_and_nothing_more_is_written_until_it_lifts() {
    use jadpo_testing::broker_server::{BrokerServer, Kind};
    let Some(server) = BrokerServer::start_with(Kind::Amqp, &["vm_memory_high_watermark.absolute = 1"], &[]) else {
        return;
    };
    let channel = amqp_channel(&server.url()).await;
    let queue = format!("jadpo-test-{}", unique());
    channel
        .queue_declare(queue.as_str().into(), Default::default(), Default::default())
        .await
        .unwrap();
    let connections = connections(
        r#"connection bus { driver: amqp  url: env("BUS_URL")  timeout: 1s  retry: { attempts: 2 } }"#,
        &server.url(),
    );
    let keyed = |key: &str| {
        let mut req = request("bus", &queue);
        req.idempotency_key = Some(key.into());
        req
    };
    for key in ["k1", "k2"] {
        let out = publish(&connections, keyed(key)).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("amqp.overloaded", FailureKind::Unavailable),
            "{key}"
        );
        assert_eq!((out.sends, out.verdict), (2, Some(CallVerdict::Unavailable)), "{key}");
    }
    assert!(amqp_messages(&channel, &queue).await.is_empty(), "nothing taken");

    server.rabbitmqctl(&["set_vm_memory_high_watermark", "0.4"]);
    jadpo_testing::wait::until_async("the alarm lifted, a publish confirmed", || async {
        publish(&connections, keyed("k3")).await.result.is_ok()
    })
    .await;
    let mut keys: Vec<String> = amqp_messages(&channel, &queue)
        .await
        .into_iter()
        .filter_map(|m| m.message_id)
        .collect();
    keys.sort();
    assert_eq!(keys, ["k1", "k3"], "the written one once, the refused one never");
}

/// The outage through the engine, RabbitMQ behind a proxy the test
/// cuts.
#[tokio::test]
async fn an_outage_holds_probes_and_releases_every_message() {
    outage(Outage::Amqp).await;
}
