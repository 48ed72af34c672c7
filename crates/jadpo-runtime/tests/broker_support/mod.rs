//! Shared by the broker tests: connections from an app file, and an outage
//! through the real engine on a broker server of the test's own.
#![allow(dead_code)]

mod consumers;
mod mixed;

pub(crate) use consumers::*;
pub(crate) use mixed::mixed_outage;

use jadpo_core::{BreakerPolicy, BreakerState, DeliveryState, Timestamp};
use jadpo_runtime::connection::Connections;
use jadpo_runtime::interpreter::AppExecutor;
use jadpo_runtime::{Catalog, Engine, ManualClock, WorkerConfig};
use jadpo_store::{DeliveryFilter, SharedMemoryStore, Store};
use jadpo_testing::broker_server::{BrokerServer, Kind};
use jadpo_testing::wait::until_async as eventually;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub(crate) const SHARED_REDIS: &str = "redis://127.0.0.1:6379";
pub(crate) const SHARED_NATS: &str = "nats://127.0.0.1:4222";
pub(crate) const SHARED_AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// A name no other test run uses.
pub(crate) fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// A local port nothing listens on: 1 (tcpmux), which no server here runs.
pub(crate) fn closed_port() -> u16 {
    1
}

/// What `secret("BUS_SECRET")` reads.
pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The message carries Standard Webhooks headers that sign `body` with
/// [`SECRET`] under the request's message id, `msg_1`.
pub(crate) fn assert_signed(header: impl Fn(&str) -> Option<String>, body: &str) {
    let key = jadpo_runtime::connection::signing::SigningKey::from_secret(SECRET).unwrap();
    assert_eq!(header("webhook-id").as_deref(), Some("msg_1"));
    let at: i64 = header("webhook-timestamp")
        .expect("a webhook-timestamp")
        .parse()
        .expect("seconds");
    let signature = header("webhook-signature").expect("a webhook-signature");
    assert!(key.verify("msg_1", at, body.as_bytes(), &signature), "{signature}");
}

/// The message carries the run's trace on (trace id 7) as `traceparent`.
pub(crate) fn assert_traced(header: impl Fn(&str) -> Option<String>) {
    let traceparent = header("traceparent").expect("a traceparent");
    assert!(traceparent.starts_with(&format!("00-{:032x}-", 7)), "{traceparent}");
}

/// The outcome is a failure with `code` of `kind`, the broker having
/// answered it.
pub(crate) fn assert_refused(
    out: &jadpo_runtime::connection::broker::PublishOutcome,
    code: &str,
    kind: jadpo_core::FailureKind,
) {
    let failure = out.result.clone().unwrap_err();
    assert_eq!((failure.code.as_str(), failure.kind), (code, kind));
    assert_eq!(out.verdict, Some(jadpo_core::CallVerdict::Answered));
}

/// The connections of `source`, its `env("BUS_URL")` set to `url` and its
/// `secret("BUS_SECRET")` to [`SECRET`].
pub(crate) fn connections(source: &str, url: &str) -> Connections {
    let checked = jadpo_lang::check("test.jadpo", source);
    let rendered = checked.render(source);
    let app = checked.app.unwrap_or_else(|| panic!("{rendered}"));
    let url = url.to_owned();
    let env = |k: &str| match k {
        "BUS_URL" => Some(url.clone()),
        "BUS_SECRET" => Some(SECRET.to_owned()),
        _ => None,
    };
    Connections::resolve(&app, env).unwrap_or_else(|e| panic!("{e:?}"))
}

/// Which broker an outage runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outage {
    Redis,
    Nats,
    /// The shared RabbitMQ behind a proxy the test cuts: the queue is
    /// [`OUTAGE_QUEUE`], bound to `amq.direct`.
    Amqp,
    /// The shared Mosquitto behind a proxy the test cuts, a subscriber
    /// connected to it directly all along.
    Mqtt,
}

/// The queue an AMQP outage publishes to, through `amq.direct`: one per
/// test process, so runs side by side never share it.
static OUTAGE_QUEUE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("jadpo-outage-{}", unique()));

/// What goes down: a server of the test's own, or a proxy in front of the
/// shared one.
enum Down {
    Own(BrokerServer),
    Proxied(jadpo_testing::proxy::Proxy, String),
}

