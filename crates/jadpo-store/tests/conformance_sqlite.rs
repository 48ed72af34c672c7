//! The conformance suites (deliveries and schedules) against the SQLite
//! store: a fresh file per test.

use jadpo_store::sqlite::SqliteStore;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

async fn fresh() -> SqliteStore {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance_sqlite");
    let name = format!("{}-{}.db", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    SqliteStore::open(&format!("sqlite:{}", path.display()))
        .await
        .expect("open a fresh SQLite store")
}

jadpo_store::conformance_tests!(async { fresh().await });
jadpo_store::schedule_conformance_tests!(async { fresh().await });
