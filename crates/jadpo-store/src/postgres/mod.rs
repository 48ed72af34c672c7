//! The PostgreSQL store (`postgres://...`), for many worker processes on
//! many machines.
//!
//! Every trait method is one READ COMMITTED transaction that reads rows,
//! asks [`crate::plan`] what to write, and writes it. All the SQL of this
//! store lives in this folder:
//!
//! - [`schema`]: the versioned migrations.
//! - `transaction`: one method's transaction, redone on a conflict or a
//!   deadlock, and what each failure tells the caller.
//! - `rows`: row to value and back, breaker compare-and-set, release.
//! - `writes`: the bulk write of many deliveries.
//! - `claim`, `finish`, `sweep`: the hot paths.
//! - `schedules`: schedules' state (`ScheduleStore`).
//! - `read`: emit (also inside the caller's transaction) and the listings.
//! - `alerts`: alert messages, and their sends to the app's alert route.
//! - `minutes`: the per-minute summary the console's charts read.
//! - `listen`: the notifications that wake idle workers in every process,
//!   and the next due time an idle worker sleeps until.
//! - `testing` (feature `testing`): a fresh store in a schema of its own,
//!   for tests.
//! - [`scratch`]: a schema made and dropped for a one-off run (`jadpo bench`).
//!
//! Why READ COMMITTED is enough: every row a method changes is locked first
//! (`FOR UPDATE [SKIP LOCKED]`) and re-read at its newest version, or (a
//! finish) written only if still running under the lease it read, else the
//! method is redone; so two transactions never write the same delivery from
//! stale reads; and every breaker write is one statement conditional on the
//! version read, so a stale breaker read makes the write hit zero rows and
//! the whole method is redone. SERIALIZABLE would add predicate locks and serialization
//! failures on the hottest table without protecting anything more.
//!
//! A connection lost while its COMMIT is in flight leaves the outcome
//! unknown: the method says `Unavailable` though the server may have
//! committed. Every method is safe under that: a claim that did commit
//! leaves leases that end and are taken over; a finish that did commit
//! refuses its retry with `LeaseLost`, and the record shows it finished.
//!
//! Why tokio-postgres with deadpool: tokio-postgres is the async driver the
//! rest of the stack (tokio) runs on, with binary array parameters for the
//! `unnest` bulk writes and pipelining of independent statements.
//! deadpool-postgres is a thin pool over it with per-connection
//! prepared-statement caches, wait/create/recycle timeouts, and a recycle
//! check that drops connections the server closed, so the same store value
//! reconnects by itself after an outage. (bb8 offers the same but no
//! statement cache; sqlx would bring its own driver and macros.)

// The same files for the same operations as `sqlite/`: claim, emit,
// finish (with hold and give-back), retry, sweep, prune, read, minutes,
// rows, schema, schedules, alerts, limits. PostgreSQL's own: `listen.rs`
// (LISTEN/NOTIFY wakes idle workers in every process; SQLite has one
// process), `writes.rs` (the bulk `UPDATE ... FROM unnest` that many
// processes' batches need to be one round trip), `scratch.rs` (the schema
// `jadpo bench` makes and drops) and `testing.rs` (a fresh schema per test).
#[macro_use]
mod transaction;
mod alerts;
mod claim;
mod clock;
mod connect;
mod emit;
#[cfg(feature = "sqlx-postgres")]
mod emit_sqlx;
mod emit_tx;
#[cfg(feature = "testing")]
mod explain;
mod finish;
mod footprint;
mod keys;
mod limits;
mod listen;
mod minutes;
mod pooler;
mod prune;
mod read;
mod retry;
mod rows;
mod schedules;
pub mod schema;
pub mod scratch;
mod sessions;
mod sweep;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod writes;

use crate::types::*;
use crate::{ScheduleStore, Store};
use deadpool_postgres::{Object, Pool};
use jadpo_core::alert::SendDecision;
use jadpo_core::clock::Anchor;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::{BreakerPolicy, Delivery, DeliveryId, EventId, FailureRecord, LeaseToken, Timestamp};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

pub use emit::emit_in;
#[cfg(feature = "sqlx-postgres")]
pub use emit_sqlx::emit_in_sqlx;
use transaction::refuses_writes;
pub(crate) use transaction::{pause_before_retry, reason, Abort};

pub use crate::store::MAX_BATCH;

