//! The SQLite store: the embedded default, `sqlite:PATH`, in WAL mode.
//!
//! One file holds everything; several processes may share it. Each method is
//! one transaction on a pooled connection, run on tokio's blocking pool.
//! Writes are `BEGIN IMMEDIATE`: the write lock is taken before the first
//! read, so what a claim plans from cannot change under it, in this process
//! or another. Breaker rows are still written conditionally on their
//! version, as the interface requires of every store.
//!
//! Nothing is listened for ([`Store::listen`] returns at once): a process
//! wakes its own workers after its emits and retries, and what another
//! process writes to the file (`jadpo emit` or `jadpo retry` beside a
//! `jadpo dev`) is picked up at the worker's next poll (1 s by default).
//!
//! - [`SqliteStore::open`]: from a URL, creating the folder and migrating.
//! - [`emit_in`]: emit inside the caller's own transaction (the embedded
//!   API: an event exists if and only if that transaction committed).
//! - [`SqliteStore::transaction`]: such a transaction on the store's file.
//!
//! All SQL of this store lives in this folder. `docs/system-tables.md`
//! describes the tables.

// The same files for the same operations as `postgres/`: claim, emit,
// finish (with hold and give-back), retry, sweep, prune, read, minutes,
// rows, schema, schedules, alerts, limits. `pool.rs` is SQLite's own: one
// queued writer per process, readers on `spawn_blocking`.
mod alerts;
mod claim;
mod clock;
mod emit;
#[cfg(feature = "sqlx-sqlite")]
mod emit_sqlx;
mod finish;
mod footprint;
mod keys;
mod limits;
mod minutes;
mod pool;
mod prune;
mod read;
mod retry;
mod rows;
mod schedules;
mod schema;
mod sessions;
mod sweep;
#[cfg(feature = "testing")]
pub mod testing;
mod writes;

#[cfg(feature = "sqlx-sqlite")]
pub use emit_sqlx::emit_in_sqlx;
pub use rusqlite;
pub use schema::{LATEST as SCHEMA_VERSION, MIGRATIONS};

use crate::types::*;
use crate::{ScheduleStore, Store};
use jadpo_core::alert::SendDecision;
use jadpo_core::clock::Anchor;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::{BreakerPolicy, Delivery, DeliveryId, EventId, FailureRecord, LeaseToken, Timestamp};
use pool::{store_error, Pool};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Also SQLite's bound on how long one transaction holds the write lock.
pub use crate::store::MAX_BATCH;

/// How a SQLite store opens: how long a write waits for the file's lock, its
/// pool, and its breaker policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long a write waits for the file's write lock (held by another
    /// process, or another write of this one) before it is
    /// `StoreError::Unavailable("database is locked ...")`.
    pub busy_timeout: Duration,
    /// Connections open at most; reads run in parallel with the one write.
    pub pool_size: usize,
    /// When breakers open and how long they pause (docs/retries.md).
    pub policy: BreakerPolicy,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            pool_size: 4,
            policy: BreakerPolicy::DEFAULT,
        }
    }
}

/// A SQLite store. Cloning shares its pool.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
    policy: BreakerPolicy,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.pool.path())
            .finish_non_exhaustive()
    }
}

fn invalid(url: &str, why: &str) -> StoreError {
    // Redacted though a SQLite path has no password: `url` is not always
    // one (`PgStore`'s URL given to `parse_url` by mistake).
    StoreError::InvalidUrl(format!("store URL {:?}: {why}", crate::redact_url(url)))
}

