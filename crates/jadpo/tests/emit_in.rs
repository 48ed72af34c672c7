//! `Jadpo::emit_in` on each driver's own transaction, against a real SQLite
//! file and the real PostgreSQL: the event exists if and only if the
//! caller's transaction commits (a rollback, or an error of the caller's
//! after the emit, leaves nothing), an idempotency key holds inside the
//! transaction and across it, and a commit wakes the idle workers with no
//! call from the caller: their poll is an hour, so only the wake-up can
//! deliver within the test's wait.

use jadpo::store::DeliveryFilter;
use jadpo::{EmitOptions, Jadpo};
use jadpo_core::DeliveryState;
use jadpo_store::ScheduleStore;
use std::time::Duration;

const APP: &str = r#"
event OrderPlaced { order_id: string  total_cents: int }
action record(order_id: string) uses nothing_at_all
connection nothing_at_all { base_url: "http://127.0.0.1:9" }
subscriber recorder { on: OrderPlaced  run: record(event.order_id) }
"#;

#[derive(serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    total_cents: i64,
}

impl jadpo::Event for OrderPlaced {
    const NAME: &'static str = "OrderPlaced";
}

#[derive(serde::Deserialize)]
struct Record {
    #[allow(dead_code)]
    order_id: String,
}

fn order(id: &str) -> serde_json::Value {
    serde_json::json!({"order_id": id, "total_cents": 4200})
}

/// Jadpo on `store`, its action succeeding at once, its workers polling
/// once an hour: a delivery runs soon only if something wakes them.
async fn jadpo<S: ScheduleStore>(store: S) -> Jadpo<S> {
    jadpo::builder()
        .app_source("app.jadpo", APP)
        .unwrap()
        .typed_action("record", |_: Record, _| std::future::ready(Ok(())))
        .worker(jadpo::runtime::WorkerConfig {
            poll: Duration::from_secs(3600),
            ..Default::default()
        })
        .build(store)
        .await
        .unwrap()
}

/// Waits until every delivery in the store has succeeded, and returns
/// how many there are.
async fn all_delivered<S: ScheduleStore>(jadpo: &Jadpo<S>) -> usize {
    let store = jadpo.store().clone();
    jadpo_testing::wait::eventually("every delivery succeeds", async || {
        let all = store.list(&DeliveryFilter::default()).await.unwrap();
        all.iter()
            .all(|d| d.state == DeliveryState::Succeeded)
            .then_some(all.len())
    })
    .await
}

