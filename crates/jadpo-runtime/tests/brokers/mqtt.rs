use super::*;
use jadpo_testing::broker_server::{BrokerServer, Kind};

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
async fn a_publish_is_one_signed_message_with_its_body_user_properties_and_key() {
    if !reachable().await {
        return;
    }
    let topic = format!("jadpo-test/{}", unique());
    let got = mqtt_subscribe(&format!("{topic}/#")).await;
    let connections = connections(
        r#"connection bus { driver: mqtt  url: env("BUS_URL")  headers: { "Source": "jadpo" }
           signing_secret: secret("BUS_SECRET") }"#,
        "mqtt://127.0.0.1:1883",
    );
    let mut req = request("bus", &format!("{topic}/payments"));
    req.headers = vec![("Tenant".into(), "t1".into())];
    req.idempotency_key = Some("pay_1".into());
    req.trace = Some(jadpo_core::TraceContext::from_ids(7, 9, 1, None).unwrap());
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
    assert_signed(|n| m.user_properties.get(n).cloned(), &m.body);
    assert_traced(|n| m.user_properties.get(n).cloned());
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

/// A server that lets no anonymous client in refuses the connect:
/// `unauthorized`, answered, and not sent again.
#[tokio::test]
async fn a_refused_login_is_unauthorized() {
    let Some(server) = BrokerServer::start_with(Kind::Mqtt, &["allow_anonymous false"], &[]) else {
        return;
    };
    let connections = connections(
        r#"connection bus { driver: mqtt  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
        &server.url(),
    );
    let out = publish(&connections, request("bus", "payments")).await;
    assert_refused(&out, "mqtt.unauthorized", FailureKind::Unauthorized);
    assert_eq!(out.sends, 1);
}

/// A topic the server's access list does not let this client write to:
/// the `PUBACK` says so (MQTT 5 reason 0x87), the publish is
/// `unauthorized`, not sent again, and the link still carries the next
/// publish to a topic it may write.
#[tokio::test]
async fn a_publish_the_access_list_refuses_is_unauthorized_and_the_next_goes() {
    let Some(server) = BrokerServer::start_with(
        Kind::Mqtt,
        &["allow_anonymous true", "acl_file {dir}/acl"],
        &[("acl", "topic write allowed/#\ntopic read #\n")],
    ) else {
        return;
    };
    let connections = connections(
        r#"connection bus { driver: mqtt  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
        &server.url(),
    );
    let out = publish(&connections, request("bus", "denied/payments")).await;
    assert_refused(&out, "mqtt.unauthorized", FailureKind::Unauthorized);
    assert_eq!(out.sends, 1);
    let out = publish(&connections, request("bus", "allowed/payments")).await;
    assert_eq!((out.result, out.sends), (Ok(()), 1));
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
