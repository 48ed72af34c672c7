//! The conformance suites (deliveries and schedules) against the SQLite
//! store: a fresh file per test.

use jadpo_store::sqlite::SqliteStore;
use std::path::PathBuf;

async fn fresh() -> SqliteStore {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance_sqlite");
    jadpo_store::sqlite::testing::fresh_store(&dir).await
}

jadpo_store::conformance_tests!(async { fresh().await });
jadpo_store::schedule_conformance_tests!(async { fresh().await });
