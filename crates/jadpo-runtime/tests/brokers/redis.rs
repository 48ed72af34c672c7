use super::*;
use redis::AsyncCommands;

/// A stream of its own on the shared server, made as a consumer would.
pub(crate) async fn stream(conn: &mut redis::aio::MultiplexedConnection) -> String {
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

pub(crate) async fn shared() -> Option<redis::aio::MultiplexedConnection> {
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
pub(crate) async fn entries(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<Vec<(String, String)>> {
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
    let traceparent = field("traceparent");
    assert!(traceparent.starts_with(&format!("00-{:032x}-", 7)), "{traceparent}");
    assert_signed(|n| Some(field(n)), &field("body"));
    let _: () = conn.del(&key).await.unwrap();
}

/// Each send is a producer span in the run's trace, and the message
/// carries that span's context on, so the consumer's trace continues
/// from the publish.
#[tokio::test]
async fn a_publish_is_a_producer_span_whose_context_the_message_carries() {
    use opentelemetry::trace::TracerProvider as _;
    let Some(mut conn) = shared().await else { return };
    let key = stream(&mut conn).await;
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = opentelemetry::global::BoxedTracer::new(Box::new(provider.tracer("test")));
    let connections = connections(r#"connection bus { driver: redis  url: env("BUS_URL") }"#, SHARED_REDIS);
    let mut req = request("bus", &key);
    req.trace = Some(jadpo_core::TraceContext::from_ids(7, 9, 1, None).unwrap());
    req.spans = jadpo_runtime::spans::Spans::to(tracer);
    assert_eq!(publish(&connections, req).await.result, Ok(()));
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.name, "publish {stream}", "the target as written");
    assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Producer);
    assert_eq!(span.span_context.trace_id().to_string(), format!("{:032x}", 7));
    let attr = |k: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attr("messaging.system").as_deref(), Some("redis"));
    assert_eq!(attr("jadpo.connection").as_deref(), Some("bus"));
    let got = entries(&mut conn, &key).await;
    let traceparent = got[0].iter().find(|(n, _)| n == "traceparent").unwrap().1.clone();
    assert_eq!(traceparent, format!("00-{:032x}-{}-01", 7, span.span_context.span_id()));
    let _: () = conn.del(&key).await.unwrap();
}

/// A Rust action (`uses bus`) publishes through its handle, with the same
/// message an app file's `publish` makes.
#[tokio::test]
async fn a_rust_action_publishes_through_its_handle() {
    let Some(mut conn) = shared().await else { return };
    let key = stream(&mut conn).await;
    let source = r#"
event Paid { id: string  amount: int }
connection bus { driver: redis  url: env("BUS_URL") }
action announce(id: string) uses bus
subscriber announce_payment { on: Paid  run: announce(event.id) }
"#;
    let target = key.clone();
    let action: jadpo_runtime::interpreter::RustAction = Arc::new(move |args, handle| {
        let target = target.clone();
        Box::pin(async move {
            let id = args.args["id"].as_str().unwrap_or_default().to_owned();
            let headers = vec![("Kind".to_owned(), "paid".to_owned())];
            let body = Some(serde_json::json!({ "id": id }));
            handle.publish("bus", &target, body, headers, Some(id)).await
        })
    });
    let env = |k: &str| (k == "BUS_URL").then(|| SHARED_REDIS.to_owned());
    let (store, _clock, engine) = engine_with(source, env, vec![("announce", action)]);
    let running = engine.start();
    engine.emit(&paid(3)).await.unwrap();
    jadpo_testing::wait::until_async("three published", || async {
        count(&*store, jadpo_core::DeliveryState::Succeeded).await == 3
    })
    .await;
    running.stop().await;
    let got = entries(&mut conn, &key).await;
    let mut keys: Vec<String> = got
        .iter()
        .map(|fields| {
            let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap();
            assert_eq!(field("Kind"), "paid");
            assert_eq!(field("body"), format!(r#"{{"id":"{}"}}"#, field("idempotency-key")));
            field("idempotency-key")
        })
        .collect();
    keys.sort();
    assert_eq!(keys, ["p0", "p1", "p2"]);
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

/// A header value from an event holding a line break or a NUL is refused
/// before anything is sent (no broker is reached: nothing listens there).
#[tokio::test]
async fn a_header_value_with_a_control_character_is_never_sent() {
    let connections = connections(
        r#"connection bus { driver: redis  url: env("BUS_URL") }"#,
        &format!("redis://127.0.0.1:{}", closed_port()),
    );
    for value in ["a\r\nNats-Msg-Id: x", "a\u{0}b", "tab\there"] {
        let mut req = request("bus", "anything");
        req.headers = vec![("Tenant".into(), value.into())];
        let out = publish(&connections, req).await;
        let failure = out.result.unwrap_err();
        assert_eq!(
            (failure.code.as_str(), failure.kind),
            ("publish.header_value_invalid", FailureKind::InternalFault)
        );
        assert_eq!((out.sends, out.verdict), (0, None), "{value:?}");
    }
}

/// A server that asks for a password refuses a wrong one: `unauthorized`,
/// answered, and not sent again.
#[tokio::test]
async fn a_refused_password_is_unauthorized() {
    use jadpo_testing::broker_server::{BrokerServer, Kind};
    let Some(server) = BrokerServer::start_with(Kind::Redis, &["--requirepass", "right"], &[]) else {
        return;
    };
    let connections = connections(
        r#"connection bus { driver: redis  url: env("BUS_URL")  retry: { attempts: 3 } }"#,
        &format!("redis://:wrong@127.0.0.1:{}", server.port()),
    );
    let out = publish(&connections, request("bus", "payments")).await;
    assert_refused(&out, "redis.unauthorized", FailureKind::Unauthorized);
    assert_eq!(out.sends, 1);
}

/// A server over its `maxmemory` refuses writes (`OOM`): the broker is
/// overloaded, `unavailable` for the breaker, and the connection's
/// `retry:` sends again; under its limit again, the next publish goes.
#[tokio::test]
async fn a_server_out_of_memory_is_overloaded_and_counts_for_the_breaker() {
    use jadpo_testing::broker_server::{BrokerServer, Kind};
    let Some(server) = BrokerServer::start(Kind::Redis) else {
        return;
    };
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = stream(&mut conn).await;
    let limit = |bytes: &'static str| redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(bytes).clone();
    let _: () = limit("1").query_async(&mut conn).await.unwrap();
    let connections = connections(
        r#"connection bus { driver: redis  url: env("BUS_URL")  retry: { attempts: 2 } }"#,
        &server.url(),
    );
    let out = publish(&connections, request("bus", &key)).await;
    let failure = out.result.unwrap_err();
    assert_eq!(
        (failure.code.as_str(), failure.kind),
        ("redis.overloaded", FailureKind::Unavailable)
    );
    assert_eq!((out.sends, out.verdict), (2, Some(CallVerdict::Unavailable)));
    let _: () = limit("0").query_async(&mut conn).await.unwrap();
    assert_eq!(publish(&connections, request("bus", &key)).await.result, Ok(()));
    assert_eq!(entries(&mut conn, &key).await.len(), 1);
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
