//! Fresh PostgreSQL stores for tests, each in a schema of its own so tests
//! run in parallel against one server.
//!
//! The server is `JADPO_TEST_POSTGRES_URL` (default [`DEFAULT_URL`]). When
//! it cannot be reached, the rule of `jadpo_testing::skip` decides: under
//! CI the test fails with the URL in the message; elsewhere one banner per
//! test binary says the PostgreSQL tests were skipped:
//!
//! ```ignore
//! let Some(store) = jadpo_store::postgres::testing::fresh_store().await else { return };
//! ```

use super::connect::parse_reason;
use super::{reason, Options, PgStore};
use crate::redact_url;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The environment variable that names the test server.
pub const URL_VAR: &str = "JADPO_TEST_POSTGRES_URL";
/// The test server when [`URL_VAR`] is unset or empty.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Test schemas are named `jadpo_t_<unix seconds>_<random>`; one older than
/// this was left by a killed run and is dropped by the next.
const STALE: Duration = Duration::from_secs(3600);

/// The test server's URL.
pub fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// A migrated store in a fresh schema, dropped when the last clone of the
/// store is. `None` (after saying so on stderr) when PostgreSQL is
/// unreachable outside CI; under CI that panics instead.
pub async fn fresh_store() -> Option<PgStore> {
    fresh_store_with(Options::default()).await
}

/// [`fresh_store`] with options; its schema is always the fresh one.
pub async fn fresh_store_with(options: Options) -> Option<PgStore> {
    let schema = TestSchema::create().await?;
    Some(schema.store(options).await)
}

/// A schema of its own for one test, dropped with its last reference.
/// Stores made from it keep it alive.
pub struct TestSchema {
    url: String,
    name: String,
}

impl std::fmt::Debug for TestSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestSchema")
            .field("url", &redact_url(&self.url))
            .field("name", &self.name)
            .finish()
    }
}

impl TestSchema {
    /// Creates the schema. `None` when skipped (see [`fresh_store`]).
    pub async fn create() -> Option<Arc<TestSchema>> {
        let url = url();
        let shown = redact_url(&url);
        let client = match admin(&url).await {
            Ok(c) => c,
            Err(why) => {
                jadpo_testing::skip::missing(
                    &format!("PostgreSQL at {shown}"),
                    &why,
                    &format!("Start it, or set {URL_VAR} to a server that runs."),
                );
                return None;
            }
        };
        drop_stale(&client).await;
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let name = format!("jadpo_t_{secs}_{:08x}", rand::random::<u32>());
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE SCHEMA {name} at {shown}: {}", reason(&e)));
        Some(Arc::new(TestSchema { url, name }))
    }

    /// The schema's name (`jadpo_t_<unix seconds>_<random>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL (not the schema: stores set `search_path`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A URL to this schema for a process that takes only a URL (`jadpo
    /// dev --store`): the server's, its `search_path` set through the
    /// URL's `options`.
    pub fn url_with_search_path(&self) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.url, self.name)
    }

    /// A migrated store on this schema; panics if that fails.
    pub async fn store(self: &Arc<Self>, options: Options) -> PgStore {
        let url = self.url.clone();
        self.store_at(&url, options)
            .await
            .unwrap_or_else(|e| panic!("store on {} at {}: {e}", self.name, redact_url(&url)))
    }

    /// A migrated store on this schema through another URL (a proxy).
    pub async fn store_at(self: &Arc<Self>, url: &str, options: Options) -> Result<PgStore, crate::StoreError> {
        let store = self.unmigrated_at(url, options)?;
        store.migrate_with(false).await?;
        Ok(store)
    }

    /// A store on this schema that has not migrated it (connections open on
    /// first use): for tests that migrate it themselves.
    pub fn unmigrated(self: &Arc<Self>, options: Options) -> PgStore {
        let url = self.url.clone();
        self.unmigrated_at(&url, options)
            .unwrap_or_else(|e| panic!("store on {}: {e}", self.name))
    }

    fn unmigrated_at(self: &Arc<Self>, url: &str, options: Options) -> Result<PgStore, crate::StoreError> {
        let options = Options {
            schema: Some(self.name.clone()),
            ..options
        };
        // Named after the schema, so the schema's drop can end its sessions.
        let sep = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{sep}application_name={}", self.name);
        let guard: Arc<dyn Send + Sync> = self.clone();
        PgStore::lazy(&url, options).map(|s| s.with_guard(guard))
    }

    /// A plain connection with this schema first on its `search_path`, for
    /// looking at rows behind a store's back.
    pub async fn client(&self) -> tokio_postgres::Client {
        let client = admin(&self.url)
            .await
            .unwrap_or_else(|why| panic!("connect to {}: {why}", redact_url(&self.url)));
        client
            .batch_execute(&format!("SET search_path = {}", self.name))
            .await
            .expect("set search_path");
        client
    }
}

impl Drop for TestSchema {
    /// Drops the schema from a thread of its own: a destructor cannot await,
    /// and the test's runtime may be the one this runs on.
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let client = admin(&url).await.ok()?;
                // A test that panicked mid-transaction leaves its session
                // holding locks (its runtime no longer runs to roll back):
                // end the store's sessions first. A schema still left
                // behind goes with a later run's sweep of stale ones.
                let _ = client
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = $1 AND pid <> pg_backend_pid()",
                        &[&name],
                    )
                    .await;
                client
                    .batch_execute(&format!(
                        "SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                    ))
                    .await
                    .ok()
            })
        });
        let _ = dropped.join();
    }
}

/// A connection to the test server, its driver task spawned.
async fn admin(url: &str) -> Result<tokio_postgres::Client, String> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| parse_reason(url, &redact_url(url), &e))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(3));
    }
    let connecting = config.connect(tokio_postgres::NoTls);
    let (client, connection) = tokio::time::timeout(Duration::from_secs(5), connecting)
        .await
        .map_err(|_| "no answer within 5s".to_owned())?
        .map_err(|e| reason(&e))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Drops test schemas a killed run left behind, older than [`STALE`].
async fn drop_stale(client: &tokio_postgres::Client) {
    let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'jadpo\\_t\\_%'",
            &[],
        )
        .await
    else {
        return;
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for row in rows {
        let name: String = row.get(0);
        let secs = name
            .strip_prefix("jadpo_t_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|s| s.parse::<u64>().ok());
        if secs.is_some_and(|s| s + STALE.as_secs() < now) {
            let _ = client
                .batch_execute(&format!(
                    "SET lock_timeout = '1s'; DROP SCHEMA IF EXISTS {name} CASCADE"
                ))
                .await;
        }
    }
}
