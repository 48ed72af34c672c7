//! The warning a PostgreSQL store gives at start on a server without
//! autovacuum, read from the store's own log lines.
//!
//! Alone in its test binary on purpose: `tracing` caches whether anyone
//! listens at a log line once per process, from the thread that reaches it
//! first. Beside other tests that open stores (each reaching this warning
//! with no subscriber), the cache could say "no one" before this test's
//! subscriber is in place, and the warning would never reach it: the test
//! failed so once in a full run.

use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::Options;
use jadpo_testing::logs::LogBuffer;

/// Without the server's autovacuum nothing reclaims the row versions each
/// delivery leaves: a store opening on such a server says so once, as a
/// warning (however often it migrates), and its footprint says which the server runs. (This machine's
/// server runs without it; one with it on takes the other branch.)
#[tokio::test]
async fn a_server_without_autovacuum_is_said_at_start() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let on: bool = schema
        .client()
        .await
        .query_one("SELECT current_setting('autovacuum')::bool", &[])
        .await
        .unwrap()
        .get(0);
    let logs = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(logs.clone())
        .finish();
    let store = {
        let _logging = tracing::subscriber::set_default(subscriber);
        let store = schema.store(Options::default()).await;
        // An engine built on the store migrates it again: said once.
        store.migrate_with(false).await.unwrap();
        store
    };
    let text = logs.text();
    let said = text.matches("store.autovacuum_off").count();
    assert_eq!(said, usize::from(!on), "autovacuum {on}: {text}");
    assert_eq!(store.footprint().await.unwrap().autovacuum, Some(on));
}
