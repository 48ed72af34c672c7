//! `driver: mqtt`: an MQTT 5 publish at QoS 1, confirmed by the broker's
//! `PUBACK`. The headers go as user properties, the body as the payload
//! with `content_type` `application/json`.
//!
//! The client (rumqttc) hands publishes to its event loop and reports their
//! packet ids and `PUBACK`s as events, not as answers to each publish. The
//! event loop takes requests in the order they were handed over, so the
//! `n`-th publish handed over is the `n`-th `Outgoing::Publish` event: each
//! publish waits in that order for its packet id, then by packet id for its
//! `PUBACK`. One task per connection polls the event loop; it ends with the
//! connection (the link makes a new one on the next publish) rather than
//! reconnecting and resending behind the publishes' backs.

use super::link::Link;
use super::Message;
use jadpo_core::publish::PublishEnd;
use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, Packet, PubAckReason, PublishProperties};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, StateError};
use rumqttc::Outgoing;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

pub(crate) struct Mqtt {
    host: String,
    port: u16,
    tls: bool,
    credentials: Option<(String, String)>,
    link: Link<Arc<Session>>,
}

/// One connection: its client and what its publishes wait for.
struct Session {
    client: AsyncClient,
    waiting: Arc<Mutex<Waiting>>,
    /// Held from handing a publish's waiter over to handing the publish
    /// over, so both queues keep one order.
    order: tokio::sync::Mutex<()>,
    alive: Arc<AtomicBool>,
    poller: tokio::task::AbortHandle,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

#[derive(Default)]
struct Waiting {
    /// Handed to the event loop, not yet given a packet id: not sent.
    unsent: VecDeque<oneshot::Sender<PublishEnd>>,
    /// Sent, by packet id, waiting for the `PUBACK`.
    sent: HashMap<u16, oneshot::Sender<PublishEnd>>,
}

impl Mqtt {
    /// Reads the URL (`mqtt://user:pass@host:port`, `mqtts://` for TLS);
    /// connects on the first publish.
    pub(crate) fn new(url: &str) -> Result<Mqtt, String> {
        let url = url::Url::parse(url).map_err(|e| e.to_string())?;
        let tls = url.scheme() == "mqtts";
        let host = url.host_str().ok_or("it has no host")?.to_owned();
        let port = url.port().unwrap_or(if tls { 8883 } else { 1883 });
        let credentials = (!url.username().is_empty()).then(|| {
            let decode = |s: &str| percent_decode(s);
            (decode(url.username()), decode(url.password().unwrap_or("")))
        });
        Ok(Mqtt {
            host,
            port,
            tls,
            credentials,
            link: Link::new(),
        })
    }

    async fn connect(&self, limit: Duration) -> Result<Arc<Session>, PublishEnd> {
        // A client id of this process's own: a broker drops the older of two
        // connections with one id.
        let id = format!("jadpo-{:016x}", rand::random::<u64>());
        let mut options = MqttOptions::new(id, &self.host, self.port);
        options.set_keep_alive(Duration::from_secs(30));
        options.set_clean_start(true);
        options.set_connection_timeout(limit.as_secs().max(1));
        if let Some((user, password)) = &self.credentials {
            options.set_credentials(user, password);
        }
        if self.tls {
            options.set_transport(rumqttc::Transport::tls_with_default_config());
        }
        let (client, mut events) = AsyncClient::new(options, 1024);
        match tokio::time::timeout(limit, connected(&mut events)).await {
            Ok(Ok(())) => {}
            Ok(Err(end)) => return Err(end),
            Err(_) => return Err(PublishEnd::NeverLeft),
        }
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let alive = Arc::new(AtomicBool::new(true));
        let poller = tokio::spawn(poll(events, waiting.clone(), alive.clone())).abort_handle();
        Ok(Arc::new(Session {
            client,
            waiting,
            order: tokio::sync::Mutex::new(()),
            alive,
            poller,
        }))
    }

