//! A fresh SQLite store per test (feature `testing`): a new file in a
//! folder the test names, never one an earlier run left behind.

use super::SqliteStore;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A path for a new database file in `dir` (created if missing), unique to
/// this process and call; any file of that name from an earlier process
/// with the same id is removed, with its `-wal` and `-shm`.
pub fn fresh_path(dir: &Path) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let name = format!("{}-{}.db", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

/// A migrated store on a new file in `dir`; panics if that fails.
pub async fn fresh_store(dir: &Path) -> SqliteStore {
    let path = fresh_path(dir);
    SqliteStore::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap_or_else(|e| panic!("open a fresh SQLite store at {}: {e}", path.display()))
}

/// How SQLite plans `sql` on `conn`: the details of `EXPLAIN QUERY PLAN`,
/// joined by `; `, for tests that a read goes through the index meant.
pub fn query_plan(conn: &rusqlite::Connection, sql: &str) -> String {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect::<Vec<_>>()
        .join("; ")
}