/// How a store connects.
#[derive(Clone, Debug)]
pub struct Options {
    /// When breakers open and how long they pause (docs/retries.md).
    pub policy: BreakerPolicy,
    /// Connections in the pool: the most transactions in flight at once.
    pub pool_size: usize,
    /// Limit for opening one connection (TCP and the startup handshake).
    pub connect_timeout: Duration,
    /// Limit for waiting for a free connection, and again for one method's
    /// transaction. Past it the connection is dropped, not reused.
    pub op_timeout: Duration,
    /// Tables live in this schema (`search_path`) instead of the URL's.
    pub schema: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            policy: BreakerPolicy::DEFAULT,
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            op_timeout: Duration::from_secs(30),
            schema: None,
        }
    }
}

/// The PostgreSQL store. Cheap to clone: clones share one pool.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// For the listening connection, which is not the pool's.
    dial: listen::Dial,
    policy: BreakerPolicy,
    op_timeout: Duration,
    /// Transactions redone because another process moved a breaker.
    redone: AtomicU64,
    /// Set once the server was checked: the connections keep their
    /// sessions, and whether its autovacuum runs was said.
    server_checked: tokio::sync::OnceCell<()>,
    /// Whatever must live as long as the store (a test's schema).
    _guard: Option<Arc<dyn Send + Sync>>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.inner.pool.status();
        f.debug_struct("PgStore")
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .field("policy", &self.inner.policy)
            .finish()
    }
}

impl PgStore {
    /// Connects to `url` (`postgres://` or `postgresql://`) with the default
    /// options and migrates.
    pub async fn open(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect(url, Options::default()).await
    }

    /// Connects to `url` and migrates. A bad URL or an unreachable server is
    /// `StoreError::Unavailable` with the reason, within `connect_timeout`.
    /// Connections that do not keep their sessions (PgBouncer in transaction
    /// mode) are `StoreError::TransactionPooling`, before anything is written.
    pub async fn connect(url: &str, options: Options) -> Result<PgStore, StoreError> {
        let store = PgStore::lazy(url, options)?;
        store.migrate().await?;
        Ok(store)
    }

    /// Applies the migrations [`crate::upgrade::plan`] gives; `force` applies
    /// contracts that stop older builds too (`jadpo migrate --force`).
    pub async fn migrate_with(&self, force: bool) -> Result<(), StoreError> {
        // Once per store, before anything is written: connections that do
        // not keep their sessions are refused (`pooler.rs`), and a server
        // without autovacuum is said, not refused (it may vacuum by hand on
        // a schedule).
        self.inner
            .server_checked
            .get_or_try_init(|| async {
                pooler::check(self).await?;
                if let Ok(false) = in_transaction!(self, |tx| footprint::autovacuum(&tx).await) {
                    tracing::warn!(
                        reason = "the server's autovacuum is off: nothing reclaims the row versions each \
                                  delivery leaves, and the tables grow whatever the retention",
                        fix = "turn autovacuum on (docs/deploy.md, \"Autovacuum\")",
                        "store.autovacuum_off"
                    );
                }
                Ok::<(), StoreError>(())
            })
            .await?;
        in_transaction!(self, |tx| schema::migrate(&tx, force).await).map(drop)
    }

    /// Keeps `guard` alive as long as any clone of this store.
    #[cfg(feature = "testing")]
    pub(crate) fn with_guard(self, guard: Arc<dyn Send + Sync>) -> PgStore {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|_| panic!("a fresh store has no clones"));
        PgStore {
            inner: Arc::new(Inner {
                _guard: Some(guard),
                ..inner
            }),
        }
    }

    /// A pooled connection, for the embedded API: open a transaction on it,
    /// write your own rows, call [`emit_in`], commit.
    pub async fn connection(&self) -> Result<Object, StoreError> {
        self.inner
            .pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(format!("PostgreSQL connection: {}", reason(&e))))
    }

    /// The store's tables' rows, dead rows and bytes, and the server's
    /// WAL position (docs/performance.md, "Soak").
    pub async fn footprint(&self) -> Result<crate::Footprint, StoreError> {
        in_transaction!(self, |tx| footprint::read(&tx).await)
    }

    /// The channel this store's notifications go to (`jadpo_due_<schema>`):
    /// `LISTEN` on it to hear of deliveries made due.
    pub async fn channel(&self) -> Result<String, StoreError> {
        in_transaction!(self, |tx| listen::channel(&tx).await)
    }

    /// How many transactions this store redid from the start because
    /// another process changed a breaker (or a deadlock) meanwhile: a
    /// measure of contention.
    pub fn redone(&self) -> u64 {
        self.inner.redone.load(Ordering::Relaxed)
    }
}

