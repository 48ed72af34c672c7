//! Whether an engine is alive and its store ready, for a process's probes
//! (`GET /livez`, `GET /readyz` in `jadpo serve`), or an embedding
//! program's own.

use crate::Jadpo;
use jadpo_runtime::liveness::Liveness;
use jadpo_store::upgrade::Standing;
use jadpo_store::ScheduleStore;
use std::sync::Arc;

/// Why a store should take no work now. Its text says what is wrong and
/// the fix when there is one, and never the store's host or file: it goes
/// to whoever asks a probe.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display())).await?;
/// let jadpo = jadpo::builder().app_source("app.jadpo", "event Ping { id: string }")?.build(store).await?;
/// match jadpo.readiness().await {
///     Ok(standing) => assert_eq!(standing.store, standing.build, "migrated by build()"),
///     Err(unready) => panic!("error[{}]: {unready}", unready.code()),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unready {
    /// `store.unavailable`: the store did not answer.
    Unavailable,
    /// `store.schema_older`: the store's schema is older than this build's
    /// (`jadpo migrate`, or a restart, which migrates).
    SchemaOlder(Standing),
    /// `store.schema_newer`: a newer build contracted the schema past what
    /// this one reads (docs/deploy.md, "Upgrades").
    SchemaNewer(Standing),
}

impl Unready {
    /// The stable code, the same `/readyz` answers with.
    pub fn code(&self) -> &'static str {
        match self {
            Unready::Unavailable => "store.unavailable",
            Unready::SchemaOlder(_) => "store.schema_older",
            Unready::SchemaNewer(_) => "store.schema_newer",
        }
    }
}

impl std::fmt::Display for Unready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unready::Unavailable => f.write_str("the store does not answer"),
            Unready::SchemaOlder(s) | Unready::SchemaNewer(s) => {
                f.write_str(&s.unready().map(|(_, message)| message).unwrap_or_default())
            }
        }
    }
}

impl std::error::Error for Unready {}

impl<S: ScheduleStore> Jadpo<S> {
    /// The beats of this engine's loops (the worker, the completer, the
    /// tick): [`Liveness::report`] says which are alive.
    pub fn liveness(&self) -> &Arc<Liveness> {
        self.engine.liveness()
    }

    /// Whether the store answers and its schema is this build's (or newer
    /// through expands only, a rolling deploy under way): one read of its
    /// migrations table.
    pub async fn readiness(&self) -> Result<Standing, Unready> {
        // The store's own error may name its host or file: the answer goes
        // to whoever asks, so it says only that there was none.
        let standing = self.store.schema_standing().await.map_err(|_| Unready::Unavailable)?;
        match standing.unready() {
            Some(("store.schema_older", _)) => Err(Unready::SchemaOlder(standing)),
            Some(_) => Err(Unready::SchemaNewer(standing)),
            None => Ok(standing),
        }
    }
}