/// The file a `sqlite:` URL names: `sqlite:PATH`, relative to the current
/// folder or absolute (`sqlite:///abs/path` and `sqlite://rel/path` are
/// accepted too). An in-memory database is refused: it would lose every
/// delivery when the process ends; the in-memory store is for that.
pub fn parse_url(url: &str) -> Result<PathBuf, StoreError> {
    let rest = url
        .strip_prefix("sqlite:")
        .ok_or_else(|| invalid(url, "a SQLite store's URL is sqlite:PATH"))?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    if rest.is_empty() {
        return Err(invalid(
            url,
            "no path after `sqlite:`; write sqlite:PATH, such as sqlite:.jadpo/jadpo.db",
        ));
    }
    if rest == ":memory:" || rest.starts_with("file:") || rest.contains("mode=memory") {
        return Err(invalid(
            url,
            "an in-memory SQLite database is not durable; give a file path, \
             or use the in-memory store for tests",
        ));
    }
    Ok(PathBuf::from(rest))
}

/// Checks the path can be a database file and creates its folder.
fn prepare(path: &Path) -> Result<(), StoreError> {
    let fail = |why: String| StoreError::Unavailable(format!("sqlite {}: {why}", path.display()));
    if path.is_dir() {
        return Err(fail("is a folder, not a database file".into()));
    }
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() && !folder.exists() => std::fs::create_dir_all(folder)
            .map_err(|e| fail(format!("cannot create its folder {}: {e}", folder.display()))),
        Some(folder) if !folder.as_os_str().is_empty() && !folder.is_dir() => {
            Err(fail(format!("its folder {} is a file, not a folder", folder.display())))
        }
        _ => Ok(()),
    }
}

