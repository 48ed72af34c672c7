//! Connections to a message broker (docs/app-file.md, "Connections to a
//! broker"): resolved once at start, one long-lived link per connection
//! per process (`link::Link`), each publish's ending classified by
//! `jadpo_core::publish::classify`.
//!
//! A driver only tells how one publish ended ([`PublishEnd`]); what that
//! means for the delivery and the breaker is the core's rule, the same for
//! every broker. Nothing here logs a body, a header's value, the rendered
//! target or the broker's URL beyond its host.

mod amqp;
mod link;
mod mqtt;
mod nats;
mod publish;
mod redis;

pub use publish::{PublishOutcome, PublishRequest};

use super::resolve::{lookup, resolve_header, resolve_signing_key, shown_url, variable_of};
use super::signing::SigningKey;
use super::startup_error::{Setting, StartupError};
use jadpo_core::publish::{Broker, PublishEnd};
use jadpo_lang::{Connection, Driver, Value};
use std::fmt;
use std::time::Duration;

/// A broker connection as its real driver uses it. `Debug` shows the
/// broker's host and header names, never a value.
pub struct BrokerConnection {
    pub(crate) name: String,
    pub(crate) broker: Broker,
    /// Its `headers:`, resolved, put first on every message.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) attempts: u32,
    pub(crate) signing: Option<SigningKey>,
    shown_url: String,
    publisher: Publisher,
}

impl BrokerConnection {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn broker(&self) -> Broker {
        self.broker
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn is_signed(&self) -> bool {
        self.signing.is_some()
    }
}

impl fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self.headers.iter().map(|(n, _)| format!("{n}: <redacted>")).collect();
        f.debug_struct("BrokerConnection")
            .field("name", &self.name)
            .field("broker", &self.broker.name())
            .field("url", &self.shown_url)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("attempts", &self.attempts)
            .field("signing", &self.signing.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// One message as a driver sends it: everything rendered, checked and
/// signed already.
pub(crate) struct Message {
    /// The routing key, subject, stream key or topic.
    pub(crate) target: String,
    /// The body as JSON; empty when the publish has none.
    pub(crate) body: bytes::Bytes,
    /// In order: the connection's `headers:`, the publish's `headers:`,
    /// then Jadpo's own (`idempotency-key`, the signature's, the trace's).
    pub(crate) headers: Vec<(String, String)>,
    /// Also sent as `Nats-Msg-Id` on NATS.
    pub(crate) idempotency_key: Option<String>,
}

/// The driver behind a broker connection.
enum Publisher {
    Amqp(amqp::Amqp),
    Mqtt(mqtt::Mqtt),
    Nats(nats::Nats),
    Redis(redis::Redis),
}

impl Publisher {
    /// Publishes once, waiting at most `limit` for the broker's
    /// confirmation (connecting first when the link is down).
    async fn publish(&self, message: &Message, limit: Duration) -> PublishEnd {
        match self {
            Publisher::Amqp(a) => a.publish(message, limit).await,
            Publisher::Mqtt(m) => m.publish(message, limit).await,
            Publisher::Nats(n) => n.publish(message, limit).await,
            Publisher::Redis(r) => r.publish(message, limit).await,
        }
    }
}

/// Resolves one broker connection, adding every problem to `errors`. No
/// connection is made here: the first publish makes it, so a start does
/// not wait for, or fail on, a broker that is down (its deliveries are
/// held by the breaker like any other outage).
pub(crate) fn resolve_broker(
    conn: &Connection,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<StartupError>,
) -> Option<BrokerConnection> {
    let before = errors.len();
    let name = conn.name.as_str();
    let broker = conn.driver.broker()?;
    let url = lookup(name, Setting::Url, &conn.url, env, errors)
        .and_then(|raw| check_url(name, broker, &raw, &conn.url, errors));
    let headers: Vec<(String, String)> = conn
        .headers
        .iter()
        .filter_map(|(header, value)| {
            let (header_name, header_value) = resolve_header(name, header, value, env, errors)?;
            match header_value.to_str() {
                Ok(text) => Some((header_name.as_str().to_owned(), text.to_owned())),
                Err(_) => {
                    errors.push(StartupError::HeaderValueInvalid {
                        connection: name.to_owned(),
                        header: header.clone(),
                        variable: variable_of(value),
                    });
                    None
                }
            }
        })
        .collect();
    let signing = conn
        .signing_secret
        .as_ref()
        .and_then(|value| resolve_signing_key(name, value, env, errors));
    if errors.len() > before {
        return None;
    }
    let url = url?;
    let publisher = match (&conn.driver, broker) {
        (Driver::Redis { max_len }, _) => match redis::Redis::new(&url, *max_len) {
            Ok(r) => Publisher::Redis(r),
            Err(why) => {
                errors.push(url_invalid(name, &conn.url, why));
                return None;
            }
        },
        (Driver::Amqp { exchange }, _) => Publisher::Amqp(amqp::Amqp::new(&url, exchange)),
        (_, Broker::Nats) => Publisher::Nats(nats::Nats::new(&url)),
        (_, Broker::Mqtt) => match mqtt::Mqtt::new(&url) {
            Ok(m) => Publisher::Mqtt(m),
            Err(why) => {
                errors.push(url_invalid(name, &conn.url, why));
                return None;
            }
        },
        // `Driver::Amqp` and `Driver::Redis` above carry their settings.
        (_, Broker::Amqp | Broker::Redis) => unreachable!("matched by driver"),
    };
    Some(BrokerConnection {
        name: name.to_owned(),
        broker,
        headers,
        timeout: conn.timeout,
        attempts: conn.attempts.max(1),
        signing,
        shown_url: shown_url(&url),
        publisher,
    })
}

fn url_invalid(connection: &str, value: &Value, why: String) -> StartupError {
    StartupError::UrlInvalid {
        connection: connection.to_owned(),
        variable: variable_of(value),
        why,
    }
}

/// The schemes each broker's `url:` may have.
fn schemes(broker: Broker) -> &'static [&'static str] {
    match broker {
        Broker::Amqp => &["amqp", "amqps"],
        Broker::Nats => &["nats", "tls"],
        Broker::Redis => &["redis", "rediss"],
        Broker::Mqtt => &["mqtt", "mqtts"],
    }
}

fn check_url(
    connection: &str,
    broker: Broker,
    raw: &str,
    value: &Value,
    errors: &mut Vec<StartupError>,
) -> Option<String> {
    // The message never repeats the value: it may hold a password.
    let problem = match url::Url::parse(raw) {
        Err(e) => Some(e.to_string()),
        Ok(url) if !schemes(broker).contains(&url.scheme()) => Some(format!(
            "the scheme must be {}, not `{}`",
            schemes(broker).join(" or "),
            url.scheme()
        )),
        Ok(url) if url.host_str().is_none_or(str::is_empty) => Some("it has no host".to_owned()),
        Ok(url) if url.fragment().is_some() => Some("it may not have a fragment".to_owned()),
        Ok(_) => None,
    };
    match problem {
        None => Some(raw.to_owned()),
        Some(why) => {
            errors.push(url_invalid(connection, value, why));
            None
        }
    }
}
