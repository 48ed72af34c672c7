//! The SQLite store beyond the conformance suite: URLs, migrations, the
//! caller's transaction, faults of a real file, and a restart.

use jadpo_core::{DeliveryState, FailureRecord, Outcome};
use jadpo_store::conformance::{at, claim, claim_as, emit, finish, LEASE};
use jadpo_store::sqlite::{self, emit_in, rusqlite, SqliteOptions, SqliteStore, SCHEMA_VERSION};
use jadpo_store::upgrade::Refusal;
use jadpo_store::{DeliveryFilter, NewEvent, Store, StoreError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A fresh folder for one test, under cargo's temporary folder.
fn fresh_dir(test: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "sqlite_store-{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn url(path: &Path) -> String {
    format!("sqlite:{}", path.display())
}

fn unavailable(r: Result<impl std::fmt::Debug, StoreError>) -> String {
    match r {
        Err(StoreError::Unavailable(why)) => why,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

fn event(subscriber: &str) -> NewEvent {
    NewEvent {
        name: "E".into(),
        payload: "{}".into(),
        subscribers: vec![subscriber.into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    }
}

#[test]
fn urls_name_a_file() {
    assert_eq!(sqlite::parse_url("sqlite:a/b.db").unwrap(), PathBuf::from("a/b.db"));
    assert_eq!(
        sqlite::parse_url("sqlite:/abs/b.db").unwrap(),
        PathBuf::from("/abs/b.db")
    );
    assert_eq!(
        sqlite::parse_url("sqlite:///abs/b.db").unwrap(),
        PathBuf::from("/abs/b.db")
    );
    for (bad, says) in [
        ("sqlite:", "no path"),
        ("sqlite://", "no path"),
        ("sqlite::memory:", "not durable"),
        ("postgres://localhost/x", "sqlite:PATH"),
        ("jadpo.db", "sqlite:PATH"),
    ] {
        let why = match sqlite::parse_url(bad) {
            Err(StoreError::InvalidUrl(why)) => why,
            other => panic!("{bad}: expected InvalidUrl, got {other:?}"),
        };
        assert!(why.contains(says) && why.contains(bad), "{bad}: {why}");
    }
}

#[tokio::test]
async fn open_creates_the_folder_and_refuses_what_cannot_be_a_database() {
    let dir = fresh_dir("open");
    let nested = dir.join(".jadpo/sub/jadpo.db");
    let s = SqliteStore::open(&url(&nested)).await.unwrap();
    assert!(nested.exists());
    assert_eq!(s.path(), nested);

    let why = unavailable(SqliteStore::open(&url(&dir)).await);
    assert!(
        why.contains("is a folder") && why.contains(&dir.display().to_string()),
        "{why}"
    );

    // A "folder" that is a file cannot hold the database.
    let file = dir.join("plain");
    std::fs::write(&file, "x").unwrap();
    let why = unavailable(SqliteStore::open(&url(&file.join("x.db"))).await);
    assert!(why.contains("is a file, not a folder"), "{why}");

    // A folder nobody may write, root included.
    let why = unavailable(SqliteStore::open("sqlite:/proc/jadpo-test.db").await);
    assert!(why.contains("/proc/jadpo-test.db"), "{why}");

    // A file that is not a database.
    let junk = dir.join("junk.db");
    std::fs::write(&junk, vec![b'j'; 4096]).unwrap();
    let why = unavailable(SqliteStore::open(&url(&junk)).await);
    assert!(why.contains("not a database"), "{why}");
}

#[tokio::test]
async fn migrations_run_once_even_from_two_stores_at_once() {
    let path = fresh_dir("migrate").join("m.db");
    let u = url(&path);
    let (a, b) = tokio::join!(SqliteStore::open(&u), SqliteStore::open(&u));
    let (a, b) = (a.unwrap(), b.unwrap());
    a.migrate().await.unwrap();
    b.migrate().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM jadpo_migrations ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");

    // A file from a newer jadpo that records no oldest reader is assumed
    // to have removed what this build uses: refused, not downgraded.
    conn.execute(
        "INSERT INTO jadpo_migrations (version, applied_at) VALUES (?1, 0)",
        [SCHEMA_VERSION + 1],
    )
    .unwrap();
    let latest = SCHEMA_VERSION as i32;
    let newer = Refusal::SchemaNewer {
        store: latest + 1,
        needs: latest + 1,
        build: latest,
    };
    assert_eq!(a.migrate().await, Err(StoreError::Schema(newer)));
}

/// The oldest reader each migration row records.
fn oldest_readers(path: &Path) -> Vec<(i32, Option<i32>)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT version, oldest_reader FROM jadpo_migrations ORDER BY version")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn add_migration(path: &Path, version: i64, oldest_reader: i64) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute(
            "INSERT INTO jadpo_migrations (version, applied_at, oldest_reader) VALUES (?1, 0, ?2)",
            [version, oldest_reader],
        )
        .unwrap();
}

/// A newer build's expand leaves this build running; its contract stops
/// it, at start and while it runs, with both versions.
#[tokio::test]
async fn a_newer_schema_runs_until_a_contract_passes_this_build() {
    let path = fresh_dir("newer").join("n.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let latest = SCHEMA_VERSION as i32;
    assert_eq!(
        oldest_readers(&path).last(),
        Some(&(latest, Some(8))),
        "each row records its oldest reader"
    );

    add_migration(&path, SCHEMA_VERSION + 1, SCHEMA_VERSION);
    let again = SqliteStore::open(&url(&path)).await.unwrap();
    assert_eq!(store.check_schema().await, Ok(()));
    emit(&again, "log", 1, 0).await;
    assert_eq!(claim(&again, 0, 10).await.claimed.len(), 1, "it still claims");
    assert_eq!(
        oldest_readers(&path).len(),
        SCHEMA_VERSION as usize + 1,
        "and applied nothing"
    );

    add_migration(&path, SCHEMA_VERSION + 2, SCHEMA_VERSION + 2);
    let newer = Refusal::SchemaNewer {
        store: latest + 2,
        needs: latest + 2,
        build: latest,
    };
    assert_eq!(store.check_schema().await, Err(StoreError::Schema(newer.clone())));
    let refused = SqliteStore::open(&url(&path)).await.map(drop);
    assert_eq!(refused, Err(StoreError::Schema(newer)));
}

/// A file four migrations old: migration 5 drops a table builds before it
/// write, so opening refuses it and applies nothing; `--force` applies it.
#[tokio::test]
async fn a_pending_contract_waits_for_force() {
    let path = fresh_dir("contract").join("c.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE jadpo_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)")
            .unwrap();
        for m in &sqlite::MIGRATIONS[..4] {
            conn.execute_batch(m.sql).unwrap();
            conn.execute("INSERT INTO jadpo_migrations VALUES (?1, 0)", [m.version])
                .unwrap();
        }
    }
    let pending = Refusal::ContractPending {
        version: 5,
        oldest_reader: 5,
        running: 0,
    };
    let refused = SqliteStore::open(&url(&path)).await.map(drop);
    assert_eq!(refused, Err(StoreError::Schema(pending)));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let applied: i64 = conn
        .query_row("SELECT count(*) FROM jadpo_migrations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(applied, 4, "nothing applied");
    assert!(StoreError::Schema(Refusal::ContractPending {
        version: 5,
        oldest_reader: 5,
        running: 0
    })
    .to_string()
    .contains("jadpo migrate --force"));

    let forced = SqliteStore::open_migrating(&url(&path), SqliteOptions::default(), true).await;
    forced.unwrap();
    assert_eq!(oldest_readers(&path).len(), SCHEMA_VERSION as usize);
    SqliteStore::open(&url(&path)).await.unwrap();
}

#[tokio::test]
async fn the_claim_reads_the_partial_due_index() {
    let path = fresh_dir("plan").join("p.db");
    SqliteStore::open(&url(&path)).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let plan = |sql: &str| jadpo_store::sqlite::testing::query_plan(&conn, sql);
    let due = plan(
        "SELECT d.id FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id \
         WHERE d.state = 'due' AND d.due_at <= 5 ORDER BY d.due_at, d.id LIMIT 10",
    );
    assert!(
        due.contains("jadpo_deliveries_due") && !due.contains("TEMP B-TREE"),
        "{due}"
    );
    let lost = plan(
        "SELECT id FROM jadpo_deliveries WHERE state = 'running' AND lease_until <= 5 \
         ORDER BY lease_until, id LIMIT 10",
    );
    assert!(lost.contains("jadpo_deliveries_lost"), "{lost}");
    let old = plan(
        "SELECT id FROM jadpo_deliveries WHERE state IN ('succeeded', 'failed', 'parked') \
         AND finished_at < 5 ORDER BY finished_at LIMIT 10",
    );
    assert!(old.contains("jadpo_deliveries_finished"), "{old}");
    // `deliveries --key`: the key's entries, newest first, without a sort.
    let by_key = plan(
        "SELECT d.id FROM jadpo_deliveries d WHERE 1 = 1 AND d.delivery_key = 'c-42' \
         ORDER BY d.id DESC LIMIT 10",
    );
    assert!(
        by_key.contains("jadpo_deliveries_key") && !by_key.contains("TEMP B-TREE"),
        "{by_key}"
    );
}

#[tokio::test]
async fn emit_in_the_callers_transaction_exists_only_if_it_commits() {
    let path = fresh_dir("emit_in").join("app.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();

    // The application's own table, in the same file.
    let mut app = rusqlite::Connection::open(&path).unwrap();
    app.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INT)")
        .unwrap();
    let tx = app.transaction().unwrap();
    tx.execute("INSERT INTO orders (total) VALUES (10)", []).unwrap();
    let kept = emit_in(&tx, &[event("log"), event("log")], at(1)).unwrap();
    tx.commit().unwrap();
    let tx = app.transaction().unwrap();
    tx.execute("INSERT INTO orders (total) VALUES (20)", []).unwrap();
    let lost = emit_in(&tx, &[event("log")], at(2)).unwrap();
    tx.rollback().unwrap();

    assert_eq!(kept.len(), 2);
    for e in &kept {
        assert!(store.event(e.event_id).await.unwrap().is_some());
    }
    assert!(store.event(lost[0].event_id).await.unwrap().is_none());
    assert!(store.delivery(lost[0].deliveries[0]).await.unwrap().is_none());
    let orders: i64 = app.query_row("SELECT COUNT(*) FROM orders", [], |r| r.get(0)).unwrap();
    assert_eq!(orders, 1);

    // The same through the store's own connection.
    let committed = store
        .transaction(|tx| {
            tx.execute("INSERT INTO orders (total) VALUES (30)", [])
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            emit_in(tx, &[event("log")], at(3))
        })
        .await
        .unwrap();
    let refused: Result<(), StoreError> = store
        .transaction(|tx| {
            emit_in(tx, &[event("log")], at(4))?;
            Err(StoreError::Unavailable("the caller changed its mind".into()))
        })
        .await;
    assert!(refused.is_err());
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.len(), 3, "two from the first commit, one from the store's");
    assert_eq!(all[0].event_id, committed[0].event_id);
}

#[test]
#[should_panic(expected = "inside the caller's transaction")]
fn emit_in_refuses_a_connection_outside_a_transaction() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    let _ = emit_in(&conn, &[event("log")], at(0));
}

#[tokio::test]
async fn emit_writes_a_batch_in_one_transaction() {
    let path = fresh_dir("batch").join("b.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let events: Vec<NewEvent> = (0..5_000)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: vec!["log".into(), "pay".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    let emitted = store.emit(&events, at(0)).await.unwrap();
    assert_eq!(emitted.len(), 5_000);
    let ids: Vec<_> = emitted.iter().flat_map(|e| e.deliveries.clone()).collect();
    assert_eq!(ids.len(), 10_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let e = store.event(emitted[4_999].event_id).await.unwrap().unwrap();
    assert_eq!(e.payload, "{\"n\":4999}");
}

/// Another connection holds the write lock past the busy bound: the call
/// fails as unavailable with nothing written, and works once it is released.
#[tokio::test]
async fn a_lock_held_past_the_busy_bound_is_unavailable_then_recovers() {
    let path = fresh_dir("busy").join("busy.db");
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(200),
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&url(&path), options).await.unwrap();
    let ids = emit(&store, "log", 3, 0).await;

    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let req_routes = jadpo_store::conformance::routes();
    let req = jadpo_store::ClaimRequest {
        worker: "w1",
        routes: &req_routes,
        now: at(0),
        limit: 10,
        lease: LEASE,
    };
    let why = unavailable(store.claim(&req).await);
    assert!(why.contains("database is locked"), "{why}");
    let why = unavailable(store.emit(&[event("log")], at(0)).await);
    assert!(why.contains("database is locked"), "{why}");
    other.execute_batch("ROLLBACK").unwrap();

    for id in &ids {
        let d = store.delivery(*id).await.unwrap().unwrap();
        assert_eq!((d.state, d.attempts), (DeliveryState::Due, 0), "nothing changed");
    }
    assert_eq!(store.list(&DeliveryFilter::default()).await.unwrap().len(), 3);
    assert_eq!(
        claim(&store, 0, 10).await.claimed.len(),
        3,
        "the same store works again"
    );
}

/// Undoes `chattr +i` even when the test fails, so the folder can be removed.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    fn set(paths: &[PathBuf]) -> Option<Immutable> {
        for p in paths {
            let ok = std::process::Command::new("chattr")
                .arg("+i")
                .arg(p)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                drop(Immutable(paths.to_vec()));
                return None;
            }
        }
        Some(Immutable(paths.to_vec()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::process::Command::new("chattr").arg("-i").arg(p).status();
        }
    }
}

