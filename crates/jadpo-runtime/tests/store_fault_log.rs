//! An emit the store refuses is logged with the store's own reason, once
//! per interval however many are refused. Alone in its binary: it reads
//! back a line whose callsite no other test reaches first with no
//! subscriber in place (docs/testing.md, "Log lines").

use jadpo_core::Timestamp;
use jadpo_runtime::logfmt::{Format, Lines};
use jadpo_runtime::{Catalog, Engine, FnExecutor, ManualClock, RunContext, WorkerConfig};
use jadpo_store::sqlite::SqliteStore;
use jadpo_store::{NewEvent, Store, StoreError};
use jadpo_testing::logs::LogBuffer;
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test]
async fn refused_emits_log_the_stores_reason_once_per_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jadpo.db");
    let store = SqliteStore::open(&format!("sqlite:{}", path.display())).await.unwrap();
    store.migrate().await.unwrap();
    let exec = FnExecutor(|_: RunContext| async { Ok(()) });
    let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
    let engine = Engine::new(
        Arc::new(store),
        Arc::new(exec),
        Arc::new(clock),
        Catalog::new(),
        WorkerConfig::default(),
    );
    // The file is no longer a database: every write fails, for a reason
    // only the store knows.
    for suffix in ["", "-wal", "-shm"] {
        let f = format!("{}{suffix}", path.display());
        if std::path::Path::new(&f).exists() {
            std::fs::write(&f, vec![b'x'; 8192]).unwrap();
        }
    }
    let logs = LogBuffer::default();
    let lines = Lines {
        format: Format::Json,
        out: Mutex::new(Box::new(logs.clone())),
    };
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(lines));
    let event = NewEvent {
        name: "E".into(),
        payload: r#"{"card": "4242-secret"}"#.into(),
        subscribers: vec!["sub".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    for _ in 0..50 {
        let e = engine.emit(std::slice::from_ref(&event)).await.unwrap_err();
        assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
    }
    let text = logs.text();
    let refused: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["event"] == "store.unavailable")
        .collect();
    assert_eq!(refused.len(), 1, "{text}");
    assert_eq!(refused[0]["work"], "emit");
    assert_eq!(refused[0]["suppressed"], 0);
    assert_eq!(refused[0]["level"], "warn");
    let error = refused[0]["error"].as_str().unwrap();
    assert!(error.contains("not a database"), "{error}");
    assert!(!text.contains("4242"), "no payload in the log: {text}");
}
