//! `Store::gauges`' reads as each database plans them: each subscriber's
//! oldest due delivery from the front of its part of
//! `jadpo_deliveries_due_subscriber`, and the held and waiting counts
//! through their partial indexes, never a walk of every due row. The SQL
//! is the stores' own, written out here as the other plan tests do.

use jadpo_store::conformance::emit;
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::Options;
use jadpo_store::sqlite::{rusqlite, SqliteStore};

const OLDEST_DUE: &str = "SELECT due_at FROM jadpo_deliveries \
    WHERE state = 'due' AND subscriber = 'pay' AND due_at <= 5000000 ORDER BY due_at LIMIT 1";

#[tokio::test]
async fn sqlite_reads_each_gauge_through_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let store = SqliteStore::open(&format!("sqlite:{}", path.display())).await.unwrap();
    emit(&store, "log", 2_000, 0).await;
    emit(&store, "pay", 5, 0).await;
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan = |sql: &str| jadpo_store::sqlite::testing::query_plan(&conn, sql);
    let oldest = plan(OLDEST_DUE);
    assert!(
        oldest.contains("jadpo_deliveries_due_subscriber") && !oldest.contains("TEMP B-TREE"),
        "{oldest}"
    );
    let held = plan(
        "SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries \
         WHERE state = 'held' AND held_connection = 'c' LIMIT 10)",
    );
    assert!(held.contains("jadpo_deliveries_held"), "{held}");
    let waiting = plan(
        "SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries \
         WHERE waiting_on IS NOT NULL AND waiting_on = 'c' AND state = 'due' LIMIT 10)",
    );
    assert!(waiting.contains("jadpo_deliveries_waiting"), "{waiting}");
}

#[tokio::test]
async fn postgres_reads_the_oldest_due_through_the_subscribers_index() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    emit(&store, "log", 5_000, 0).await;
    emit(&store, "pay", 5, 0).await;
    let conn = store.connection().await.unwrap();
    conn.batch_execute("ANALYZE jadpo_deliveries").await.unwrap();
    let rows = conn.query(&format!("EXPLAIN {OLDEST_DUE}"), &[]).await.unwrap();
    let plan: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let plan = plan.join("\n");
    assert!(plan.contains("jadpo_deliveries_due_subscriber"), "{plan}");
    assert!(!plan.contains("Sort"), "{plan}");
}