/// The file stops taking writes under an open store (made immutable, which
/// refuses writes on open descriptors too, root's included): a write is
/// unavailable and changes nothing; once the file takes writes again, the
/// same store works.
#[tokio::test]
async fn a_file_that_refuses_writes_is_unavailable_then_recovers() {
    let path = fresh_dir("immutable").join("i.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let ids = emit(&store, "log", 2, 0).await;
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    let Some(guard) = Immutable::set(&[path.clone(), wal]) else {
        jadpo_testing::skip::missing(
            "chattr +i (root on a file system with immutable files)",
            "chattr +i failed here, so a file that refuses writes cannot be made",
            "Run the tests as root on ext4, xfs or btrfs",
        );
        return;
    };
    let why = unavailable(store.emit(&[event("log")], at(1)).await);
    assert!(why.contains(&path.display().to_string()), "{why}");
    let routes = jadpo_store::conformance::routes();
    let req = jadpo_store::ClaimRequest {
        worker: "w1",
        routes: &routes,
        now: at(1),
        limit: 10,
        lease: LEASE,
    };
    unavailable(store.claim(&req).await);
    drop(guard);

    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.len(), 2, "the refused emit wrote nothing");
    assert!(all.iter().all(|d| d.state == DeliveryState::Due && d.attempts == 0));
    assert_eq!(claim(&store, 2, 10).await.claimed.len(), 2);
    let _ = ids;
}

