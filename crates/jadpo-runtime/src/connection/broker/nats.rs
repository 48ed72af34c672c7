//! `driver: nats`: a JetStream publish, waiting for the stream's
//! acknowledgement.
//!
//! The idempotency key goes as `Nats-Msg-Id`, so the stream drops a second
//! publish of it within its duplicate window (2 minutes unless the stream
//! sets another): a resend after a lost acknowledgement is then safe.

use super::link::Link;
use super::Message;
use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::HeaderMap;
use jadpo_core::publish::PublishEnd;
use std::time::Duration;

pub(crate) struct Nats {
    url: String,
    link: Link<jetstream::Context>,
}

impl Nats {
    /// Keeps the URL; connects on the first publish.
    pub(crate) fn new(url: &str) -> Nats {
        Nats {
            url: url.to_owned(),
            link: Link::new(),
        }
    }

    pub(crate) async fn publish(&self, message: &Message, limit: Duration) -> PublishEnd {
        let connect = || async {
            let options = async_nats::ConnectOptions::new()
                .connection_timeout(limit)
                // The link reconnects on the next publish; the client's own
                // reconnecting in the background would buffer publishes
                // while the server is away, and they would leave later,
                // after their publish had already failed.
                .max_reconnects(Some(0));
            match options.connect(self.url.as_str()).await {
                Ok(client) => Ok(jetstream::new(client)),
                Err(e) => Err(match e.kind() {
                    async_nats::ConnectErrorKind::Authentication
                    | async_nats::ConnectErrorKind::AuthorizationViolation => PublishEnd::Unauthorized,
                    _ => PublishEnd::NeverLeft,
                }),
            }
        };
        let (n, js) = match self.link.client(connect).await {
            Ok(c) => c,
            Err(end) => return end,
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &message.headers {
            headers.append(name.as_str(), value.as_str());
        }
        if let Some(key) = &message.idempotency_key {
            headers.insert(async_nats::header::NATS_MESSAGE_ID, key.as_str());
        }
        let sent = tokio::time::timeout(limit, async {
            js.publish_with_headers(message.target.clone(), headers, message.body.clone())
                .await?
                .await
        })
        .await;
        let end = match sent {
            Ok(Ok(_ack)) => PublishEnd::Confirmed,
            Ok(Err(e)) => failed(&e),
            Err(_elapsed) => PublishEnd::Unconfirmed,
        };
        if matches!(end, PublishEnd::NeverLeft | PublishEnd::Unconfirmed) {
            self.link.broken(n).await;
        }
        end
    }
}

fn failed(e: &jetstream::context::PublishError) -> PublishEnd {
    match e.kind() {
        // No stream captures the subject: the server answers at once.
        PublishErrorKind::StreamNotFound => PublishEnd::NoTarget,
        PublishErrorKind::TimedOut => PublishEnd::Unconfirmed,
        PublishErrorKind::BrokenPipe => PublishEnd::NeverLeft,
        PublishErrorKind::MaxAckPending => PublishEnd::Overloaded,
        // Refused by the client before anything is sent.
        PublishErrorKind::MaxPayloadExceeded => PublishEnd::TooLarge,
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence | PublishErrorKind::Other => {
            other(e)
        }
    }
}

/// A JetStream error the client has no kind for, by its text: a message
/// over the stream's size limit, a permission refused; anything else is a
/// refusal.
fn other(e: &jetstream::context::PublishError) -> PublishEnd {
    let text = e.to_string().to_ascii_lowercase();
    if text.contains("maximum payload") || text.contains("message size exceeds") {
        PublishEnd::TooLarge
    } else if text.contains("permissions violation") || text.contains("authorization") {
        PublishEnd::Unauthorized
    } else if text.contains("disconnected") || text.contains("connection") {
        PublishEnd::Unconfirmed
    } else {
        PublishEnd::Refused
    }
}