impl SqliteStore {
    /// Opens (creating it if absent) and migrates the database at `url`.
    pub async fn open(url: &str) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(url, SqliteOptions::default()).await
    }

    /// [`SqliteStore::open`] with options.
    pub async fn open_with(url: &str, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_migrating(url, options, false).await
    }

    /// Opens the file and applies the migrations [`crate::upgrade::plan`]
    /// gives; `force` applies contracts that stop older builds too.
    pub async fn open_migrating(url: &str, options: SqliteOptions, force: bool) -> Result<SqliteStore, StoreError> {
        let path = parse_url(url)?;
        prepare(&path)?;
        let store = SqliteStore {
            pool: Arc::new(Pool::new(path, options.busy_timeout, options.pool_size)),
            policy: options.policy,
        };
        // Two processes opening a new file at once meet while it becomes a
        // WAL database, where SQLite may answer busy without waiting: the
        // migration is tried again within the busy bound.
        let deadline = std::time::Instant::now() + options.busy_timeout;
        loop {
            match store.migrate_with(force).await {
                Ok(()) => return Ok(store),
                Err(StoreError::Unavailable(why))
                    if why.starts_with("database is locked") && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn migrate_with(&self, force: bool) -> Result<(), StoreError> {
        self.pool.write(move |tx| schema::migrate(tx, force)).await
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.pool.path()
    }

    /// The store's tables' rows, the file, its write-ahead log and the
    /// pages free for reuse (docs/performance.md, "Soak").
    pub async fn footprint(&self) -> Result<crate::Footprint, StoreError> {
        let path = self.path().to_path_buf();
        self.pool.read(move |c| footprint::read(c, &path)).await
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the store's file and
    /// commits if it returns `Ok`; an `Err` rolls everything back. Call
    /// [`emit_in`] inside it to emit with the caller's own writes.
    pub async fn transaction<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T, E> + Send + 'static,
    {
        self.pool.transaction(f).await
    }
}

/// Emits events, and one due delivery per subscriber of each, inside the
/// caller's open transaction on a migrated file: they exist if and only if
/// that transaction commits. Many events are written with one prepared
/// statement each for events and deliveries.
///
/// # Panics
/// If `conn` is not inside a transaction (it would commit on its own), or
/// more than [`MAX_BATCH`] events are given.
pub fn emit_in(conn: &rusqlite::Connection, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, StoreError> {
    assert!(
        !conn.is_autocommit(),
        "emit_in writes inside the caller's transaction: begin one first"
    );
    assert!(events.len() <= MAX_BATCH, "at most {MAX_BATCH} events per emit");
    let path = PathBuf::from(conn.path().unwrap_or("?"));
    emit::emit(conn, events, now).map_err(|f| store_error(&path, Duration::ZERO, f))
}

impl Store for SqliteStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(false).await
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        let applied = self.pool.read(|c| Ok(schema::applied(c)?)).await?;
        crate::upgrade::check(schema::MIGRATIONS, &applied).map_err(StoreError::Schema)
    }

    async fn schema_standing(&self) -> Result<crate::upgrade::Standing, StoreError> {
        let applied = self.pool.read(|c| Ok(schema::applied(c)?)).await?;
        Ok(crate::upgrade::standing(schema::MIGRATIONS, &applied))
    }

    async fn emit(&self, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, StoreError> {
        assert!(events.len() <= MAX_BATCH, "at most {MAX_BATCH} events per emit");
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let events = events.to_vec();
        self.pool.write(move |tx| emit::emit(tx, &events, now)).await
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimReport, StoreError> {
        assert!(req.limit <= MAX_BATCH, "a claim takes at most {MAX_BATCH} rows");
        let (worker, routes) = (req.worker.to_owned(), req.routes.clone());
        let (now, limit, lease) = (req.now, req.limit, req.lease);
        self.pool
            .write(move |tx| {
                let req = ClaimRequest {
                    worker: &worker,
                    routes: &routes,
                    now,
                    limit,
                    lease,
                };
                claim::claim(tx, &req)
            })
            .await
    }

    async fn hold_claimed(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        connection: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let connection = connection.to_owned();
        self.pool
            .write(move |tx| {
                finish::set_aside(tx, id, token, now, |d| {
                    jadpo_core::claim::hold_claimed(d, &connection, now)
                })
            })
            .await
    }

    async fn give_back(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        self.pool
            .write(move |tx| finish::set_aside(tx, id, token, now, |d| jadpo_core::claim::give_back(d, now)))
            .await
    }

    async fn commit_handled(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        self.pool
            .write(move |tx| finish::commit_handled(tx, id, token, now))
            .await
    }

    async fn finish_batch(&self, batch: &[Finish]) -> Result<Vec<Result<FinishReport, StoreError>>, StoreError> {
        assert!(batch.len() <= MAX_BATCH, "at most {MAX_BATCH} finishes per batch");
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let batch = batch.to_vec();
        let policy = self.policy;
        self.pool
            .write(move |tx| finish::finish_batch(tx, &batch, &policy))
            .await
    }

    async fn sweep(&self, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, StoreError> {
        self.pool.write(move |tx| sweep::sweep(tx, now, wake_lease)).await
    }

    async fn retry(&self, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        assert!(due.len() <= MAX_BATCH, "at most {MAX_BATCH} retries at once");
        let due = due.to_vec();
        self.pool.write(move |tx| retry::retry(tx, &due, now)).await
    }

    async fn skip(&self, ids: &[DeliveryId], by: &str, now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        assert!(ids.len() <= MAX_BATCH, "at most {MAX_BATCH} skips at once");
        let (ids, by) = (ids.to_vec(), by.to_owned());
        self.pool.write(move |tx| retry::skip(tx, &ids, &by, now)).await
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>, StoreError> {
        self.pool.read(move |c| read::delivery(c, id)).await
    }

    async fn waits_for(&self, id: DeliveryId) -> Result<Option<DeliveryId>, StoreError> {
        self.pool.read(move |c| keys::waits_for(c, id)).await
    }

    async fn list(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        let filter = filter.clone();
        self.pool.read(move |c| read::list(c, &filter)).await
    }

    async fn attempts(&self, id: DeliveryId) -> Result<Vec<AttemptRecord>, StoreError> {
        self.pool.read(move |c| read::attempts(c, id)).await
    }

    async fn event(&self, id: EventId) -> Result<Option<EventRecord>, StoreError> {
        self.pool.read(move |c| read::event(c, id)).await
    }

    async fn breakers(&self) -> Result<Vec<BreakerView>, StoreError> {
        self.pool.read(read::breakers).await
    }

    async fn alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        self.pool.read(move |c| alerts::list(c, limit)).await
    }

    async fn limit_states(&self) -> Result<Vec<jadpo_core::limit::LimitState>, StoreError> {
        self.pool.read(limits::all).await
    }

    async fn waiting_counts(&self) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        self.pool.read(limits::waiting_counts).await
    }

    async fn claim_alert_sends(
        &self,
        now: Timestamp,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<AlertRecord>, StoreError> {
        self.pool.write(move |tx| alerts::claim(tx, now, limit, lease)).await
    }

    async fn finish_alert_send(&self, id: i64, attempt: u32, decision: &SendDecision) -> Result<bool, StoreError> {
        let decision = decision.clone();
        self.pool
            .write(move |tx| alerts::finish(tx, id, attempt, &decision))
            .await
    }

    async fn add_minutes(&self, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), StoreError> {
        assert!(counts.len() <= MAX_BATCH, "at most {MAX_BATCH} counts at once");
        let counts = counts.to_vec();
        self.pool
            .write(move |tx| minutes::add(tx, &counts, forget_before))
            .await
    }

    async fn minutes(&self, since: Timestamp) -> Result<Vec<MinuteCount>, StoreError> {
        self.pool.read(move |c| minutes::read(c, since)).await
    }

    async fn gauges(&self, q: &GaugeQuery<'_>) -> Result<Gauges, StoreError> {
        let (subscribers, connections, now, cap) = (q.subscribers.to_vec(), q.connections.to_vec(), q.now, q.cap);
        self.pool
            .read(move |c| read::gauges(c, &subscribers, &connections, now, cap))
            .await
    }

    async fn counts_up_to(
        &self,
        cap: u64,
    ) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, StoreError> {
        self.pool.read(move |c| read::counts_up_to(c, cap)).await
    }

    async fn prune(&self, before: Timestamp, batch: usize) -> Result<usize, StoreError> {
        assert!(batch <= MAX_BATCH, "prune deletes at most {MAX_BATCH} rows a batch");
        self.pool.write(move |tx| prune::prune(tx, before, batch)).await
    }

    async fn counts(&self) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, StoreError> {
        self.pool.read(read::counts).await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.pool.read(read::next_due).await
    }

    async fn start_session(&self, hash: &str, expires_at: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        let hash = hash.to_owned();
        self.pool
            .write(move |tx| sessions::start(tx, &hash, expires_at, now))
            .await
    }

    async fn session_alive(&self, hash: &str, now: Timestamp) -> Result<bool, StoreError> {
        let hash = hash.to_owned();
        self.pool.read(move |c| sessions::alive(c, &hash, now)).await
    }

    async fn end_session(&self, hash: &str) -> Result<(), StoreError> {
        let hash = hash.to_owned();
        self.pool.write(move |tx| sessions::end(tx, &hash)).await
    }

    async fn clock_anchor(&self) -> Result<Option<Anchor>, StoreError> {
        self.pool.read(clock::anchor).await
    }

    async fn keep_clock_anchor(&self, anchor: Anchor) -> Result<Anchor, StoreError> {
        self.pool.write(move |tx| clock::keep(tx, anchor)).await
    }
}

impl ScheduleStore for SqliteStore {
    async fn claim_schedules(
        &self,
        schedules: &[(String, Timestamp)],
        worker: &str,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<ScheduleClaim>, StoreError> {
        assert!(schedules.len() <= MAX_BATCH, "at most {MAX_BATCH} schedules at once");
        let (schedules, worker) = (schedules.to_vec(), worker.to_owned());
        self.pool
            .write(move |tx| schedules::claim(tx, &schedules, &worker, now, lease))
            .await
    }

    async fn finish_schedule(
        &self,
        name: &str,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
        now: Timestamp,
    ) -> Result<Option<ScheduleAlert>, StoreError> {
        let name = name.to_owned();
        self.pool
            .write(move |tx| schedules::finish(tx, &name, token, failure.clone(), next_due, now))
            .await
    }

    async fn schedules(&self) -> Result<Vec<ScheduleState>, StoreError> {
        self.pool.read(schedules::all).await
    }
}
