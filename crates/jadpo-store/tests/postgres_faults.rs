//! Store faults for real: a TCP proxy between the store and PostgreSQL is
//! cut (every connection dropped, new ones closed at once), stalled, or cut
//! just as a transaction's COMMIT goes out. The store answers
//! `Unavailable`, nothing is half-written, and once the proxy is back the
//! same store value works again, its listener included.

use jadpo_core::{DeliveryState, Outcome};
use jadpo_store::conformance::{at, routes, LEASE};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::{ClaimRequest, Finish, NewEvent, Store, StoreError};
use jadpo_testing::proxy::{Mode, Proxy};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

struct Setup {
    schema: Arc<TestSchema>,
    proxy: Proxy,
    store: PgStore,
}

async fn setup(op_timeout: Duration) -> Option<Setup> {
    let schema = TestSchema::create().await?;
    let upstream = {
        let c: tokio_postgres::Config = schema.url().parse().unwrap();
        let host = match &c.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            other => panic!("the fault tests need a TCP server, not {other:?}"),
        };
        format!("{host}:{}", c.get_ports().first().copied().unwrap_or(5432))
    };
    // Migrated directly first, under the default timeout: the tests'
    // short `op_timeout` is for the statements they fault, and a loaded
    // machine may take longer than that over every migration.
    drop(schema.store(Options::default()).await);
    let proxy = Proxy::start(upstream).await;
    let options = Options {
        op_timeout,
        connect_timeout: Duration::from_secs(2),
        pool_size: 4,
        ..Options::default()
    };
    let store = schema
        .store_at(&proxy.url_through(schema.url()), options)
        .await
        .unwrap();
    Some(Setup { schema, proxy, store })
}

fn events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{i}"),
            subscribers: vec!["log".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect()
}