impl Down {
    async fn start(broker: Outage) -> Option<Down> {
        Some(match broker {
            Outage::Redis => Down::Own(BrokerServer::start(Kind::Redis)?),
            Outage::Nats => Down::Own(BrokerServer::start(Kind::Nats)?),
            Outage::Amqp => {
                let proxy = jadpo_testing::proxy::Proxy::start("127.0.0.1:5672").await;
                let url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", proxy.port());
                Down::Proxied(proxy, url)
            }
            Outage::Mqtt => {
                let proxy = jadpo_testing::proxy::Proxy::start("127.0.0.1:1883").await;
                let url = format!("mqtt://127.0.0.1:{}", proxy.port());
                Down::Proxied(proxy, url)
            }
        })
    }

    fn url(&self) -> String {
        match self {
            Down::Own(s) => s.url(),
            Down::Proxied(_, url) => url.clone(),
        }
    }

    fn kill(&mut self) {
        match self {
            Down::Own(s) => s.kill(),
            Down::Proxied(p, _) => {
                p.cut();
            }
        }
    }

    fn start_again(&mut self) {
        match self {
            Down::Own(s) => s.start_again(),
            Down::Proxied(p, _) => p.set(jadpo_testing::proxy::Mode::Up),
        }
    }
}

impl Outage {
    fn app(self) -> String {
        let (driver, settings, target) = match self {
            Outage::Redis => ("redis", "", "payments"),
            Outage::Nats => ("nats", "", "payments.{id}"),
            Outage::Amqp => ("amqp", r#"exchange: "amq.direct""#, OUTAGE_QUEUE.as_str()),
            Outage::Mqtt => ("mqtt", "", OUTAGE_TOPIC.as_str()),
        };
        format!(
            r#"
event Paid {{ id: string  amount: int }}
connection bus {{ driver: {driver}  url: env("BUS_URL")  timeout: 2s  {settings} }}
action announce(id: string) {{
    call bus.publish("{target}", body: event, headers: {{ "Amount": event.amount }}, idempotency_key: id)
}}
subscriber announce_payment {{ on: Paid  run: announce(event.id) }}
"#
        )
    }

    /// What the consumer does before any publish: a stream for the
    /// messages.
    async fn prepare(self, url: &str) {
        match self {
            Outage::Mqtt => {
                let filter = format!("{}/#", OUTAGE_QUEUE.as_str());
                let got = mqtt_subscribe(&filter).await;
                assert!(MQTT_RECEIVED.set(got).is_ok(), "one MQTT outage per test binary");
            }
            Outage::Redis => {
                let client = redis::Client::open(url).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let _: () = redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg("payments")
                    .arg("readers")
                    .arg("$")
                    .arg("MKSTREAM")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            Outage::Amqp => {
                let channel = amqp_channel(url).await;
                channel
                    .queue_declare(OUTAGE_QUEUE.as_str().into(), Default::default(), expiring())
                    .await
                    .unwrap();
                channel
                    .queue_bind(
                        OUTAGE_QUEUE.as_str().into(),
                        "amq.direct".into(),
                        OUTAGE_QUEUE.as_str().into(),
                        Default::default(),
                        Default::default(),
                    )
                    .await
                    .unwrap();
            }
            Outage::Nats => {
                let client = async_nats::connect(url).await.unwrap();
                let js = async_nats::jetstream::new(client);
                js.create_stream(async_nats::jetstream::stream::Config {
                    name: "PAYMENTS".into(),
                    subjects: vec!["payments.>".into()],
                    // The default file storage: the stream outlives a kill.
                    ..Default::default()
                })
                .await
                .unwrap();
            }
        }
    }

    /// Every message the consumer has, as (idempotency key, body).
    async fn received(self, url: &str) -> Vec<(String, String)> {
        match self {
            Outage::Redis => {
                let client = redis::Client::open(url).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let reply: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XRANGE")
                    .arg("payments")
                    .arg("-")
                    .arg("+")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                reply
                    .into_iter()
                    .map(|(_, f)| (f["idempotency-key"].clone(), f["body"].clone()))
                    .collect()
            }
            Outage::Mqtt => {
                let got = MQTT_RECEIVED.get().expect("prepared").clone();
                // The subscriber's copies come over its own connection, a
                // moment after each PUBACK.
                jadpo_testing::wait::until_async("every message at the subscriber", || async {
                    mqtt_keys(&got).len() >= 41
                })
                .await;
                let got = got.lock().unwrap();
                got.iter()
                    .map(|m| {
                        (
                            m.user_properties.get("idempotency-key").cloned().unwrap_or_default(),
                            m.body.clone(),
                        )
                    })
                    .collect()
            }
            Outage::Amqp => amqp_messages(&amqp_channel(url).await, &OUTAGE_QUEUE)
                .await
                .into_iter()
                .map(|m| (m.message_id.unwrap_or_default(), m.body))
                .collect(),
            Outage::Nats => {
                use futures::StreamExt;
                let client = async_nats::connect(url).await.unwrap();
                let js = async_nats::jetstream::new(client);
                let stream = js.get_stream("PAYMENTS").await.unwrap();
                let consumer = stream
                    .create_consumer(async_nats::jetstream::consumer::pull::Config {
                        deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                let mut out = Vec::new();
                let mut batch = consumer
                    .fetch()
                    .max_messages(1000)
                    .expires(Duration::from_secs(1))
                    .messages()
                    .await
                    .unwrap();
                while let Some(m) = batch.next().await {
                    let m = m.unwrap();
                    let headers = m.headers.clone().unwrap_or_default();
                    let key = headers
                        .get("idempotency-key")
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    let id = headers
                        .get(async_nats::header::NATS_MESSAGE_ID)
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    assert_eq!(key, id, "the key is the message id: {headers:?}");
                    out.push((key, String::from_utf8(m.payload.to_vec()).unwrap()));
                }
                out
            }
        }
    }
}

pub(crate) fn paid(n: usize) -> Vec<jadpo_store::NewEvent> {
    (0..n)
        .map(|i| jadpo_store::NewEvent {
            name: "Paid".into(),
            payload: format!(r#"{{"id":"p{i}","amount":{i}}}"#),
            subscribers: vec!["announce_payment".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect()
}

pub(crate) async fn count<S: Store>(store: &S, state: DeliveryState) -> usize {
    store
        .list(&DeliveryFilter {
            state: Some(state),
            ..Default::default()
        })
        .await
        .unwrap()
        .len()
}

pub(crate) async fn breaker<S: Store>(store: &S) -> Option<jadpo_store::BreakerView> {
    store
        .breakers()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.breaker.connection == "bus")
}

/// The real engine on `source`, its settings read through `env`, over a
/// store in memory and a clock the test moves.
pub(crate) fn engine(
    source: &str,
    env: impl Fn(&str) -> Option<String> + Clone,
) -> (
    Arc<SharedMemoryStore>,
    ManualClock,
    Engine<SharedMemoryStore, AppExecutor>,
) {
    engine_with(source, env, Vec::new())
}

/// As [`engine`], with Rust actions registered by name.
pub(crate) fn engine_with(
    source: &str,
    env: impl Fn(&str) -> Option<String> + Clone,
    rust: Vec<(&str, jadpo_runtime::interpreter::RustAction)>,
) -> (
    Arc<SharedMemoryStore>,
    ManualClock,
    Engine<SharedMemoryStore, AppExecutor>,
) {
    let checked = jadpo_lang::check("app.jadpo", source);
    let rendered = checked.render(source);
    let app = Arc::new(checked.app.unwrap_or_else(|| panic!("{rendered}")));
    let connections = Arc::new(Connections::resolve(&app, &env).unwrap_or_else(|e| panic!("{e:?}")));
    let mut executor = AppExecutor::new(app.clone(), connections, &env).unwrap_or_else(|e| panic!("{e:?}"));
    for (name, action) in rust {
        executor.register(name, action).unwrap_or_else(|e| panic!("{e}"));
    }
    let store = Arc::new(SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    let clock = ManualClock::new(T0);
    let config = WorkerConfig {
        name: "brokers".into(),
        concurrency: 4,
        ..WorkerConfig::default()
    };
    let engine = Engine::new(
        store.clone(),
        Arc::new(executor),
        Arc::new(clock.clone()),
        Catalog::from_app(&app),
        config,
    );
    (store, clock, engine)
}

/// The broker is killed before 40 events; the breaker opens, holds the
/// rest without spending their attempts, raises one alert, probes with a
/// real publish that fails while it is down, and once it is back the next
/// probe releases every held delivery. Every message arrives with its key
/// (on NATS exactly once: the stream drops a resend by its message id).
pub(crate) async fn outage(broker: Outage) {
    let Some(mut server) = Down::start(broker).await else {
        return;
    };
    let url = server.url();
    broker.prepare(&url).await;

    let url_ = url.clone();
    let (store, clock, engine) = engine(&broker.app(), move |k: &str| (k == "BUS_URL").then(|| url_.clone()));
    let running = engine.start();

    // One publish while it is up: the link is made, and then broken by
    // the kill, as a long-running process's would be.
    engine.emit(&paid(1)).await.unwrap();
    eventually("the first message", || async {
        count(&*store, DeliveryState::Succeeded).await == 1
    })
    .await;
    server.kill();
    let mut events = paid(41);
    events.remove(0);
    engine.emit(&events).await.unwrap();

    eventually("breaker open, the other 40 held or waiting", || async {
        breaker(&*store)
            .await
            .is_some_and(|b| b.breaker.state == BreakerState::Open)
            && count(&*store, DeliveryState::Held).await + count(&*store, DeliveryState::Due).await == 40
    })
    .await;
    clock.advance(Duration::from_secs(1));
    eventually("alert raised", || async {
        breaker(&*store).await.unwrap().breaker.alert_raised
    })
    .await;

    // After the pause a probe publishes, finds the broker down, and the
    // pause doubles.
    clock.advance(Duration::from_secs(60));
    eventually("the probe reopened it", || async {
        breaker(&*store).await.unwrap().breaker.pause == Duration::from_secs(120)
    })
    .await;

    server.start_again();
    clock.advance(Duration::from_secs(120));
    for i in 0..3000 {
        if count(&*store, DeliveryState::Succeeded).await == 41 {
            break;
        }
        if i % 50 == 49 {
            clock.advance(Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    let states: Vec<_> = all
        .iter()
        .map(|d| (d.id.0, d.state, d.attempts, d.last_failure.clone()))
        .collect();
    assert_eq!(count(&*store, DeliveryState::Succeeded).await, 41, "{states:?}");
    assert_eq!(breaker(&*store).await.unwrap().breaker.state, BreakerState::Closed);
    running.stop().await;

    // Held deliveries spent no attempt: only those that ran before the
    // breaker opened (five failures open it; the workers had four more
    // under way) were tried twice.
    let retried = all.iter().filter(|d| d.attempts > 1).count();
    assert!(retried <= 5 + 4, "{retried} tried more than once: {states:?}");
    assert!(all.iter().all(|d| d.attempts <= 3), "{states:?}");

    let received = broker.received(&url).await;
    let keys: std::collections::BTreeSet<&str> = received.iter().map(|(k, _)| k.as_str()).collect();
    let want: std::collections::BTreeSet<String> = (0..41).map(|i| format!("p{i}")).collect();
    assert_eq!(
        keys,
        want.iter().map(String::as_str).collect(),
        "every message arrived with its key"
    );
    for (key, body) in &received {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["id"], key.as_str(), "its own body");
    }
    if broker == Outage::Nats {
        assert_eq!(received.len(), 41, "exactly once: the stream dropped every resend");
    }
}

/// The topic an MQTT outage publishes to, under [`OUTAGE_QUEUE`].
static OUTAGE_TOPIC: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{}/payments/{{id}}", OUTAGE_QUEUE.as_str()));

/// What the MQTT outage's subscriber received.
static MQTT_RECEIVED: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<MqttMessage>>>> = std::sync::OnceLock::new();

fn mqtt_keys(got: &std::sync::Mutex<Vec<MqttMessage>>) -> std::collections::BTreeSet<String> {
    got.lock()
        .unwrap()
        .iter()
        .filter_map(|m| m.user_properties.get("idempotency-key").cloned())
        .collect()
}
