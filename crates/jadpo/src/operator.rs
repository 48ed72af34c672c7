//! What an operator does to deliveries that ended (docs/retries.md,
//! "Operator retries"): retry them with a fresh budget, or skip them.
//! The command line, the API and the console all come through here.

use crate::Jadpo;
use jadpo_core::delivery::{check_operator_name, OperatorNameInvalid};
use jadpo_core::DeliveryId;
use jadpo_store::{ScheduleStore, StoreError};
use std::fmt;
use std::time::Duration;

/// Why a skip was refused.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display())).await?;
/// let jadpo = jadpo::builder().app_source("app.jadpo", "event Ping { id: string }")?.build(store).await?;
/// let err = jadpo.skip(&[], "").await.unwrap_err();
/// assert_eq!(err.code(), "skip.by_invalid");
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SkipError {
    /// The name to record is not one (`skip.by_invalid`).
    By(OperatorNameInvalid),
    /// The store could not write it (`store.unavailable`).
    Store(StoreError),
}

impl SkipError {
    /// The stable error code, the same the command line and the HTTP API
    /// give for it.
    pub fn code(&self) -> &'static str {
        match self {
            SkipError::By(_) => "skip.by_invalid",
            SkipError::Store(e) => e.code(),
        }
    }
}

impl fmt::Display for SkipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipError::By(e) => write!(f, "{e}: give 1 to 64 printable characters"),
            SkipError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SkipError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SkipError::By(_) => None,
            SkipError::Store(e) => Some(e),
        }
    }
}

impl<S: ScheduleStore> Jadpo<S> {
    /// An operator's retry of failed and parked deliveries: a fresh budget
    /// from now. More than one is spread evenly at random over `spread`.
    /// Wakes this process's workers (and, on PostgreSQL, every process's):
    /// those due now start at once, the others at their time.
    pub async fn retry(&self, ids: &[DeliveryId], spread: Duration) -> Result<Vec<DeliveryId>, StoreError> {
        let now = self.clock.now();
        // The thread's random source is dropped before the await, so this
        // future is `Send` (an HTTP handler's must be).
        let due = jadpo_core::delivery::retry_spread(ids, now, spread, &mut rand::rng());
        let retried = self.store.retry(&due, now).await?;
        if !retried.is_empty() {
            self.engine.wake();
        }
        Ok(retried)
    }

    /// An operator's skip of failed and parked deliveries: each keeps its
    /// state and records `by` and now; nothing is called. A `strict` key
    /// one blocked goes on with its next delivery, which this process's
    /// workers (and, on PostgreSQL, every process's) are woken for.
    /// Returns those skipped: one not failed or parked, or skipped
    /// already, is left out.
    pub async fn skip(&self, ids: &[DeliveryId], by: &str) -> Result<Vec<DeliveryId>, SkipError> {
        check_operator_name(by).map_err(SkipError::By)?;
        let skipped = self
            .store
            .skip(ids, by, self.clock.now())
            .await
            .map_err(SkipError::Store)?;
        if !skipped.is_empty() {
            self.engine.wake();
        }
        Ok(skipped)
    }
}