fn is_unavailable<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
    match r {
        Err(StoreError::Unavailable(why)) => why,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Counts rows behind the proxy's back.
async fn count(schema: &TestSchema, sql: &str) -> i64 {
    schema.client().await.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_as_it_commits_writes_nothing_then_the_same_store_works_again() {
    let Some(Setup { schema, proxy, store }) = setup(Duration::from_secs(10)).await else {
        return;
    };
    let routes = routes();
    let req = |now| ClaimRequest {
        worker: "w",
        routes: &routes,
        now: at(now),
        limit: 100,
        lease: LEASE,
    };

    proxy.set(Mode::CutAtCommit);
    is_unavailable(store.emit(&events(100), at(0)).await);
    assert_eq!(count(&schema, "SELECT count(*) FROM jadpo_events").await, 0);
    proxy.set(Mode::Up);
    store.emit(&events(100), at(0)).await.unwrap();

    proxy.set(Mode::CutAtCommit);
    is_unavailable(store.claim(&req(1)).await);
    let untouched = "SELECT count(*) FROM jadpo_deliveries WHERE state = 'due' AND attempts = 0 AND lease_token = 0";
    assert_eq!(count(&schema, untouched).await, 100, "the claim left nothing behind");
    proxy.set(Mode::Up);
    let claimed = store.claim(&req(1)).await.unwrap().claimed;
    assert_eq!(claimed.len(), 100);

    let batch: Vec<Finish> = claimed
        .iter()
        .map(|c| c.finish(Outcome::Succeeded, at(1), at(2)))
        .collect();
    proxy.set(Mode::CutAtCommit);
    is_unavailable(store.finish_batch(&batch).await);
    assert_eq!(
        count(&schema, "SELECT count(*) FROM jadpo_deliveries WHERE state = 'running'").await,
        100
    );
    assert_eq!(count(&schema, "SELECT count(*) FROM jadpo_attempts").await, 0);
    assert_eq!(
        count(
            &schema,
            "SELECT count(*) FROM jadpo_deliveries WHERE handled_at IS NOT NULL OR success_started_at IS NOT NULL"
        )
        .await,
        0
    );
    proxy.set(Mode::Up);
    let results = store.finish_batch(&batch).await.unwrap();
    assert!(results.iter().all(|r| r.is_ok()));
    let d = store.delivery(claimed[0].delivery.id).await.unwrap().unwrap();
    assert_eq!(d.state, DeliveryState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_is_unavailable_at_once_for_every_method_and_back_when_it_returns() {
    let Some(Setup { proxy, store, .. }) = setup(Duration::from_secs(10)).await else {
        return;
    };
    let routes = routes();
    let req = ClaimRequest {
        worker: "w",
        routes: &routes,
        now: at(1),
        limit: 10,
        lease: LEASE,
    };
    store.emit(&events(5), at(0)).await.unwrap();
    proxy.set(Mode::Down);
    let started = Instant::now();
    let why = is_unavailable(store.claim(&req).await);
    eprintln!("claim with the server gone: {why}");
    is_unavailable(store.emit(&events(1), at(1)).await);
    is_unavailable(store.sweep(at(1), LEASE).await);
    is_unavailable(
        store
            .finish_batch(&[Finish {
                emits: Default::default(),
                id: jadpo_core::DeliveryId(1),
                token: jadpo_core::LeaseToken(1),
                outcome: Outcome::Succeeded,
                calls: vec![],
                probe_for: vec![],
                slots: Vec::new(),
                rate_limited: Vec::new(),
                started_at: at(1),
                ended_at: at(1),
                claimed: None,
            }])
            .await,
    );
    is_unavailable(store.delivery(jadpo_core::DeliveryId(1)).await);
    is_unavailable(store.migrate().await);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no hang: {:?}",
        started.elapsed()
    );
    proxy.set(Mode::Up);
    assert_eq!(store.claim(&req).await.unwrap().claimed.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_times_out_as_unavailable() {
    let Some(Setup { schema, proxy, store }) = setup(Duration::from_millis(800)).await else {
        return;
    };
    let routes = routes();
    let req = ClaimRequest {
        worker: "w",
        routes: &routes,
        now: at(1),
        limit: 10,
        lease: LEASE,
    };
    store.emit(&events(5), at(0)).await.unwrap();
    proxy.set(Mode::Stalled);
    let started = Instant::now();
    let why = is_unavailable(store.claim(&req).await);
    assert!(why.contains("did not answer"), "{why}");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    proxy.set(Mode::Up);
    // The stalled claim's connection was dropped; its transaction rolls back
    // when the server notices. The next claim gets all five once it has.
    let mut claimed = 0;
    for _ in 0..50 {
        claimed += store.claim(&req).await.unwrap().claimed.len();
        if claimed == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(claimed, 5);
    assert_eq!(
        count(&schema, "SELECT count(*) FROM jadpo_deliveries WHERE attempts = 1").await,
        5
    );
}

/// The listening connection is cut: the listener tries again with backoff
/// while the server is gone, and once it is back it listens again, wakes
/// the workers once (what was sent meanwhile is lost), and hears the next
/// notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_reconnects_after_a_cut_and_wakes_again() {
    let Some(Setup { schema, proxy, store }) = setup(Duration::from_secs(10)).await else {
        return;
    };
    // Emits beside the proxy, so they commit while it is down.
    let direct = schema.store(Options::default()).await;
    let within = Duration::from_secs(10);
    let wake = Arc::new(Notify::new());
    let listener = tokio::spawn({
        let (store, wake) = (store.clone(), wake.clone());
        async move { store.listen(wake).await }
    });
    tokio::time::timeout(within, wake.notified()).await.expect("listening");
    direct.emit(&events(1), at(0)).await.unwrap();
    tokio::time::timeout(within, wake.notified())
        .await
        .expect("an emit wakes it");

    proxy.set(Mode::Down);
    direct.emit(&events(1), at(1)).await.unwrap();
    let started = Instant::now();
    while proxy.refused() < 2 {
        assert!(started.elapsed() < within, "the listener tries to reconnect");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set(Mode::Up);
    tokio::time::timeout(within, wake.notified())
        .await
        .expect("a wake-up once it listens again: the emit made while it was cut was not heard");
    direct.emit(&events(1), at(2)).await.unwrap();
    tokio::time::timeout(within, wake.notified())
        .await
        .expect("and it hears the next emit");
    listener.abort();
}
