//! How a store connects: its URL read (libpq's forms, TLS settings split
//! off), the pool and the listener's dial, and the session settings each new
//! connection gets.

use super::{listen, reason, tls, Inner, Options, PgStore};
use crate::redact::redact_url;
use crate::types::StoreError;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

impl PgStore {
    /// The store without connecting yet: connections open on first use.
    pub fn lazy(url: &str, options: Options) -> Result<PgStore, StoreError> {
        let (url_for_driver, tls) = tls::split(url)
            .map_err(|why| StoreError::InvalidUrl(format!("bad PostgreSQL URL {:?}: {why}", redact_url(url))))?;
        let mut config = parse_url(&url_for_driver)?;
        config.ssl_mode(tls.driver_mode());
        let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls::client_config(&tls)?);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("jadpo");
        }
        // Set on each new connection rather than sent as the startup
        // parameter `options`, which PgBouncer refuses. JIT compiles a plan
        // whose estimated cost is high, which a queue's short statements
        // never repay: a claim on a table without statistics spent 0.4 s
        // compiling for 2 ms of work.
        let mut session = String::from("SET jit = off");
        if let Some(schema) = &options.schema {
            if !schema.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(StoreError::Unavailable(format!(
                    "schema name {schema:?}: only letters, digits and _"
                )));
            }
            session.push_str(&format!("; SET search_path = {schema}"));
        }
        let dial = listen::Dial {
            config: config.clone(),
            tls: connector.clone(),
            session: session.clone(),
            timeout: options.connect_timeout,
        };
        let manager = Manager::from_config(
            config,
            connector,
            ManagerConfig {
                // A closed connection is noticed without a round trip; a
                // broken one fails its next statement and is then dropped.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let session: Arc<str> = session.into();
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.op_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .post_create(deadpool_postgres::Hook::async_fn(move |client, _| {
                let session = session.clone();
                Box::pin(async move {
                    client
                        .batch_execute(&session)
                        .await
                        .map_err(deadpool_postgres::HookError::Backend)
                })
            }))
            .build()
            .map_err(|e| StoreError::Unavailable(format!("PostgreSQL pool: {e}")))?;
        Ok(PgStore {
            inner: Arc::new(Inner {
                pool,
                dial,
                policy: options.policy,
                op_timeout: options.op_timeout,
                redone: AtomicU64::new(0),
                server_checked: tokio::sync::OnceCell::new(),
                _guard: None,
            }),
        })
    }
}

/// Parses a `postgres://` or `postgresql://` URL into the driver's config.
/// Its errors show the URL only through [`redact_url`], never as given.
fn parse_url(url: &str) -> Result<tokio_postgres::Config, StoreError> {
    let shown = redact_url(url);
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(StoreError::InvalidUrl(format!(
            "not a PostgreSQL URL (postgres://user@host:port/database): {shown:?}"
        )));
    }
    url.parse::<tokio_postgres::Config>().map_err(|e| {
        StoreError::InvalidUrl(format!(
            "bad PostgreSQL URL {shown:?}: {}",
            parse_reason(url, &shown, &e)
        ))
    })
}

/// Why the driver could not parse `url`, in its own words, unless they could
/// quote part of the password. Its words name an option it does not know
/// (`unknown option `x``), and a raw `@` or `?` in a password can turn part
/// of the password into such a name (`u:x@y?hunter2=1@h`). So they are
/// shown only when the redacted URL `shown` fails to parse with the very
/// same words: then they depend on nothing the redaction hid.
pub(super) fn parse_reason(url: &str, shown: &str, e: &tokio_postgres::Error) -> String {
    let why = reason(e);
    if shown == url {
        return why;
    }
    match shown.parse::<tokio_postgres::Config>() {
        Err(again) if reason(&again) == why => why,
        _ => "the PostgreSQL driver cannot parse it (its words are left out, as they would quote part of \
              the password): percent-encode `@`, `/`, `?`, `#`, `&` and `%` in a password"
            .to_owned(),
    }
}
