//! `--driver amqp|nats|redis|mqtt`: the subscriber publishes every
//! delivery to a broker (the machine's own by default, `--broker-url`),
//! and the baseline: a plain client loop of the same concurrency
//! publishing the same messages with the same confirmation (a publisher
//! confirm, a JetStream ack, `XADD`'s id, a `PUBACK`), the fastest the
//! engine could go to that broker.
//!
//! Each run publishes to a target of its own (a queue bound to
//! `amq.direct`, a JetStream stream, a Redis stream, an MQTT topic),
//! removed at the end.

use crate::output::CliError;
use jadpo_core::publish::Broker;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The variable the bench app reads the broker's URL from.
pub(super) const URL_VAR: &str = "JADPO_BENCH_BROKER_URL";

fn failed(why: impl std::fmt::Display) -> CliError {
    CliError::environment("bench.broker_failed", why.to_string())
}

/// `--driver`'s value.
pub(super) fn parse(text: &str) -> Result<Broker, CliError> {
    Broker::ALL.into_iter().find(|b| b.name() == text).ok_or_else(|| {
        CliError::environment(
            "bench.driver_invalid",
            format!("--driver {text:?}: one of amqp, nats, redis, mqtt"),
        )
    })
}

/// Where each broker listens on a machine set up as Jadpo's test machines
/// are.
pub(super) fn default_url(broker: Broker) -> &'static str {
    match broker {
        Broker::Amqp => "amqp://guest:guest@127.0.0.1:5672/%2f",
        Broker::Nats => "nats://127.0.0.1:4222",
        Broker::Redis => "redis://127.0.0.1:6379",
        Broker::Mqtt => "mqtt://127.0.0.1:1883",
    }
}

/// A run's own target: its name, and the target a publish names.
pub(super) struct Target {
    broker: Broker,
    url: String,
    name: String,
}

impl Target {
    /// What the app's publish names: the queue (through `amq.direct`), a
    /// subject of the stream, the stream's key, a topic.
    pub(super) fn published_to(&self) -> String {
        match self.broker {
            Broker::Nats => format!("{}.deliveries", self.name),
            Broker::Mqtt => format!("{}/deliveries", self.name),
            Broker::Amqp | Broker::Redis => self.name.clone(),
        }
    }

    /// The bench's app: one subscriber publishing each event.
    pub(super) fn app(&self) -> String {
        let exchange = match self.broker {
            Broker::Amqp => r#"exchange: "amq.direct""#,
            _ => "",
        };
        format!(
            "// `jadpo bench --driver {}`: one event, one subscriber publishing it.\n\
             event BenchEvent {{ n: int }}\n\
             connection sink {{ driver: {}  url: env(\"{URL_VAR}\")  timeout: 30s  {exchange} }}\n\
             action deliver(n: int) {{ call sink.publish(\"{}\", body: event) }}\n\
             subscriber bench {{ on: BenchEvent  run: deliver(event.n)  timeout: 1m }}\n",
            self.broker.name(),
            self.broker.name(),
            self.published_to()
        )
    }

    /// Makes the target, as a consumer would before any publish.
    pub(super) async fn make(broker: Broker, url: &str) -> Result<Target, CliError> {
        let name = format!("jadpo-bench-{:08x}", rand::random::<u32>());
        let target = Target {
            broker,
            url: url.to_owned(),
            name,
        };
        match broker {
            Broker::Amqp => {
                let (_conn, channel) = amqp(url).await?;
                channel
                    .queue_declare(target.name.as_str().into(), Default::default(), Default::default())
                    .await
                    .map_err(failed)?;
                channel
                    .queue_bind(
                        target.name.as_str().into(),
                        "amq.direct".into(),
                        target.name.as_str().into(),
                        Default::default(),
                        Default::default(),
                    )
                    .await
                    .map_err(failed)?;
            }
            Broker::Nats => {
                let js = nats(url).await?;
                js.create_stream(async_nats::jetstream::stream::Config {
                    name: target.name.clone(),
                    subjects: vec![format!("{}.>", target.name)],
                    ..Default::default()
                })
                .await
                .map_err(failed)?;
            }
            Broker::Redis => {
                let mut conn = redis(url).await?;
                redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(&target.name)
                    .arg("bench")
                    .arg("$")
                    .arg("MKSTREAM")
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(failed)?;
            }
            Broker::Mqtt => {}
        }
        Ok(target)
    }

    /// Removes it, and everything published to it.
    pub(super) async fn remove(&self) {
        match self.broker {
            Broker::Amqp => {
                if let Ok((_conn, channel)) = amqp(&self.url).await {
                    let _ = channel
                        .queue_delete(self.name.as_str().into(), Default::default())
                        .await;
                }
            }
            Broker::Nats => {
                if let Ok(js) = nats(&self.url).await {
                    let _ = js.delete_stream(&self.name).await;
                }
            }
            Broker::Redis => {
                if let Ok(mut conn) = redis(&self.url).await {
                    let _ = redis::cmd("DEL").arg(&self.name).query_async::<()>(&mut conn).await;
                }
            }
            Broker::Mqtt => {}
        }
    }

