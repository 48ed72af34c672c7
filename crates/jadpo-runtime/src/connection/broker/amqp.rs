//! `driver: amqp` (RabbitMQ): a publish to the connection's `exchange:`
//! with the target as its routing key, persistent (delivery mode 2),
//! `mandatory` so an unroutable message comes back instead of being
//! dropped, on a channel in publisher-confirm mode: the broker's `ack` is
//! the confirmation.
//!
//! The headers go in the message's `headers` table; the idempotency key
//! also as its `message_id`, where consumers look for it first.

use super::link::Link;
use super::Message;
use jadpo_core::publish::PublishEnd;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::Confirmation;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind};
use std::sync::Arc;
use std::time::Duration;

/// The connection, kept for as long as its channel is used.
struct Open {
    connection: Connection,
    channel: Channel,
}

pub(crate) struct Amqp {
    url: String,
    exchange: String,
    link: Link<Arc<Open>>,
}

impl Amqp {
    /// Keeps the URL; connects on the first publish.
    pub(crate) fn new(url: &str, exchange: &str) -> Amqp {
        Amqp {
            url: url.to_owned(),
            exchange: exchange.to_owned(),
            link: Link::new(),
        }
    }

    async fn connect(&self, limit: Duration) -> Result<Arc<Open>, PublishEnd> {
        let open = async {
            let connection = Connection::connect(&self.url, ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            channel.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok::<_, lapin::Error>(Open { connection, channel })
        };
        match tokio::time::timeout(limit, open).await {
            Ok(Ok(open)) => Ok(Arc::new(open)),
            Ok(Err(e)) if refused_login(&e) => Err(PublishEnd::Unauthorized),
            _ => Err(PublishEnd::NeverLeft),
        }
    }

    pub(crate) async fn publish(&self, message: &Message, limit: Duration) -> PublishEnd {
        let (n, open) = match self.link.client(|| self.connect(limit)).await {
            Ok(c) => c,
            Err(end) => return end,
        };
        let status = open.connection.status();
        if status.blocked() {
            // A memory or disk alarm: RabbitMQ reads nothing from a blocked
            // publisher, so nothing is sent until it lifts.
            return PublishEnd::Overloaded;
        }
        let end = tokio::time::timeout(limit, self.send(&open.channel, message)).await;
        let end = end.unwrap_or(PublishEnd::Unconfirmed);
        // An alarm that went off while this message was on its way blocks
        // the connection before the broker reads all of it: the message
        // waits in the socket and goes in when the alarm lifts. The
        // connection is whole; a new one would be blocked at its first
        // publish in turn, so it is kept, and the publishes after this one
        // see the block and are `overloaded` without being written.
        let blocked = end == PublishEnd::Unconfirmed && open.connection.status().blocked();
        if (matches!(end, PublishEnd::NeverLeft | PublishEnd::Unconfirmed) && !blocked)
            || !open.channel.status().connected()
        {
            // The connection broke, or the broker closed the channel over
            // this message (an exchange that does not exist): the next
            // publish opens them again.
            self.link.broken(n).await;
        }
        end
    }

    async fn send(&self, channel: &Channel, message: &Message) -> PublishEnd {
        let mut headers = FieldTable::default();
        for (name, value) in &message.headers {
            headers.insert(
                ShortString::from(name.as_str()),
                AMQPValue::LongString(LongString::from(value.as_bytes())),
            );
        }
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_headers(headers);
        if let Some(key) = &message.idempotency_key {
            properties = properties.with_message_id(key.as_str().into());
        }
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let confirm = match channel
            .basic_publish(
                self.exchange.as_str().into(),
                message.target.as_str().into(),
                options,
                &message.body,
                properties,
            )
            .await
        {
            Ok(confirm) => confirm,
            // Refused before it was written: a closed channel or connection.
            Err(e) => return failed(&e, PublishEnd::NeverLeft),
        };
        match confirm.await {
            Ok(Confirmation::Ack(None)) => PublishEnd::Confirmed,
            Ok(Confirmation::Ack(Some(_returned))) => PublishEnd::NoTarget,
            Ok(Confirmation::Nack(_)) => PublishEnd::Refused,
            Ok(Confirmation::NotRequested) => PublishEnd::Unconfirmed,
            Err(e) => failed(&e, PublishEnd::Unconfirmed),
        }
    }
}

fn refused_login(e: &lapin::Error) -> bool {
    match e.kind() {
        ErrorKind::ProtocolError(amqp) => matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED)),
        ErrorKind::AuthProviderError(_) => true,
        _ => false,
    }
}

/// A publish that failed with `e`; `lost` is the ending when the
/// connection itself failed (before the write: never left; after:
/// unconfirmed).
fn failed(e: &lapin::Error, lost: PublishEnd) -> PublishEnd {
    let ErrorKind::ProtocolError(amqp) = e.kind() else {
        return lost;
    };
    match amqp.kind() {
        AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND | AMQPSoftError::NOROUTE) => PublishEnd::NoTarget,
        AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => PublishEnd::Unauthorized,
        AMQPErrorKind::Soft(AMQPSoftError::CONTENTTOOLARGE) => PublishEnd::TooLarge,
        // RabbitMQ says a body over `max_message_size` is a failed
        // precondition, and names the size.
        AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) if amqp.get_message().as_str().contains("size") => {
            PublishEnd::TooLarge
        }
        AMQPErrorKind::Soft(_) => PublishEnd::Refused,
        // The broker closed the whole connection (shutting down, forced):
        // the message may or may not have been taken.
        AMQPErrorKind::Hard(_) => lost,
    }
}