    pub(crate) async fn publish(&self, message: &Message, limit: Duration) -> PublishEnd {
        let (n, session) = match self.link.client(|| self.connect(limit)).await {
            Ok(c) => c,
            Err(end) => return end,
        };
        let properties = PublishProperties {
            user_properties: message.headers.clone(),
            content_type: Some("application/json".to_owned()),
            ..PublishProperties::default()
        };
        let (tx, rx) = oneshot::channel();
        let handed = {
            let _order = session.order.lock().await;
            if !session.alive.load(Ordering::Acquire) {
                drop(_order);
                self.link.broken(n).await;
                return PublishEnd::NeverLeft;
            }
            lock(&session.waiting).unsent.push_back(tx);
            let body = message.body.clone();
            let send = session.client.publish_with_properties(
                message.target.clone(),
                QoS::AtLeastOnce,
                false,
                body,
                properties,
            );
            tokio::time::timeout(limit, send).await
        };
        if !matches!(handed, Ok(Ok(()))) {
            // The event loop is gone, or too far behind to take it.
            self.link.broken(n).await;
            return PublishEnd::NeverLeft;
        }
        let end = match tokio::time::timeout(limit, rx).await {
            Ok(Ok(end)) => end,
            Ok(Err(_)) | Err(_) => PublishEnd::Unconfirmed,
        };
        if matches!(end, PublishEnd::NeverLeft | PublishEnd::Unconfirmed) {
            self.link.broken(n).await;
        }
        end
    }
}

/// Polls until the broker's `CONNACK`.
async fn connected(events: &mut EventLoop) -> Result<(), PublishEnd> {
    loop {
        match events.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                return match ack.code {
                    ConnectReturnCode::Success => Ok(()),
                    code => Err(refused(code)),
                }
            }
            Ok(_) => {}
            Err(ConnectionError::ConnectionRefused(code)) => return Err(refused(code)),
            Err(_) => return Err(PublishEnd::NeverLeft),
        }
    }
}

fn refused(code: ConnectReturnCode) -> PublishEnd {
    match code {
        ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized | ConnectReturnCode::Banned => {
            PublishEnd::Unauthorized
        }
        ConnectReturnCode::ServerBusy
        | ConnectReturnCode::QuotaExceeded
        | ConnectReturnCode::ConnectionRateExceeded => PublishEnd::Overloaded,
        _ => PublishEnd::NeverLeft,
    }
}

/// The connection's event loop: packet ids to the publishes in order,
/// `PUBACK`s to their publishes; when it fails, every publish still
/// waiting ends, and so does the task.
async fn poll(mut events: EventLoop, waiting: Arc<Mutex<Waiting>>, alive: Arc<AtomicBool>) {
    let failure = loop {
        match events.poll().await {
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                let mut w = lock(&waiting);
                if let Some(tx) = w.unsent.pop_front() {
                    w.sent.insert(pkid, tx);
                }
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(tx) = lock(&waiting).sent.remove(&ack.pkid) {
                    let _ = tx.send(acked(ack.reason));
                }
            }
            Ok(Event::Incoming(Packet::Disconnect(_))) => break None,
            Ok(_) => {}
            Err(e) => break Some(e),
        }
    };
    alive.store(false, Ordering::Release);
    let mut w = lock(&waiting);
    let too_large = matches!(
        failure,
        Some(ConnectionError::MqttState(StateError::OutgoingPacketTooLarge { .. }))
    );
    // The client refuses a packet over the broker's maximum when it comes
    // to send it: the first publish not yet sent.
    let mut unsent = std::mem::take(&mut w.unsent).into_iter();
    if too_large {
        if let Some(tx) = unsent.next() {
            let _ = tx.send(PublishEnd::TooLarge);
        }
    }
    for tx in unsent {
        let _ = tx.send(PublishEnd::NeverLeft);
    }
    for (_, tx) in w.sent.drain() {
        let _ = tx.send(PublishEnd::Unconfirmed);
    }
}

fn acked(reason: PubAckReason) -> PublishEnd {
    match reason {
        // No subscriber matched: the broker took it all the same.
        PubAckReason::Success | PubAckReason::NoMatchingSubscribers => PublishEnd::Confirmed,
        PubAckReason::NotAuthorized => PublishEnd::Unauthorized,
        PubAckReason::TopicNameInvalid => PublishEnd::NoTarget,
        PubAckReason::QuotaExceeded => PublishEnd::Overloaded,
        PubAckReason::UnspecifiedError
        | PubAckReason::ImplementationSpecificError
        | PubAckReason::PacketIdentifierInUse
        | PubAckReason::PayloadFormatInvalid => PublishEnd::Refused,
    }
}

fn lock(waiting: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    waiting.lock().unwrap_or_else(|p| p.into_inner())
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}
