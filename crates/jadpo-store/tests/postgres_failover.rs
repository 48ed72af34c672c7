//! A store whose server stops taking writes (a primary demoted, a DNS name
//! still pointing at it) moves to the writable one: the connection refused
//! with SQLSTATE 25006 is dropped, not reused forever, and a multi-host URL
//! with `target_session_attrs=read-write` reconnects to the other server.
//! Two PostgreSQL servers of the test's own; the first is made read-only
//! under the store's open connections.

use jadpo_core::Timestamp;
use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::{NewEvent, Store};
use jadpo_testing::pg_server::PgServer;

fn event(n: u32) -> NewEvent {
    NewEvent {
        name: "E".into(),
        payload: format!("{{\"n\":{n}}}"),
        subscribers: vec!["log".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    }
}

async fn events_on(url: &str) -> usize {
    let store = PgStore::connect(url, Options::default()).await.unwrap();
    let conn = store.connection().await.unwrap();
    let n: i64 = conn
        .query_one("SELECT count(*) FROM jadpo_events", &[])
        .await
        .unwrap()
        .get(0);
    n as usize
}

#[tokio::test]
async fn a_server_that_stops_taking_writes_is_left_for_the_writable_one() {
    let Some(first) = PgServer::start(&[], &[]) else {
        return;
    };
    let Some(second) = PgServer::start(&[], &[]) else {
        return;
    };
    // The second is ready to take over: migrated.
    PgStore::connect(&second.url(""), Options::default()).await.unwrap();
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        first.port(),
        second.port()
    );
    let options = Options {
        pool_size: 2,
        ..Options::default()
    };
    let store = PgStore::connect(&both, options).await.unwrap();
    store.emit(&[event(1)], Timestamp::from_millis(1_000)).await.unwrap();
    assert_eq!(events_on(&first.url("")).await, 1, "the first server took it");

    // The first stops taking writes; the store's pooled connections to it
    // stay open.
    let admin = PgStore::connect(&first.url(""), Options::default()).await.unwrap();
    let conn = admin.connection().await.unwrap();
    conn.batch_execute("ALTER SYSTEM SET default_transaction_read_only = on")
        .await
        .unwrap();
    conn.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    drop(conn);
    drop(admin);
    jadpo_testing::wait::until_async("the first server to refuse writes", || async {
        let store = PgStore::lazy(&first.url(""), Options::default()).unwrap();
        let conn = store.connection().await.unwrap();
        let row = conn.query_one("SHOW default_transaction_read_only", &[]).await.unwrap();
        row.get::<_, String>(0) == "on"
    })
    .await;

    store
        .emit(&[event(2)], Timestamp::from_millis(2_000))
        .await
        .expect("the emit moves to the writable server");
    assert_eq!(events_on(&second.url("")).await, 1, "the second server took it");
}
