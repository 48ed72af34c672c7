//! Refusing a pooler that shares server sessions between transactions.
//!
//! A PostgreSQL store needs each of its connections to keep one server
//! session while it is open: the listener's `LISTEN`, the `SET`s made on
//! each new connection (`jit`, a schema's `search_path`) and the prepared
//! statements each pooled connection caches across transactions all live
//! in a session. PgBouncer in session mode keeps one; in transaction or
//! statement mode it hands the server session to another client after each
//! transaction, and none of these hold (docs/decisions.md, "PgBouncer:
//! session pooling, transaction pooling refused").
//!
//! So opening a store checks, before it migrates, that a notification
//! comes back: a connection of its own `LISTEN`s on a channel named for
//! this check, a pooled connection `NOTIFY`s it, and the listener must
//! hear it within [`WITHIN`]. Directly or through session pooling it
//! arrives in about a millisecond. Through transaction pooling the
//! listener's client is linked to no server session while it waits, so
//! nothing reaches it, ever, and the open fails with
//! [`StoreError::TransactionPooling`], naming the fix.

use super::{reason, PgStore};
use crate::types::StoreError;
use std::future::poll_fn;
use std::time::Duration;
use tokio_postgres::AsyncMessage;

/// How long the notification may take. Directly or through session
/// pooling it takes about a millisecond; the bound is there for a loaded
/// machine, and is what a refused start waits before saying so.
pub(crate) const WITHIN: Duration = Duration::from_secs(10);

/// Checks that the store's connections keep their sessions (see the
/// module's text). A server that refuses `LISTEN` or `NOTIFY` because it
/// is read-only (a standby) cannot be checked, and is let through: what
/// it refuses next says so.
pub(crate) async fn check(store: &PgStore) -> Result<(), StoreError> {
    let dial = &store.inner.dial;
    let timeout = dial.timeout;
    // The pooled connection (which the migrations use next) is opened
    // beside the listening one, so a start waits for one connection's
    // setup, not two.
    let (listening, pooled) = tokio::join!(
        tokio::time::timeout(timeout, dial.config.connect(dial.tls.clone())),
        store.connection()
    );
    let (client, mut connection) = match listening {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e)))),
        Err(_) => {
            return Err(StoreError::Unavailable(format!(
                "PostgreSQL: no connection within {timeout:?}"
            )))
        }
    };
    let pooled = pooled?;
    // A channel of this check's own: no store's listener hears it.
    let channel = format!("jadpo_session_check_{:016x}", rand::random::<u64>());
    let heard = async {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == channel => return Ok(()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e)))),
                None => return Err(StoreError::Unavailable("PostgreSQL closed the connection".into())),
            }
        }
    };
    tokio::pin!(heard);
    // Simple queries only: through a transaction pooler, a statement
    // prepared in one message and run in the next may not find itself.
    let asked = async {
        client.batch_execute(&format!("LISTEN {channel}")).await?;
        pooled.batch_execute(&format!("NOTIFY {channel}")).await?;
        Ok::<_, tokio_postgres::Error>(())
    };
    // The listener's connection is driven (by `heard`) while it asks: the
    // notification may arrive before the NOTIFY's own answer.
    let asked = tokio::select! {
        heard = &mut heard => return heard,
        asked = tokio::time::timeout(store.op_timeout(), asked) => asked,
    };
    match asked {
        Ok(Ok(())) => {}
        Ok(Err(e)) if super::refuses_writes(&e) => return Ok(()),
        Ok(Err(e)) => return Err(StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e)))),
        Err(_) => {
            return Err(StoreError::Unavailable(format!(
                "PostgreSQL did not answer within {:?}",
                store.op_timeout()
            )))
        }
    }
    match tokio::time::timeout(WITHIN, heard).await {
        Ok(heard) => heard,
        Err(_) => Err(StoreError::TransactionPooling(refusal(WITHIN))),
    }
}

/// The message of `store.transaction_pooling`.
fn refusal(within: Duration) -> String {
    format!(
        "the store's connections do not keep their sessions: a NOTIFY from one did not reach another \
         listening at the same URL within {within:?}, as happens through PgBouncer (or another pooler) in \
         transaction or statement mode. Jadpo needs a session per connection (LISTEN, its SETs, statements \
         prepared once per connection): point the store URL at PostgreSQL directly, or at PgBouncer in \
         session mode (`pool_mode = session`); see docs/deploy.md, \"Through PgBouncer\""
    )
}
