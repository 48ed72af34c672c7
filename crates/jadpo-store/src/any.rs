//! [`AnyStore`]: a SQLite or a PostgreSQL store, chosen at run time.
//!
//! Each variant exists only with its database's feature (`sqlite`,
//! `postgres`), so an embedder builds only the driver it uses; a URL naming
//! a store left out of the build is refused by [`AnyStore::open`] with the
//! feature to turn on.

// Built with neither database, the enum has no variants: every method is
// unreachable and its arguments go unused.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(unused))]

#[cfg(feature = "postgres")]
use crate::postgres::PgStore;
#[cfg(feature = "sqlite")]
use crate::sqlite::{SqliteOptions, SqliteStore};
use crate::types::*;
use crate::{ScheduleStore, Store};
use jadpo_core::alert::SendDecision;
use jadpo_core::clock::Anchor;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::{Delivery, DeliveryId, DeliveryState, EventId, FailureRecord, LeaseToken, Timestamp};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// A store chosen at run time: SQLite or PostgreSQL, behind the same traits,
/// so one process can work several stores of different kinds (an app's
/// `store` blocks) with one engine type.
///
/// Every method, `listen` included, is the chosen store's own. Cloning
/// shares the store's pool, as cloning the store itself does.
#[derive(Clone, Debug)]
pub enum AnyStore {
    /// A SQLite store (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteStore),
    /// A PostgreSQL store (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(PgStore),
}

impl AnyStore {
    /// `"sqlite"` or `"postgres"`.
    pub fn kind(&self) -> &'static str {
        match *self {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(_) => "postgres",
        }
    }

    /// Opens (and migrates) the store `url` names: `sqlite:PATH` or
    /// `postgres://...` (`postgresql://` too). A scheme whose store this
    /// build left out is `InvalidUrl` naming the feature, so the mistake is
    /// told apart from an unreachable store.
    pub async fn open(url: &str) -> Result<AnyStore, StoreError> {
        AnyStore::open_migrating(url, false).await
    }

    /// Opens the store `url` names and applies every migration, contracts
    /// that stop older builds included (`jadpo migrate --force`, once no
    /// older process runs on the store).
    pub async fn open_forced(url: &str) -> Result<AnyStore, StoreError> {
        AnyStore::open_migrating(url, true).await
    }

    async fn open_migrating(url: &str, force: bool) -> Result<AnyStore, StoreError> {
        let url = url.trim();
        if url.starts_with("sqlite:") {
            #[cfg(feature = "sqlite")]
            return SqliteStore::open_migrating(url, SqliteOptions::default(), force)
                .await
                .map(AnyStore::Sqlite);
            #[cfg(not(feature = "sqlite"))]
            return Err(left_out(url, "SQLite", "sqlite"));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            return match PgStore::lazy(url, crate::postgres::Options::default()) {
                Ok(store) => store.migrate_with(force).await.map(|()| AnyStore::Postgres(store)),
                Err(e) => Err(e),
            };
            #[cfg(not(feature = "postgres"))]
            return Err(left_out(url, "PostgreSQL", "postgres"));
        }
        Err(StoreError::InvalidUrl(format!(
            "store URL {:?}: a store URL is sqlite:PATH or postgres://USER@HOST/DATABASE",
            crate::redact_url(url)
        )))
    }
}

#[cfg(not(all(feature = "sqlite", feature = "postgres")))]
fn left_out(url: &str, database: &str, feature: &str) -> StoreError {
    // Only the scheme: the rest may hold a password.
    let scheme = url.split(':').next().unwrap_or_default();
    StoreError::InvalidUrl(format!(
        "a {scheme}: URL names a {database} store, which this build of jadpo-store leaves out; \
         build it with the `{feature}` feature"
    ))
}

#[cfg(feature = "sqlite")]
impl From<SqliteStore> for AnyStore {
    fn from(store: SqliteStore) -> AnyStore {
        AnyStore::Sqlite(store)
    }
}

#[cfg(feature = "postgres")]
impl From<PgStore> for AnyStore {
    fn from(store: PgStore) -> AnyStore {
        AnyStore::Postgres(store)
    }
}

/// `delegate!(self, s => s.method(args))`: the same call on whichever store
/// `self` holds, awaited.
macro_rules! delegate {
    ($this:expr, $s:ident => $call:expr) => {
        match *$this {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(ref $s) => $call.await,
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(ref $s) => $call.await,
        }
    };
}