    /// Publishes `n` messages like the engine's (`{"n":i}`), `concurrency`
    /// waiting for their confirmation at a time; returns publishes a
    /// second.
    pub(super) async fn baseline(&self, n: u64, concurrency: usize) -> Result<f64, CliError> {
        let to = self.published_to();
        let started = Instant::now();
        match self.broker {
            Broker::Amqp => {
                let (_conn, channel) = amqp(&self.url).await?;
                channel.confirm_select(Default::default()).await.map_err(failed)?;
                loops(n, concurrency, move |i| {
                    let (channel, to) = (channel.clone(), to.clone());
                    async move {
                        let options = lapin::options::BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        };
                        let properties = lapin::BasicProperties::default().with_delivery_mode(2);
                        let confirm = channel
                            .basic_publish(
                                "amq.direct".into(),
                                to.as_str().into(),
                                options,
                                body(i).as_bytes(),
                                properties,
                            )
                            .await
                            .map_err(|e| e.to_string())?;
                        match confirm.await.map_err(|e| e.to_string())? {
                            lapin::Confirmation::Ack(None) => Ok(()),
                            other => Err(format!("not confirmed: {other:?}")),
                        }
                    }
                })
                .await?;
            }
            Broker::Nats => {
                let js = nats(&self.url).await?;
                loops(n, concurrency, move |i| {
                    let (js, to) = (js.clone(), to.clone());
                    async move {
                        js.publish(to, body(i).into_bytes().into())
                            .await
                            .map_err(|e| e.to_string())?
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                })
                .await?;
            }
            Broker::Redis => {
                let conn = redis(&self.url).await?;
                loops(n, concurrency, move |i| {
                    let (mut conn, to) = (conn.clone(), to.clone());
                    async move {
                        redis::cmd("XADD")
                            .arg(&to)
                            .arg("NOMKSTREAM")
                            .arg("*")
                            .arg("body")
                            .arg(body(i))
                            .query_async::<Option<String>>(&mut conn)
                            .await
                            .map_err(|e| e.to_string())?
                            .map(|_| ())
                            .ok_or_else(|| "no stream".to_owned())
                    }
                })
                .await?;
            }
            Broker::Mqtt => mqtt_baseline(&self.url, &to, n, concurrency).await?,
        }
        Ok(n as f64 / started.elapsed().as_secs_f64().max(1e-9))
    }
}

fn body(i: u64) -> String {
    format!("{{\"n\":{i}}}")
}

/// `concurrency` tasks publishing with `publish(i)` until `n` are done.
async fn loops<F, Fut>(n: u64, concurrency: usize, publish: F) -> Result<(), CliError>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks: tokio::task::JoinSet<Result<(), String>> = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(usize::try_from(n).unwrap_or(usize::MAX)) {
        let (next, publish) = (next.clone(), publish.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                publish(i).await?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(why)) => return Err(failed(format!("baseline publish: {why}"))),
            Err(e) => return Err(failed(format!("baseline task: {e}"))),
        }
    }
    Ok(())
}

/// MQTT's client reports `PUBACK`s as events: the loop keeps `concurrency`
/// publishes unacknowledged at most, one more going out per `PUBACK`.
async fn mqtt_baseline(url: &str, topic: &str, n: u64, concurrency: usize) -> Result<(), CliError> {
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    // `mqtt://HOST[:PORT]`: the baseline takes no credentials or TLS.
    let authority = url.strip_prefix("mqtt://").unwrap_or(url).trim_end_matches('/');
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().map_err(|_| failed(format!("no port in {url}")))?),
        None => (authority, 1883),
    };
    let id = format!("jadpo-bench-{:08x}", rand::random::<u32>());
    let options = MqttOptions::new(id, host, port);
    let (client, mut events) = AsyncClient::new(options, concurrency.max(1) * 2);
    let window = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let acks = Arc::new(AtomicU64::new(0));
    let poller = {
        let (window, acks) = (window.clone(), acks.clone());
        tokio::spawn(async move {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        window.add_permits(1);
                        if acks.fetch_add(1, Ordering::Relaxed) + 1 >= n {
                            return Ok(());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
    };
    for i in 0..n {
        window.acquire().await.map_err(failed)?.forget();
        client
            .publish(topic, rumqttc::v5::mqttbytes::QoS::AtLeastOnce, false, body(i))
            .await
            .map_err(failed)?;
    }
    match poller.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => Err(failed(format!("baseline: {why}"))),
        Err(e) => Err(failed(format!("baseline task: {e}"))),
    }
}

async fn amqp(url: &str) -> Result<(lapin::Connection, lapin::Channel), CliError> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .map_err(|e| failed(format!("RabbitMQ: {e}")))?;
    let channel = conn.create_channel().await.map_err(failed)?;
    Ok((conn, channel))
}

async fn nats(url: &str) -> Result<async_nats::jetstream::Context, CliError> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| failed(format!("NATS: {e}")))?;
    Ok(async_nats::jetstream::new(client))
}

async fn redis(url: &str) -> Result<redis::aio::MultiplexedConnection, CliError> {
    redis::Client::open(url)
        .map_err(failed)?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| failed(format!("Redis: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_drivers_app_checks_and_names_its_target() {
        for broker in Broker::ALL {
            let target = Target {
                broker,
                url: default_url(broker).to_owned(),
                name: "jadpo-bench-0a1b2c3d".to_owned(),
            };
            let app = jadpo::check_app("bench.jadpo", &target.app()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(app.connections["sink"].driver.broker(), Some(broker));
            assert!(target.app().contains(&format!("publish(\"{}\"", target.published_to())));
            assert_eq!(parse(broker.name()).unwrap(), broker);
        }
        assert_eq!(parse("kafka").unwrap_err().code, "bench.driver_invalid");
    }
}
