//! One method, one transaction: what a failed attempt means (redo it, or
//! give the caller `Unavailable`), and the macro every method runs its
//! transaction through.

use super::PgStore;
use crate::store::MAX_TRIES;
use crate::types::StoreError;
use deadpool_postgres::Object;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Why a transaction did not commit.
pub(crate) type Abort = crate::store::Abort<tokio_postgres::Error>;

impl From<tokio_postgres::Error> for Abort {
    fn from(e: tokio_postgres::Error) -> Abort {
        Abort::Db(e)
    }
}

/// A driver error as the reason of `StoreError::Unavailable`, with its
/// causes: tokio-postgres' own text alone is often just "db error".
pub(crate) fn reason(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Deadlocks and serialization failures are worth redoing like a conflict.
fn retryable(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code()
        .is_some_and(|c| *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE)
}

/// SQLSTATE 25006: the server is read-only.
pub(super) fn refuses_writes(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// Runs `$body` (an expression using the transaction `$tx` and giving
/// `Result<T, Abort>`) in one transaction on a pooled connection, under the
/// store's time limit, redone from the start on a conflict. Evaluates to
/// `Result<T, StoreError>`. A macro rather than a function taking a closure:
/// the body borrows both the transaction and the caller's arguments, which a
/// closure returning a `Send` future cannot express on stable Rust.
macro_rules! in_transaction {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let store: &$crate::postgres::PgStore = $store;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let mut client = match store.connection().await {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
            let result = tokio::time::timeout(store.op_timeout(), async {
                let $tx = client.transaction().await?;
                let value = $body?;
                $tx.commit().await?;
                Ok::<_, $crate::postgres::Abort>(value)
            })
            .await;
            match store.settle(result, client, tries) {
                Some(done) => break done,
                None => $crate::postgres::pause_before_retry(tries).await,
            }
        }
    }};
}

/// A short random pause before redoing a method, so two processes that
/// keep colliding on one breaker drift apart.
pub(crate) async fn pause_before_retry(tries: u32) {
    // Drawn before the await: the thread's random source stays on this thread.
    let wait = jadpo_core::Backoff::CONFLICT.draw(tries, None, &mut rand::rng());
    tokio::time::sleep(wait).await;
}

impl PgStore {
    pub(crate) fn op_timeout(&self) -> Duration {
        self.inner.op_timeout
    }

    /// What a transaction's attempt came to: `Some` to return it, `None` to
    /// redo the method.
    pub(crate) fn settle<T>(
        &self,
        result: Result<Result<T, Abort>, tokio::time::error::Elapsed>,
        client: Object,
        tries: u32,
    ) -> Option<Result<T, StoreError>> {
        let again = |why: &str| {
            self.inner.redone.fetch_add(1, Ordering::Relaxed);
            (tries >= MAX_TRIES).then(|| Err(StoreError::Unavailable(format!("{why}: gave up after {tries} tries"))))
        };
        match result {
            Ok(Ok(value)) => Some(Ok(value)),
            Ok(Err(Abort::Store(e))) => Some(Err(e)),
            Ok(Err(Abort::Conflict)) => again("breaker contention"),
            Ok(Err(Abort::Db(e))) if retryable(&e) => again(&reason(&e)),
            Ok(Err(Abort::Db(e))) if refuses_writes(&e) => {
                // A standby, or a primary since demoted that a DNS name
                // still points at: this connection will never write again.
                // Dropped, so the next try connects anew, and a URL with
                // `target_session_attrs=read-write` finds the writable one.
                drop(Object::take(client));
                again(&format!("the server refuses writes (a standby?): {}", reason(&e)))
            }
            Ok(Err(Abort::Db(e))) => Some(Err(StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e))))),
            Err(_) => {
                // The statement may still be running or its answer half
                // read: this connection is not fit to be reused.
                drop(Object::take(client));
                Some(Err(StoreError::Unavailable(format!(
                    "PostgreSQL did not answer within {:?}",
                    self.inner.op_timeout
                ))))
            }
        }
    }
}
