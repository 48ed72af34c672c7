//! Connections to one SQLite file: each opened with the PRAGMAs the store
//! relies on, kept in a small pool, and used for one transaction per call on
//! a blocking thread (rusqlite is synchronous; a tokio worker must not wait
//! on a file lock).

use crate::types::StoreError;
use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// A breaker row moved under us at most this many times in a row before a
/// call gives up as unavailable, rather than retrying for ever.
pub(crate) use crate::store::MAX_TRIES;

/// Why a transaction did not commit.
pub(crate) type Abort = crate::store::Abort<rusqlite::Error>;

impl From<rusqlite::Error> for Abort {
    fn from(e: rusqlite::Error) -> Abort {
        Abort::Db(e)
    }
}

/// `SQLITE_BUSY` or `SQLITE_LOCKED`: another connection holds the lock past
/// the busy bound. The connection itself is fine.
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Turns an abort into the store's error, naming the file.
pub(crate) fn store_error(path: &Path, busy: Duration, abort: Abort) -> StoreError {
    match abort {
        Abort::Store(e) => e,
        Abort::Conflict => StoreError::Unavailable(format!(
            "breaker contention: a breaker row of {} moved {MAX_TRIES} times in a row",
            path.display()
        )),
        Abort::Db(e) if is_busy(&e) => StoreError::Unavailable(format!(
            "database is locked: {} stayed busy past {} ms",
            path.display(),
            busy.as_millis()
        )),
        Abort::Db(e) => {
            let hint = match e.sqlite_error_code() {
                Some(ErrorCode::CannotOpen) => " (does its folder exist, and is it writable?)",
                Some(ErrorCode::ReadOnly) => " (is the file or its folder read-only?)",
                Some(ErrorCode::NotADatabase) => " (the file is not a SQLite database)",
                _ => "",
            };
            StoreError::Unavailable(format!("sqlite {}: {e}{hint}", path.display()))
        }
    }
}

/// One writer at a time within this process. SQLite serialises writers
/// anyway; queueing them here spares them its busy handler's sleeps, which
/// would cost milliseconds per contended write. Other processes still meet
/// at the file lock, bounded by `busy_timeout`.
struct Gate {
    taken: Mutex<bool>,
    freed: Condvar,
}

struct Turn<'a>(&'a Gate);

impl Gate {
    fn enter(&self, bound: Duration) -> Option<Turn<'_>> {
        let deadline = Instant::now() + bound;
        let mut taken = lock(&self.taken);
        while *taken {
            let left = deadline.checked_duration_since(Instant::now())?;
            taken = self
                .freed
                .wait_timeout(taken, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *taken = true;
        Some(Turn(self))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *lock(&self.0.taken) = false;
        self.0.freed.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Pool {
    path: PathBuf,
    busy: Duration,
    idle: Mutex<Vec<Connection>>,
    /// Bounds the connections open and the blocking threads in use.
    slots: Arc<Semaphore>,
    gate: Gate,
}

impl Pool {
    pub(crate) fn new(path: PathBuf, busy: Duration, size: usize) -> Pool {
        assert!(size >= 1, "a pool needs at least one connection");
        Pool {
            path,
            busy,
            idle: Mutex::new(Vec::with_capacity(size)),
            slots: Arc::new(Semaphore::new(size)),
            gate: Gate {
                taken: Mutex::new(false),
                freed: Condvar::new(),
            },
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens a connection with the PRAGMAs every connection needs: they are
    /// per connection, except journal_mode, which sticks to the file.
    fn connect(&self) -> Result<Connection, Abort> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(self.busy)?;
        // Switching a new file to WAL takes its exclusive lock, and SQLite
        // answers busy at once, without its busy handler, while another
        // process is migrating it: try again within the busy bound.
        let deadline = Instant::now() + self.busy;
        let mode: String = loop {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
                Err(e) if is_busy(&e) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                other => break other?,
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Abort::Store(StoreError::Unavailable(format!(
                "sqlite {}: journal_mode stayed {mode}; the store needs WAL",
                self.path.display()
            ))));
        }
        // NORMAL in WAL: a commit survives a crash of the process; only a
        // power loss may lose the last commits, never corrupt the file.
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
        conn.set_prepared_statement_cache_capacity(64);
        // The query planner's stability guarantee: a statement keeps the
        // plan it was prepared with. Without it SQLite prepares a statement
        // again whenever a bound value it weighed changes, and the probe
        // of a key's queued deliveries was prepared anew at every finish
        // (half of an ordered drain's time, measured).
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        Ok(conn)
    }

    /// Runs `f` on a pooled connection. A connection that failed for any
    /// reason but a busy lock is closed, not returned: the next call opens a
    /// fresh one, which is how the store recovers from a file that went
    /// away or a connection left in a bad state.
    fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T, Abort>) -> Result<T, StoreError> {
        let pooled = lock(&self.idle).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect().map_err(|e| store_error(&self.path, self.busy, e))?,
        };
        let result = f(&mut conn);
        let healthy = match &result {
            Err(Abort::Db(e)) => is_busy(e),
            _ => true,
        };
        if healthy && conn.is_autocommit() {
            lock(&self.idle).push(conn);
        }
        result.map_err(|e| store_error(&self.path, self.busy, e))
    }

    /// This process's turn to write, waited for no longer than the busy
    /// bound, as SQLite waits for another process's.
    fn turn(&self) -> Result<Turn<'_>, StoreError> {
        self.gate.enter(self.busy).ok_or_else(|| {
            StoreError::Unavailable(format!(
                "database is locked: {} had another write of this process under way past {} ms",
                self.path.display(),
                self.busy.as_millis()
            ))
        })
    }

