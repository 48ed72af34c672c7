//! How the tests read what a broker received, as a consumer would: an
//! AMQP queue's messages, an MQTT subscriber's.

use super::unique;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A channel to the broker at `url`.
pub(crate) async fn amqp_channel(url: &str) -> lapin::Channel {
    let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ at {url}: {e}"));
    let channel = connection.create_channel().await.unwrap();
    // The connection lives as long as the process: a test's channels are few.
    std::mem::forget(connection);
    channel
}

/// One message as a consumer reads it.
pub(crate) struct AmqpMessage {
    pub(crate) body: String,
    pub(crate) message_id: Option<String>,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) delivery_mode: Option<u8>,
    pub(crate) content_type: Option<String>,
}

/// Every message in `queue`, taken off it.
pub(crate) async fn amqp_messages(channel: &lapin::Channel, queue: &str) -> Vec<AmqpMessage> {
    let mut out = Vec::new();
    while let Some(m) = channel
        .basic_get(queue.into(), lapin::options::BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let p = &m.delivery.properties;
        let headers = p
            .headers()
            .as_ref()
            .map(|t| {
                t.inner()
                    .iter()
                    .map(|(k, v)| {
                        let text = match v {
                            lapin::types::AMQPValue::LongString(s) => {
                                String::from_utf8_lossy(s.as_bytes()).into_owned()
                            }
                            other => format!("{other:?}"),
                        };
                        (k.to_string(), text)
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(AmqpMessage {
            body: String::from_utf8(m.delivery.data.clone()).unwrap(),
            message_id: p.message_id().as_ref().map(|s| s.to_string()),
            headers,
            delivery_mode: *p.delivery_mode(),
            content_type: p.content_type().as_ref().map(|s| s.to_string()),
        });
    }
    out
}

/// One message as an MQTT subscriber reads it.
#[derive(Clone, Debug)]
pub(crate) struct MqttMessage {
    pub(crate) topic: String,
    pub(crate) body: String,
    pub(crate) user_properties: BTreeMap<String, String>,
    pub(crate) content_type: Option<String>,
}

/// A subscriber on the shared Mosquitto to `filter`, at QoS 1, subscribed
/// when this returns; what it receives is pushed as it comes.
pub(crate) async fn mqtt_subscribe(filter: &str) -> Arc<std::sync::Mutex<Vec<MqttMessage>>> {
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let options = MqttOptions::new(format!("jadpo-test-{}", unique()), "127.0.0.1", 1883);
    let (client, mut events) = AsyncClient::new(options, 100);
    client
        .subscribe(filter, rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
        .await
        .unwrap();
    let got: Arc<std::sync::Mutex<Vec<MqttMessage>>> = Arc::default();
    let (subscribed, wait) = tokio::sync::oneshot::channel();
    let kept = got.clone();
    tokio::spawn(async move {
        let _client = client;
        let mut subscribed = Some(subscribed);
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(s) = subscribed.take() {
                        let _ = s.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let props = p.properties.clone().unwrap_or_default();
                    kept.lock().unwrap().push(MqttMessage {
                        topic: String::from_utf8_lossy(&p.topic).into_owned(),
                        body: String::from_utf8_lossy(&p.payload).into_owned(),
                        user_properties: props.user_properties.into_iter().collect(),
                        content_type: props.content_type,
                    });
                }
                Ok(_) => {}
                Err(e) => panic!("the test's MQTT subscriber failed: {e}"),
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("SUBACK within 10 s")
        .unwrap();
    got
}

/// A test queue's arguments: RabbitMQ deletes it after a minute unused, so
/// the shared server keeps none.
pub(crate) fn expiring() -> lapin::types::FieldTable {
    let mut args = lapin::types::FieldTable::default();
    args.insert("x-expires".into(), lapin::types::AMQPValue::LongInt(60_000));
    args
}
