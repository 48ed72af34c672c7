//! What the embedded crate's tests share: the app most of them run (an
//! order's event, scored by a Rust action that uses a connection), a store
//! in a temporary folder, and a builder with the connection's environment.
//! Each test binary uses some of it.
#![allow(dead_code)]

use jadpo::store::sqlite::SqliteStore;

/// `OrderPlaced`, scored by the Rust action `score`, which may call
/// `fulfilment` (whose URL comes from the environment).
pub(crate) const APP: &str = r#"
event OrderPlaced { order_id: string  total_cents: int }
connection fulfilment { base_url: env("FULFILMENT_URL") }
action score(order_id: string, total_cents: int) uses fulfilment
subscriber fraud_check { on: OrderPlaced  run: score(event.order_id, event.total_cents) }
"#;

/// A fresh SQLite store in `dir`.
pub(crate) async fn store(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display()))
        .await
        .unwrap()
}

/// [`APP`] with `FULFILMENT_URL` set (to a port nothing answers on).
pub(crate) fn builder() -> jadpo::Builder {
    jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .env(|k| (k == "FULFILMENT_URL").then(|| "http://127.0.0.1:9".to_string()))
}