/// Starts the engine and waits until its worker has gone idle (its first
/// claim found nothing): from then on only a wake-up makes it claim. The
/// test runs on one thread, where the returned guard keeps its log.
async fn start_idle<S: ScheduleStore>(
    jadpo: &Jadpo<S>,
) -> (jadpo::runtime::Running, tracing::subscriber::DefaultGuard) {
    let logs = jadpo_testing::logs::LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(logs.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let running = jadpo.start();
    jadpo_testing::wait::until_async("the worker goes idle", || {
        let text = logs.text();
        async move { text.contains("worker.idle") }
    })
    .await;
    (running, guard)
}

async fn events<S: ScheduleStore>(jadpo: &Jadpo<S>) -> usize {
    jadpo.store().list(&DeliveryFilter::default()).await.unwrap().len()
}

#[tokio::test]
async fn a_rusqlite_transaction_delivers_if_and_only_if_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    let jadpo = jadpo(store).await;
    let (running, _logs) = start_idle(&jadpo).await;
    // Your own connection to the same file, with a table of your own.
    let mut db = rusqlite::Connection::open(&path).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    db.execute_batch("CREATE TABLE orders (id TEXT PRIMARY KEY)").unwrap();

    // Rolled back: dropped without a commit.
    {
        let mut tx = db.transaction().unwrap();
        tx.execute("INSERT INTO orders VALUES ('o-1')", []).unwrap();
        jadpo.emit_in(&mut tx, "OrderPlaced", &order("o-1")).unwrap();
    }
    // An error of the caller's after the emit: the caller rolls back.
    {
        let mut tx = db.transaction().unwrap();
        tx.execute("INSERT INTO orders VALUES ('o-2')", []).unwrap();
        jadpo.emit_in(&mut tx, "OrderPlaced", &order("o-2")).unwrap();
        tx.execute("INSERT INTO orders VALUES ('o-2')", []).unwrap_err();
        tx.rollback().unwrap();
    }
    assert_eq!(events(&jadpo).await, 0, "nothing of a transaction that did not commit");

    // Committed, the second emit under the same key a duplicate of the first.
    let keyed = EmitOptions::default().idempotency_key("order-3");
    let mut tx = db.transaction().unwrap();
    tx.execute("INSERT INTO orders VALUES ('o-3')", []).unwrap();
    let first = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
        .unwrap();
    let again = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
        .unwrap();
    assert!(!first.duplicate && again.duplicate, "{first:?} {again:?}");
    assert_eq!(again.public_id, first.public_id);
    let typed = OrderPlaced {
        order_id: "o-5".into(),
        total_cents: 10,
    };
    jadpo.emit_event_in(&mut tx, &typed).unwrap();
    tx.commit().unwrap();
    let mut tx = db.transaction().unwrap();
    let later = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
        .unwrap();
    assert!(later.duplicate, "a key committed before holds too");
    let other = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-4"), &keyed)
        .unwrap_err();
    assert_eq!(other.code(), "event.idempotency_conflict");
    tx.commit().unwrap();

    // A payload that does not fit is refused before anything is written.
    let mut tx = db.transaction().unwrap();
    let e = jadpo
        .emit_in(&mut tx, "OrderPlaced", &serde_json::json!({"order_id": 5}))
        .unwrap_err();
    assert_eq!(e.code(), "event.invalid");
    drop(tx);

    assert_eq!(
        all_delivered(&jadpo).await,
        2,
        "the committed ones, each delivered once"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_tokio_postgres_transaction_delivers_if_and_only_if_it_commits() {
    let Some(schema) = jadpo_store::postgres::testing::TestSchema::create().await else {
        return;
    };
    let store = schema.store(Default::default()).await;
    let jadpo = jadpo(store).await;
    let (running, _logs) = start_idle(&jadpo).await;
    let (mut db, connection) = tokio_postgres::connect(schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    db.batch_execute(&format!(
        "SET search_path TO {}; CREATE TABLE orders (id TEXT PRIMARY KEY)",
        schema.name()
    ))
    .await
    .unwrap();

    {
        let mut tx = db.transaction().await.unwrap();
        tx.execute("INSERT INTO orders VALUES ('o-1')", &[]).await.unwrap();
        jadpo.emit_in(&mut tx, "OrderPlaced", &order("o-1")).await.unwrap();
        tx.rollback().await.unwrap();
    }
    {
        let mut tx = db.transaction().await.unwrap();
        tx.execute("INSERT INTO orders VALUES ('o-2')", &[]).await.unwrap();
        jadpo.emit_in(&mut tx, "OrderPlaced", &order("o-2")).await.unwrap();
        // The caller's own write fails: the transaction is aborted, and
        // dropping it rolls it back.
        tx.execute("INSERT INTO orders VALUES ('o-2')", &[]).await.unwrap_err();
    }
    assert_eq!(events(&jadpo).await, 0, "nothing of a transaction that did not commit");

    let keyed = EmitOptions::default().idempotency_key("order-3");
    let mut tx = db.transaction().await.unwrap();
    tx.execute("INSERT INTO orders VALUES ('o-3')", &[]).await.unwrap();
    let first = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
        .await
        .unwrap();
    let again = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
        .await
        .unwrap();
    assert!(!first.duplicate && again.duplicate, "{first:?} {again:?}");
    tx.commit().await.unwrap();
    let mut tx = db.transaction().await.unwrap();
    let later = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
        .await
        .unwrap();
    assert!(later.duplicate, "a key committed before holds too");
    let other = jadpo
        .emit_in_with(&mut tx, "OrderPlaced", &order("o-4"), &keyed)
        .await
        .unwrap_err();
    assert_eq!(other.code(), "event.idempotency_conflict");
    tx.commit().await.unwrap();

    assert_eq!(all_delivered(&jadpo).await, 1, "the committed one, delivered once");
    running.stop().await;
}

/// The scenario of the tests above on a `sqlx` pool of the store's
/// database with a table `orders`: a rollback and an error after the emit
/// leave nothing; a key twice in one transaction and again after it is
/// one event; another payload under it is refused; a typed event; a bad
/// payload refused before anything is written. Two committed events, each
/// delivered once with no call to wake the workers.
macro_rules! sqlx_delivers_if_and_only_if_it_commits {
    ($jadpo:expr, $pool:expr) => {{
        let (jadpo, pool) = (&$jadpo, &$pool);
        {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("INSERT INTO orders VALUES ('o-1')").execute(&mut *tx).await.unwrap();
            jadpo.emit_in(&mut tx, "OrderPlaced", &order("o-1")).await.unwrap();
            tx.rollback().await.unwrap();
        }
        {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("INSERT INTO orders VALUES ('o-2')").execute(&mut *tx).await.unwrap();
            jadpo.emit_in(&mut tx, "OrderPlaced", &order("o-2")).await.unwrap();
            // The caller's own write fails, and dropping the transaction
            // rolls it back.
            sqlx::query("INSERT INTO orders VALUES ('o-2')")
                .execute(&mut *tx)
                .await
                .unwrap_err();
        }
        assert_eq!(events(jadpo).await, 0, "nothing of a transaction that did not commit");

        let keyed = EmitOptions::default().idempotency_key("order-3");
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO orders VALUES ('o-3')").execute(&mut *tx).await.unwrap();
        let first = jadpo
            .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
            .await
            .unwrap();
        let again = jadpo
            .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
            .await
            .unwrap();
        assert!(!first.duplicate && again.duplicate, "{first:?} {again:?}");
        assert_eq!(again.public_id, first.public_id);
        let typed = OrderPlaced {
            order_id: "o-5".into(),
            total_cents: 10,
        };
        jadpo.emit_event_in(&mut tx, &typed).await.unwrap();
        tx.commit().await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let later = jadpo
            .emit_in_with(&mut tx, "OrderPlaced", &order("o-3"), &keyed)
            .await
            .unwrap();
        assert!(later.duplicate, "a key committed before holds too");
        let other = jadpo
            .emit_in_with(&mut tx, "OrderPlaced", &order("o-4"), &keyed)
            .await
            .unwrap_err();
        assert_eq!(other.code(), "event.idempotency_conflict");
        let e = jadpo
            .emit_in(&mut tx, "OrderPlaced", &serde_json::json!({"order_id": 5}))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "event.invalid");
        tx.commit().await.unwrap();

        assert_eq!(all_delivered(jadpo).await, 2, "the committed ones, each delivered once");
    }};
}

#[tokio::test]
async fn an_sqlx_sqlite_transaction_delivers_if_and_only_if_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    let jadpo = jadpo(store).await;
    let (running, _logs) = start_idle(&jadpo).await;
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .busy_timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx_delivers_if_and_only_if_it_commits!(jadpo, pool);
    running.stop().await;
}

/// The `sqlx` pool of a test schema's database, its connections on the
/// schema.
async fn sqlx_pool(schema: &jadpo_store::postgres::testing::TestSchema) -> sqlx::PgPool {
    let options: sqlx::postgres::PgConnectOptions = schema.url().parse().unwrap();
    sqlx::postgres::PgPoolOptions::new()
        .connect_with(options.options([("search_path", schema.name())]))
        .await
        .unwrap()
}

#[tokio::test]
async fn an_sqlx_postgres_transaction_delivers_if_and_only_if_it_commits() {
    let Some(schema) = jadpo_store::postgres::testing::TestSchema::create().await else {
        return;
    };
    let store = schema.store(Default::default()).await;
    let jadpo = jadpo(store).await;
    let (running, _logs) = start_idle(&jadpo).await;
    let pool = sqlx_pool(&schema).await;
    sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx_delivers_if_and_only_if_it_commits!(jadpo, pool);
    running.stop().await;
}

/// Two `sqlx` transactions emit one new idempotency key at once: the
/// second waits for the first and, once it commits, gets its event as a
/// duplicate in a transaction that goes on and commits its own write.
#[tokio::test]
async fn sqlx_postgres_transactions_racing_on_one_key_make_one_event() {
    let Some(schema) = jadpo_store::postgres::testing::TestSchema::create().await else {
        return;
    };
    let store = schema.store(Default::default()).await;
    let jadpo = jadpo(store).await;
    let pool = sqlx_pool(&schema).await;
    sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    let keyed = EmitOptions::default().idempotency_key("order-1");
    let mut first = pool.begin().await.unwrap();
    let won = jadpo
        .emit_in_with(&mut first, "OrderPlaced", &order("o-1"), &keyed)
        .await
        .unwrap();
    let racer = tokio::spawn({
        let (jadpo, pool, keyed) = (jadpo.clone(), pool.clone(), keyed.clone());
        async move {
            let mut second = pool.begin().await.unwrap();
            let got = jadpo
                .emit_in_with(&mut second, "OrderPlaced", &order("o-1"), &keyed)
                .await;
            sqlx::query("INSERT INTO orders VALUES ('o-2')")
                .execute(&mut *second)
                .await
                .unwrap();
            second.commit().await.unwrap();
            got
        }
    });
    jadpo_testing::wait::eventually("the second waits on the first's key", async || {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND a.query LIKE '%jadpo_events%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        (waiting > 0).then_some(())
    })
    .await;
    first.commit().await.unwrap();
    let got = racer.await.unwrap().unwrap();
    assert!(got.duplicate, "{got:?}");
    assert_eq!((got.event_id, &got.deliveries), (won.event_id, &won.deliveries));
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(orders, 1, "the second transaction committed its own write");
    assert_eq!(events(&jadpo).await, 1, "one event, one delivery");
}