    /// A place among the pool's connections, held until the blocking call
    /// that uses it ends.
    async fn slot(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.slots
            .clone()
            .acquire_owned()
            .await
            .expect("the pool is never closed")
    }

    /// A read: one statement, or a deferred transaction opened by `f`.
    pub(crate) async fn read<T, F>(self: &Arc<Self>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Abort> + Send + 'static,
    {
        let permit = self.slot().await;
        let pool = self.clone();
        blocking(move || {
            let _permit = permit;
            pool.with_conn(|c| f(c))
        })
        .await
    }

    /// A write: `f` in one `BEGIN IMMEDIATE` transaction, so it reads what
    /// it plans from with the write lock held and no other process can plan
    /// from the same rows. Redone from the start when a breaker write lost
    /// (`Abort::Conflict`), at most [`MAX_TRIES`] times.
    pub(crate) async fn write<T, F>(self: &Arc<Self>, mut f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>) -> Result<T, Abort> + Send + 'static,
    {
        let permit = self.slot().await;
        let pool = self.clone();
        blocking(move || {
            let _permit = permit;
            let _turn = pool.turn()?;
            pool.with_conn(|conn| {
                for _ in 0..MAX_TRIES {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    match f(&tx) {
                        Ok(v) => {
                            tx.commit()?;
                            return Ok(v);
                        }
                        // Dropping `tx` rolls it back.
                        Err(Abort::Conflict) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(Abort::Conflict)
            })
        })
        .await
    }

    /// The caller's own transaction, for the embedded API: `f` writes its
    /// rows and emits, and all of it commits or none.
    pub(crate) async fn transaction<T, E, F>(self: &Arc<Self>, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
    {
        let permit = self.slot().await;
        let pool = self.clone();
        let out = blocking(move || {
            let _permit = permit;
            let _turn = pool.turn()?;
            pool.with_conn(|conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                match f(&tx) {
                    Ok(v) => {
                        tx.commit()?;
                        Ok(Ok(v))
                    }
                    Err(e) => Ok(Err(e)),
                }
            })
        })
        .await;
        match out {
            Ok(inner) => inner,
            Err(e) => Err(E::from(e)),
        }
    }
}

/// Runs `f` on tokio's blocking pool. A panic in it is a defect and goes on
/// unwinding in the caller; it is not turned into a store fault.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(StoreError::Unavailable(format!(
            "the store's blocking task did not run: {e}"
        ))),
    }
}