impl Store for AnyStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        delegate!(self, s => s.migrate())
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        delegate!(self, s => s.check_schema())
    }

    async fn schema_standing(&self) -> Result<crate::upgrade::Standing, StoreError> {
        delegate!(self, s => s.schema_standing())
    }

    async fn emit(&self, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, StoreError> {
        delegate!(self, s => s.emit(events, now))
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimReport, StoreError> {
        delegate!(self, s => s.claim(req))
    }

    async fn hold_claimed(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        connection: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        delegate!(self, s => s.hold_claimed(id, token, connection, now))
    }

    async fn give_back(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        delegate!(self, s => s.give_back(id, token, now))
    }

    async fn commit_handled(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        delegate!(self, s => s.commit_handled(id, token, now))
    }

    async fn finish_batch(&self, batch: &[Finish]) -> Result<Vec<Result<FinishReport, StoreError>>, StoreError> {
        delegate!(self, s => s.finish_batch(batch))
    }

    fn finish_writers(&self) -> usize {
        match *self {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(ref s) => s.finish_writers(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(ref s) => s.finish_writers(),
        }
    }

    async fn sweep(&self, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, StoreError> {
        delegate!(self, s => s.sweep(now, wake_lease))
    }

    async fn retry(&self, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        delegate!(self, s => s.retry(due, now))
    }

    async fn skip(&self, ids: &[DeliveryId], by: &str, now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        delegate!(self, s => s.skip(ids, by, now))
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>, StoreError> {
        delegate!(self, s => s.delivery(id))
    }

    async fn waits_for(&self, id: DeliveryId) -> Result<Option<DeliveryId>, StoreError> {
        delegate!(self, s => s.waits_for(id))
    }

    async fn list(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        delegate!(self, s => s.list(filter))
    }

    async fn attempts(&self, id: DeliveryId) -> Result<Vec<AttemptRecord>, StoreError> {
        delegate!(self, s => s.attempts(id))
    }

    async fn event(&self, id: EventId) -> Result<Option<EventRecord>, StoreError> {
        delegate!(self, s => s.event(id))
    }

    async fn breakers(&self) -> Result<Vec<BreakerView>, StoreError> {
        delegate!(self, s => s.breakers())
    }

    async fn limit_states(&self) -> Result<Vec<jadpo_core::limit::LimitState>, StoreError> {
        delegate!(self, s => s.limit_states())
    }

    async fn waiting_counts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        delegate!(self, s => s.waiting_counts())
    }

    async fn alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        delegate!(self, s => s.alerts(limit))
    }

    async fn claim_alert_sends(
        &self,
        now: Timestamp,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<AlertRecord>, StoreError> {
        delegate!(self, s => s.claim_alert_sends(now, limit, lease))
    }

    async fn finish_alert_send(&self, id: i64, attempt: u32, decision: &SendDecision) -> Result<bool, StoreError> {
        delegate!(self, s => s.finish_alert_send(id, attempt, decision))
    }

    async fn add_minutes(&self, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), StoreError> {
        delegate!(self, s => s.add_minutes(counts, forget_before))
    }

    async fn minutes(&self, since: Timestamp) -> Result<Vec<MinuteCount>, StoreError> {
        delegate!(self, s => s.minutes(since))
    }

    async fn counts(&self) -> Result<BTreeMap<DeliveryState, u64>, StoreError> {
        delegate!(self, s => s.counts())
    }

    async fn counts_up_to(&self, cap: u64) -> Result<BTreeMap<DeliveryState, u64>, StoreError> {
        delegate!(self, s => s.counts_up_to(cap))
    }

    async fn gauges(&self, q: &GaugeQuery<'_>) -> Result<Gauges, StoreError> {
        delegate!(self, s => s.gauges(q))
    }

    async fn prune(&self, before: Timestamp, batch: usize) -> Result<usize, StoreError> {
        delegate!(self, s => s.prune(before, batch))
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        delegate!(self, s => s.next_due())
    }

    async fn start_session(&self, hash: &str, expires_at: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        delegate!(self, s => s.start_session(hash, expires_at, now))
    }

    async fn session_alive(&self, hash: &str, now: Timestamp) -> Result<bool, StoreError> {
        delegate!(self, s => s.session_alive(hash, now))
    }

    async fn end_session(&self, hash: &str) -> Result<(), StoreError> {
        delegate!(self, s => s.end_session(hash))
    }

    async fn clock_anchor(&self) -> Result<Option<Anchor>, StoreError> {
        delegate!(self, s => s.clock_anchor())
    }

    async fn keep_clock_anchor(&self, anchor: Anchor) -> Result<Anchor, StoreError> {
        delegate!(self, s => s.keep_clock_anchor(anchor))
    }

    /// PostgreSQL listens for other processes' notifications; SQLite has
    /// nothing to listen to and returns at once.
    async fn listen(&self, wake: Arc<Notify>) {
        delegate!(self, s => s.listen(wake))
    }
}

impl ScheduleStore for AnyStore {
    async fn claim_schedules(
        &self,
        schedules: &[(String, Timestamp)],
        worker: &str,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<ScheduleClaim>, StoreError> {
        delegate!(self, s => s.claim_schedules(schedules, worker, now, lease))
    }

    async fn finish_schedule(
        &self,
        name: &str,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
        now: Timestamp,
    ) -> Result<Option<ScheduleAlert>, StoreError> {
        delegate!(self, s => s.finish_schedule(name, token, failure, next_due, now))
    }

    async fn schedules(&self) -> Result<Vec<ScheduleState>, StoreError> {
        delegate!(self, s => s.schedules())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_of_no_known_store_is_invalid_not_unavailable() {
        for url in ["mysql://h/db", "a.db", ""] {
            assert!(
                matches!(AnyStore::open(url).await, Err(StoreError::InvalidUrl(_))),
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn a_url_of_no_known_store_never_shows_its_password() {
        let Err(StoreError::InvalidUrl(why)) = AnyStore::open("mysql://root:hunter2@h/db").await else {
            panic!("opened a mysql: store");
        };
        assert!(
            why.contains("mysql://root:***@h/db") && !why.contains("hunter2"),
            "{why}"
        );
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_store_left_out_of_the_build_names_its_feature_and_no_password() {
        let Err(StoreError::InvalidUrl(why)) = AnyStore::open("postgres://u:secret@h/db").await else {
            panic!("opened a store this build has no driver for");
        };
        assert!(why.contains("`postgres` feature") && !why.contains("secret"), "{why}");
    }
}