/// A worker's process dies after its claim committed; a new process opens
/// the same file, sees the delivery running, and reclaims it once the lease
/// has ended, marking it `lease_expired`.
#[tokio::test]
async fn a_claim_survives_the_process_and_is_reclaimed_after_its_lease() {
    let path = fresh_dir("crash").join("crash.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let ids = emit(&store, "log", 1, 0).await;
    let first = claim_as(&store, "doomed", 0, 1).await.claimed.remove(0);
    drop(store);

    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let d = store.delivery(ids[0]).await.unwrap().unwrap();
    assert_eq!(d.state, DeliveryState::Running);
    assert_eq!(d.lease.as_ref().unwrap().owner, "doomed");
    assert!(claim(&store, 59, 1).await.claimed.is_empty(), "the lease still holds");
    let r = claim_as(&store, "heir", 60, 1).await;
    assert_eq!(r.lease_expired, ids);
    let second = &r.claimed[0];
    assert_eq!(second.delivery.last_failure, Some(FailureRecord::lease_expired()));
    assert_eq!(second.delivery.attempts, 2);
    assert!(second.token().0 > first.token().0, "tokens never repeat for a row");
    assert_eq!(
        finish(&store, &first, Outcome::Succeeded, &[], 61).await,
        Err(StoreError::LeaseLost(ids[0]))
    );
    finish(&store, second, Outcome::Succeeded, &[], 61).await.unwrap();
    assert_eq!(
        store.delivery(ids[0]).await.unwrap().unwrap().state,
        DeliveryState::Succeeded
    );
}

/// Migration 4 rebuilds the deliveries table: a file that had rows keeps
/// every one as it was, and an id pruned from the top is not issued again.
/// Migration 5 moves each handled record onto its delivery: one whose run
/// committed before the upgrade is still not run again.
#[tokio::test]
async fn the_deliveries_rebuild_keeps_every_row_and_never_reuses_an_id() {
    let path = fresh_dir("rebuild").join("r.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let ids = emit(&store, "log", 3, 0).await;
    let running = claim(&store, 0, 1).await.claimed.remove(0);
    let before = store.delivery(ids[1]).await.unwrap().unwrap();
    drop(store);
    // The newest delivery pruned, the file taken back to migration 3 with a
    // handled record for the second delivery, then migrated again.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "DELETE FROM jadpo_deliveries WHERE id = {};
         DELETE FROM jadpo_migrations WHERE version >= 4;
         ALTER TABLE jadpo_deliveries DROP COLUMN skipped_by;
         ALTER TABLE jadpo_deliveries DROP COLUMN skipped_at;
         ALTER TABLE jadpo_deliveries DROP COLUMN handled_at;
         DROP INDEX jadpo_events_idempotency;
         ALTER TABLE jadpo_events DROP COLUMN idempotency_key;
         DROP INDEX jadpo_events_public_id;
         ALTER TABLE jadpo_events DROP COLUMN public_id;
         DROP TABLE jadpo_minutes;
         DROP TABLE jadpo_connection_limits;
         DROP INDEX jadpo_deliveries_failed;
         DROP INDEX jadpo_deliveries_parked;
         DROP INDEX jadpo_deliveries_waiting;
         ALTER TABLE jadpo_deliveries DROP COLUMN waiting_on;
         ALTER TABLE jadpo_deliveries DROP COLUMN waiting_for;
         ALTER TABLE jadpo_deliveries DROP COLUMN success_started_at;
         ALTER TABLE jadpo_events DROP COLUMN depth;
         ALTER TABLE jadpo_events DROP COLUMN traceparent;
         ALTER TABLE jadpo_events DROP COLUMN tracestate;
         DROP INDEX jadpo_deliveries_queued;
         DROP TABLE jadpo_keys;
         ALTER TABLE jadpo_deliveries DROP COLUMN key_rule;
         DROP INDEX jadpo_deliveries_key;
         ALTER TABLE jadpo_deliveries DROP COLUMN delivery_key;
         DROP TABLE jadpo_clock;
         DROP TABLE jadpo_console_sessions;
         CREATE TABLE jadpo_handled (subscriber TEXT NOT NULL, event_id BIGINT NOT NULL,
             handled_at BIGINT NOT NULL, PRIMARY KEY (subscriber, event_id)) WITHOUT ROWID;
         INSERT INTO jadpo_handled SELECT subscriber, event_id, 0 FROM jadpo_deliveries WHERE id = {};",
        ids[2].0, ids[1].0
    ))
    .unwrap();

    // Migration 5 is a contract: what `jadpo migrate --force` applies.
    let store = SqliteStore::open_migrating(&url(&path), SqliteOptions::default(), true)
        .await
        .unwrap();
    assert_eq!(store.delivery(ids[1]).await.unwrap().unwrap(), before);
    assert_eq!(store.delivery(ids[0]).await.unwrap().unwrap(), running.delivery);
    assert!(store.delivery(ids[2]).await.unwrap().is_none());
    let next = emit(&store, "log", 1, 1).await;
    assert!(next[0] > ids[2], "{next:?} after {ids:?}");
    finish(&store, &running, Outcome::Succeeded, &[], 1).await.unwrap();
    let bad = conn.execute("UPDATE jadpo_deliveries SET state = 'lost' WHERE id = ?1", [ids[1].0]);
    assert!(bad.is_err(), "the state is still checked");
    let r = claim(&store, 2, 10).await;
    assert_eq!(r.succeeded, vec![ids[1]], "handled before the upgrade");
    assert_eq!(r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(), next);
}

