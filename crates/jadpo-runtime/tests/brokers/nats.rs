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
async fn a_publish_is_one_signed_message_with_its_body_headers_and_key() {
    let Some((js, name)) = stream().await else { return };
    let connections = connections(
        r#"connection bus { driver: nats  url: env("BUS_URL")  headers: { "Source": "jadpo" }
           signing_secret: secret("BUS_SECRET") }"#,
        SHARED_NATS,
    );
    let mut req = request("bus", &format!("{name}.payments"));
    req.headers = vec![("Tenant".into(), "t1".into())];
    req.idempotency_key = Some("pay_1".into());
    req.trace = Some(jadpo_core::TraceContext::from_ids(7, 9, 1, None).unwrap());
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
    assert_signed(header, body);
    assert_traced(header);
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

/// A server that asks for a user and password refuses a wrong one:
/// `unauthorized`, answered, and not sent again.
#[tokio::test]
async fn a_refused_login_is_unauthorized() {
    use jadpo_testing::broker_server::{BrokerServer, Kind};
    let Some(server) = BrokerServer::start_with(Kind::Nats, &["--user", "jadpo", "--pass", "right"], &[]) else {
        return;
    };
    let connections = connections(
        r#"connection bus { driver: nats  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
        &format!("nats://jadpo:wrong@127.0.0.1:{}", server.port()),
    );
    let out = publish(&connections, request("bus", "payments")).await;
    assert_refused(&out, "nats.unauthorized", FailureKind::Unauthorized);
    assert_eq!(out.sends, 1);
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
