//! `driver: redis`: `XADD` to a stream, over one multiplexed connection.
//!
//! The entry's fields are `body` (the JSON) and then every header, by name
//! (`idempotency-key` among them), so a consumer reads them as it reads any
//! stream entry. `NOMKSTREAM`: a stream that does not exist is a failure
//! (`redis.no_target`) rather than a new stream no consumer reads, as an
//! unroutable message is on RabbitMQ; the consumer's
//! `XGROUP CREATE ... MKSTREAM` makes it.

use super::link::Link;
use super::Message;
use jadpo_core::publish::PublishEnd;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError};
use std::time::Duration;

pub(crate) struct Redis {
    client: redis::Client,
    max_len: Option<u64>,
    link: Link<MultiplexedConnection>,
}

impl Redis {
    /// Reads the URL; connects on the first publish.
    pub(crate) fn new(url: &str, max_len: Option<u64>) -> Result<Redis, String> {
        let client = redis::Client::open(url).map_err(|e| match e.kind() {
            ErrorKind::InvalidClientConfig => "it is not a Redis URL".to_owned(),
            _ => e.category().to_owned(),
        })?;
        Ok(Redis {
            client,
            max_len,
            link: Link::new(),
        })
    }

    pub(crate) async fn publish(&self, message: &Message, limit: Duration) -> PublishEnd {
        let connect = || async {
            // The limits are the publish's: the driver's own response
            // timeout is off, the publish's `limit` cuts the wait below.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(limit))
                .set_response_timeout(None);
            self.client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| connect_failed(&e))
        };
        let (n, mut conn) = match self.link.client(connect).await {
            Ok(c) => c,
            Err(end) => return end,
        };
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&message.target).arg("NOMKSTREAM");
        if let Some(max_len) = self.max_len {
            cmd.arg("MAXLEN").arg("~").arg(max_len);
        }
        cmd.arg("*").arg("body").arg(&message.body[..]);
        for (name, value) in &message.headers {
            cmd.arg(name).arg(value);
        }
        let answer = tokio::time::timeout(limit, cmd.query_async::<Option<String>>(&mut conn)).await;
        match answer {
            Ok(Ok(Some(_id))) => PublishEnd::Confirmed,
            Ok(Ok(None)) => PublishEnd::NoTarget,
            Ok(Err(e)) => {
                let end = failed(&e);
                if matches!(end, PublishEnd::Unconfirmed | PublishEnd::NeverLeft) {
                    self.link.broken(n).await;
                }
                end
            }
            Err(_elapsed) => {
                // Sent, and no answer in time: the connection may be half
                // dead; the next publish makes a new one.
                self.link.broken(n).await;
                PublishEnd::Unconfirmed
            }
        }
    }
}

/// A connect that failed: refused credentials are `unauthorized`, anything
/// else left nothing behind.
fn connect_failed(e: &RedisError) -> PublishEnd {
    match e.kind() {
        ErrorKind::AuthenticationFailed => PublishEnd::Unauthorized,
        _ => match e.code() {
            Some("NOAUTH" | "WRONGPASS" | "NOPERM") => PublishEnd::Unauthorized,
            _ => PublishEnd::NeverLeft,
        },
    }
}

/// An `XADD` that failed, by the server's error code, or by how the
/// connection failed.
fn failed(e: &RedisError) -> PublishEnd {
    match e.code() {
        Some("OOM" | "BUSY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "READONLY") => {
            PublishEnd::Overloaded
        }
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => PublishEnd::Unauthorized,
        Some(_) => PublishEnd::Refused,
        None if e.kind() == ErrorKind::AuthenticationFailed => PublishEnd::Unauthorized,
        // A refused connect never sent anything. Any other failure of the
        // connection may have come after the command was written.
        None if e.is_connection_refusal() => PublishEnd::NeverLeft,
        None => PublishEnd::Unconfirmed,
    }
}