impl Store for PgStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        self.migrate_with(false).await
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        let applied = in_transaction!(self, |tx| schema::applied(&tx).await)?;
        crate::upgrade::check(schema::MIGRATIONS, &applied).map_err(StoreError::Schema)
    }

    async fn schema_standing(&self) -> Result<crate::upgrade::Standing, StoreError> {
        let applied = in_transaction!(self, |tx| schema::applied(&tx).await)?;
        Ok(crate::upgrade::standing(schema::MIGRATIONS, &applied))
    }

    async fn emit(&self, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        in_transaction!(self, |tx| emit::emit(&tx, events, now).await)
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimReport, StoreError> {
        assert!(
            req.limit <= MAX_BATCH,
            "claim of {} rows: at most {MAX_BATCH}",
            req.limit
        );
        if req.limit == 0 {
            return Ok(ClaimReport::default());
        }
        in_transaction!(self, |tx| claim::claim(&tx, req).await)
    }

    async fn hold_claimed(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        connection: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        in_transaction!(self, |tx| {
            finish::set_aside(&tx, id, token, now, |d| {
                jadpo_core::claim::hold_claimed(d, connection, now)
            })
            .await
        })
    }

    async fn give_back(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        in_transaction!(self, |tx| {
            finish::set_aside(&tx, id, token, now, |d| jadpo_core::claim::give_back(d, now)).await
        })
    }

    async fn commit_handled(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        in_transaction!(self, |tx| finish::commit_handled(&tx, id, token, now).await)
    }

    /// Two: measured on two cores, a second batch in flight drains `fifo`
    /// keys 40 % faster and plain deliveries about 10 %; a third gave
    /// nothing more (docs/performance.md). One when the pool is too small
    /// to leave connections to the claim and the tick.
    fn finish_writers(&self) -> usize {
        if self.inner.pool.status().max_size >= 4 {
            2
        } else {
            1
        }
    }

    async fn finish_batch(&self, batch: &[Finish]) -> Result<Vec<Result<FinishReport, StoreError>>, StoreError> {
        assert!(
            batch.len() <= MAX_BATCH,
            "finish of {} rows: at most {MAX_BATCH}",
            batch.len()
        );
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let policy = self.inner.policy;
        // Only the first try plans from the rows the finishes carry: a redo
        // (perhaps because one of them moved) reads them all.
        let tries = std::sync::atomic::AtomicU32::new(0);
        in_transaction!(self, |tx| {
            let first = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0;
            finish::finish_batch(&tx, batch, &policy, first).await
        })
    }

    async fn sweep(&self, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, StoreError> {
        in_transaction!(self, |tx| sweep::sweep(&tx, now, wake_lease).await)
    }

    async fn retry(&self, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        assert!(
            due.len() <= MAX_BATCH,
            "retry of {} rows: at most {MAX_BATCH}",
            due.len()
        );
        if due.is_empty() {
            return Ok(Vec::new());
        }
        in_transaction!(self, |tx| retry::retry(&tx, due, now).await)
    }

    async fn skip(&self, ids: &[DeliveryId], by: &str, now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        assert!(
            ids.len() <= MAX_BATCH,
            "skip of {} rows: at most {MAX_BATCH}",
            ids.len()
        );
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        in_transaction!(self, |tx| retry::skip(&tx, ids, by, now).await)
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>, StoreError> {
        in_transaction!(self, |tx| read::delivery(&tx, id).await)
    }

    async fn waits_for(&self, id: DeliveryId) -> Result<Option<DeliveryId>, StoreError> {
        in_transaction!(self, |tx| Ok::<_, Abort>(keys::waits_for(&tx, id).await?))
    }

    async fn list(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        in_transaction!(self, |tx| read::list(&tx, filter).await)
    }

    async fn attempts(&self, id: DeliveryId) -> Result<Vec<AttemptRecord>, StoreError> {
        in_transaction!(self, |tx| read::attempts(&tx, id).await)
    }

    async fn event(&self, id: EventId) -> Result<Option<EventRecord>, StoreError> {
        in_transaction!(self, |tx| read::event(&tx, id).await)
    }

    async fn breakers(&self) -> Result<Vec<BreakerView>, StoreError> {
        in_transaction!(self, |tx| read::breakers(&tx).await)
    }

    async fn alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        in_transaction!(self, |tx| alerts::list(&tx, limit).await)
    }

    async fn add_minutes(&self, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), StoreError> {
        assert!(counts.len() <= MAX_BATCH, "at most {MAX_BATCH} counts at once");
        in_transaction!(self, |tx| minutes::add(&tx, counts, forget_before).await)
    }

    async fn minutes(&self, since: Timestamp) -> Result<Vec<MinuteCount>, StoreError> {
        in_transaction!(self, |tx| minutes::read(&tx, since).await)
    }

    async fn gauges(&self, q: &GaugeQuery<'_>) -> Result<Gauges, StoreError> {
        in_transaction!(self, |tx| read::gauges(&tx, q).await)
    }

    async fn counts_up_to(
        &self,
        cap: u64,
    ) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, StoreError> {
        in_transaction!(self, |tx| read::counts_up_to(&tx, cap).await)
    }

    async fn limit_states(&self) -> Result<Vec<jadpo_core::limit::LimitState>, StoreError> {
        in_transaction!(self, |tx| limits::all(&tx).await)
    }

    async fn waiting_counts(&self) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        in_transaction!(self, |tx| limits::waiting_counts(&tx).await)
    }

    async fn claim_alert_sends(
        &self,
        now: Timestamp,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<AlertRecord>, StoreError> {
        in_transaction!(self, |tx| alerts::claim(&tx, now, limit, lease).await)
    }

    async fn finish_alert_send(&self, id: i64, attempt: u32, decision: &SendDecision) -> Result<bool, StoreError> {
        in_transaction!(self, |tx| alerts::finish(&tx, id, attempt, decision).await)
    }

    async fn prune(&self, before: Timestamp, batch: usize) -> Result<usize, StoreError> {
        assert!(batch <= MAX_BATCH, "prune of {batch} rows: at most {MAX_BATCH}");
        if batch == 0 {
            return Ok(0);
        }
        in_transaction!(self, |tx| prune::prune(&tx, before, batch).await)
    }

    async fn counts(&self) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, StoreError> {
        in_transaction!(self, |tx| read::counts(&tx).await)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        in_transaction!(self, |tx| read::next_due(&tx).await)
    }

    async fn start_session(&self, hash: &str, expires_at: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        in_transaction!(self, |tx| sessions::start(&tx, hash, expires_at, now).await)
    }

    async fn session_alive(&self, hash: &str, now: Timestamp) -> Result<bool, StoreError> {
        in_transaction!(self, |tx| sessions::alive(&tx, hash, now).await)
    }

    async fn end_session(&self, hash: &str) -> Result<(), StoreError> {
        in_transaction!(self, |tx| sessions::end(&tx, hash).await)
    }

    async fn clock_anchor(&self) -> Result<Option<Anchor>, StoreError> {
        in_transaction!(self, |tx| clock::anchor(&tx).await)
    }

    async fn keep_clock_anchor(&self, anchor: Anchor) -> Result<Anchor, StoreError> {
        in_transaction!(self, |tx| clock::keep(&tx, anchor).await)
    }

    async fn listen(&self, wake: Arc<Notify>) {
        listen::run(&self.inner.dial, &wake).await
    }
}

impl ScheduleStore for PgStore {
    async fn claim_schedules(
        &self,
        schedules: &[(String, Timestamp)],
        worker: &str,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<ScheduleClaim>, StoreError> {
        assert!(
            schedules.len() <= MAX_BATCH,
            "claim of {} schedules: at most {MAX_BATCH}",
            schedules.len()
        );
        if schedules.is_empty() {
            return Ok(Vec::new());
        }
        in_transaction!(self, |tx| schedules::claim(&tx, schedules, worker, now, lease).await)
    }

    async fn finish_schedule(
        &self,
        name: &str,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
        now: Timestamp,
    ) -> Result<Option<ScheduleAlert>, StoreError> {
        in_transaction!(self, |tx| schedules::finish(
            &tx,
            name,
            token,
            failure.clone(),
            next_due,
            now
        )
        .await)
    }

    async fn schedules(&self) -> Result<Vec<ScheduleState>, StoreError> {
        in_transaction!(self, |tx| schedules::all(&tx).await)
    }
}