/// The row updates of a claim and a finish set `state`. Any IN list in a
/// CHECK or a partial index's condition on the deliveries would make SQLite
/// build a temporary b-tree for each such update (several times slower), so
/// none may come back.
#[tokio::test]
async fn a_state_update_builds_no_temporary_btree() {
    let path = fresh_dir("ephemeral").join("e.db");
    SqliteStore::open(&url(&path)).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let ops: Vec<String> = conn
        .prepare("EXPLAIN UPDATE jadpo_deliveries SET state = ?1, finished_at = ?2 WHERE id = ?3")
        .unwrap()
        .query_map(
            [rusqlite::types::Null, rusqlite::types::Null, rusqlite::types::Null],
            |r| r.get::<_, String>(1),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(ops.iter().any(|op| op == "IdxInsert"), "{ops:?}");
    assert!(!ops.iter().any(|op| op == "OpenEphemeral"), "{ops:?}");
}

/// The size a soak reports: the tables' rows, the file and its WAL, and the
/// pages a prune freed, which new rows then reuse rather than grow the file.
#[tokio::test]
async fn the_footprint_counts_rows_and_the_pages_a_prune_frees() {
    let dir = fresh_dir("footprint");
    let store = SqliteStore::open(&url(&dir.join("j.db"))).await.unwrap();
    let ids = emit(&store, "log", 2_000, 0).await;
    let fp = store.footprint().await.unwrap();
    let deliveries = fp.table("jadpo_deliveries").unwrap();
    assert_eq!(deliveries.live_rows, 2_000);
    assert_eq!(deliveries.dead_rows, None);
    assert_eq!(fp.table("jadpo_events").unwrap().live_rows, 2_000);
    assert!(fp.file_bytes.unwrap() > 0 || fp.wal_bytes.unwrap() > 0, "{fp:?}");
    assert!(fp.tables.iter().all(|t| t.name.starts_with("jadpo_")), "{fp:?}");
    for batch in ids.chunks(500) {
        let r = claim(&store, 1, batch.len()).await;
        for c in &r.claimed {
            finish(&store, c, Outcome::Succeeded, &[], 2).await.unwrap();
        }
    }
    assert_eq!(store.prune(at(100), 1_000).await.unwrap(), 1_000);
    assert_eq!(store.prune(at(100), 1_000).await.unwrap(), 1_000);
    let conn = rusqlite::Connection::open(dir.join("j.db")).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let fp = store.footprint().await.unwrap();
    assert_eq!(fp.table("jadpo_deliveries").unwrap().live_rows, 0);
    assert!(fp.free_bytes.unwrap() > 0, "pruned pages are on the freelist: {fp:?}");
}

/// A key's row stays once no slot is taken (its next delivery would write
/// it again), until retention deletes it.
#[tokio::test]
async fn retention_forgets_keys_with_no_slot_taken() {
    use jadpo_core::key::{Key, KeyValue, Keyed};
    use jadpo_core::key_rule::KeyRule;
    let path = fresh_dir("forget").join("k.db");
    let store = SqliteStore::open(&url(&path)).await.unwrap();
    let keyed = |k: &str| NewEvent {
        name: "E".into(),
        payload: "{}".into(),
        subscribers: vec!["log".into()],
        idempotency_key: None,
        trace: None,
        keys: [(
            "log".to_string(),
            Keyed {
                key: Key::new(KeyValue::Str(k)).unwrap(),
                rule: Some(KeyRule::Fifo),
            },
        )]
        .into(),
    };
    store.emit(&[keyed("a"), keyed("b")], at(0)).await.unwrap();
    let r = claim(&store, 0, 10).await;
    finish(&store, &r.claimed[0], Outcome::Succeeded, &[], 1).await.unwrap();
    let keys = |p: &Path| {
        let c = rusqlite::Connection::open(p).unwrap();
        c.query_row(
            "SELECT group_concat(delivery_key || '=' || taken) FROM jadpo_keys",
            [],
            |r| r.get::<_, Option<String>>(0),
        )
        .unwrap()
    };
    assert_eq!(keys(&path).as_deref(), Some("a=0,b=1"), "a's row stays at zero");
    store.prune(at(100), 10).await.unwrap();
    assert_eq!(keys(&path).as_deref(), Some("b=1"), "b still holds its slot");
}
