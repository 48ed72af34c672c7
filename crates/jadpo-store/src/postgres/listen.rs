//! Waking idle workers in every process: LISTEN/NOTIFY.
//!
//! A transaction that makes a delivery due now (an emit, also
//! [`emit_in`](super::emit_in) in the caller's own transaction; an
//! operator's retry; a release behind a closed breaker; a probe's wake-up;
//! a finish that hands a key's slot on to its next delivery)
//! sends one notification on its schema's channel with `pg_notify`.
//! PostgreSQL delivers it only if that transaction commits, and folds the
//! identical notifications of one transaction into one, so a transaction of
//! 10,000 rows sends one.
//!
//! Each process keeps one connection of its own for listening, outside the
//! pool (a pooled connection is handed to other transactions between uses),
//! and wakes its claim loop for each notification. Bursts cost nothing more:
//! the wake is a `Notify` permit, so a hundred notifications that arrive
//! while the claim loop is busy leave one wake-up behind them. When the
//! connection is lost, the listener reconnects with backoff and wakes once
//! after listening again, since what was sent meanwhile is lost.
//! Notifications only hurry things up: the worker's poll still finds
//! whatever a lost notification would have announced.

use super::{reason, Abort};
use deadpool_postgres::Transaction;
use jadpo_core::Backoff;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

/// The channel of the schema that holds `jadpo_deliveries` as this session
/// resolves it (its `search_path`): stores in different schemas of one
/// database don't wake each other, and an emit in the caller's transaction
/// names the same channel as the store, whatever its `search_path` looks
/// like. A channel name is at most 63 bytes, so a long schema name is
/// hashed.
macro_rules! wake_channel {
    () => {
        "(SELECT CASE WHEN octet_length(n.nspname) <= 53 THEN 'jadpo_due_' || n.nspname \
                 ELSE 'jadpo_due_' || md5(n.nspname) END \
          FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace \
          WHERE c.oid = 'jadpo_deliveries'::regclass)"
    };
}

pub(crate) use wake_channel;

/// Queues the schema's notification, sent if and when the transaction
/// commits.
pub(crate) const NOTIFY: &str = concat!("SELECT pg_notify(", wake_channel!(), ", '')");

const CHANNEL: &str = concat!("SELECT ", wake_channel!());

/// A listening connection only receives, so a peer that vanished without
/// closing it (a half-open TCP connection) would look alive forever: every
/// `CHECK_EVERY` it sends an empty query, and one not answered within
/// `CHECK_WITHIN` ends it.
const CHECK_EVERY: Duration = Duration::from_secs(30);
const CHECK_WITHIN: Duration = Duration::from_secs(10);

/// Sends the schema's notification from inside `tx` (see [`NOTIFY`]).
pub(crate) async fn notify(tx: &Transaction<'_>) -> Result<(), Abort> {
    let stmt = tx.prepare_cached(NOTIFY).await?;
    tx.execute(&stmt, &[]).await?;
    Ok(())
}

pub(crate) async fn channel(tx: &Transaction<'_>) -> Result<String, Abort> {
    Ok(tx.query_one(CHANNEL, &[]).await?.try_get(0)?)
}

/// How the listener reaches the server: what the pool's connections get.
#[derive(Clone)]
pub(crate) struct Dial {
    pub config: tokio_postgres::Config,
    pub tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// Run once on each new connection (`SET`s a pooler lets through).
    pub session: String,
    pub timeout: Duration,
}

/// Listens on the schema's channel, waking `wake` for each notification,
/// until dropped.
pub(crate) async fn run(dial: &Dial, wake: &Notify) {
    // Connections lost in a row, without a LISTEN in between.
    let mut lost = 0u32;
    let mut reconnect = false;
    loop {
        let listened = AtomicBool::new(false);
        let why = session(dial, wake, reconnect, &listened).await;
        if listened.load(Ordering::Relaxed) {
            lost = 0;
        }
        lost = lost.saturating_add(1);
        reconnect = true;
        let wait = Backoff::STORE.draw(lost, None, &mut rand::rng());
        tracing::warn!(error = %why, wait_ms = wait.as_millis() as u64, "store.listen_lost");
        tokio::time::sleep(wait).await;
    }
}

/// One connection's life: connect, LISTEN, wake once, then hand over each
/// notification until the connection fails. Returns why it ended.
async fn session(dial: &Dial, wake: &Notify, reconnect: bool, listened: &AtomicBool) -> String {
    let timeout = dial.timeout;
    let (client, mut connection) = match tokio::time::timeout(timeout, dial.config.connect(dial.tls.clone())).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return format!("PostgreSQL: {}", reason(&e)),
        Err(_) => return format!("PostgreSQL: no connection within {timeout:?}"),
    };
    // The connection runs here, beside the client's requests, rather than
    // in a task of its own: it ends with this future.
    let driven = async {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => wake.notify_one(),
                Some(Ok(_)) => {}
                Some(Err(e)) => return format!("PostgreSQL: {}", reason(&e)),
                None => return "PostgreSQL closed the connection".to_owned(),
            }
        }
    };
    tokio::select! {
        why = driven => why,
        ended = listening(&client, &dial.session, wake, reconnect, listened) => match ended {
            Ok(why) => why,
            Err(e) => format!("PostgreSQL: {}", reason(&e)),
        },
    }
}

/// LISTENs, wakes once, then checks the connection now and then. Returns
/// why it gave up, or the driver's error.
async fn listening(
    client: &tokio_postgres::Client,
    session: &str,
    wake: &Notify,
    reconnect: bool,
    listened: &AtomicBool,
) -> Result<String, tokio_postgres::Error> {
    // The channel is named after the schema the session's search_path
    // finds first.
    client.batch_execute(session).await?;
    let channel: String = client.query_one(CHANNEL, &[]).await?.try_get(0)?;
    client
        .batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))
        .await?;
    listened.store(true, Ordering::Relaxed);
    tracing::info!(channel = %channel, reconnect, "store.listening");
    // Whatever was sent before this connection listened is lost.
    wake.notify_one();
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        match tokio::time::timeout(CHECK_WITHIN, client.simple_query("")).await {
            Ok(answer) => drop(answer?),
            Err(_) => return Ok(format!("PostgreSQL did not answer within {CHECK_WITHIN:?}")),
        }
    }
}
