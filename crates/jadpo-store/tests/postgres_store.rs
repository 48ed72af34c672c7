//! What the PostgreSQL store adds to the conformance suite: URLs, racing
//! migrations, emit inside the caller's transaction, and two processes
//! (two pools) racing on one lease or one breaker.

use jadpo_core::breaker::{BreakerState, CallVerdict};
use jadpo_core::{DeliveryState, FailureKind, FailureRecord, Outcome};
use jadpo_store::conformance::{at, emit, open_breaker, routes, LEASE};
use jadpo_store::postgres::schema::LATEST;
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{emit_in, Options, PgStore};
use jadpo_store::upgrade::Refusal;
use jadpo_store::{ClaimReport, ClaimRequest, DeliveryFilter, Finish, NewEvent, Store, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Barrier;

/// Whether a race test goes on for another round: always for its first
/// `least` rounds, then until `raced` (the interleaving it is about was
/// seen at least once). A barrier lines the two sides up, but only the
/// scheduler and the server decide who is first; on a loaded machine the
/// test runs longer, and fails only if the race never happens in `most`.
fn another_round(round: usize, least: usize, most: usize, raced: bool, what: &str) -> bool {
    if round < least {
        return true;
    }
    if raced {
        return false;
    }
    assert!(round < most, "{what} never happened in {most} rounds");
    true
}

fn unavailable(r: Result<PgStore, StoreError>) -> String {
    match r {
        Err(StoreError::Unavailable(why)) => why,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// A malformed URL is a configuration mistake, not a fault to retry.
fn invalid_url(r: Result<PgStore, StoreError>) -> String {
    match r {
        Err(StoreError::InvalidUrl(why)) => why,
        other => panic!("expected InvalidUrl, got {other:?}"),
    }
}

async fn claim(s: &PgStore, worker: &str, now: i64, limit: usize) -> ClaimReport {
    let routes = routes();
    let req = ClaimRequest {
        worker,
        routes: &routes,
        now: at(now),
        limit,
        lease: LEASE,
    };
    s.claim(&req).await.unwrap()
}

fn finish_of(c: &jadpo_store::Claimed, outcome: Outcome, now: i64) -> Finish {
    c.finish(outcome, at(now), at(now))
}

#[tokio::test]
async fn bad_urls_are_invalid_and_unreachable_servers_unavailable_with_the_reason() {
    let why = invalid_url(PgStore::open("mysql://root@localhost/db").await);
    assert!(why.contains("not a PostgreSQL URL"), "{why}");
    let why = invalid_url(PgStore::open("postgres://postgres@127.0.0.1:notaport/test").await);
    assert!(why.contains("bad PostgreSQL URL"), "{why}");
    let why = unavailable(
        PgStore::lazy(
            "postgres://x@y/z",
            Options {
                schema: Some("no; DROP".into()),
                ..Options::default()
            },
        )
        .map(|_| unreachable!()),
    );
    assert!(why.contains("schema name"), "{why}");
    // Nothing listens on port 1: refused at once, well within the timeout.
    let started = Instant::now();
    let options = Options {
        connect_timeout: Duration::from_secs(2),
        ..Options::default()
    };
    let why = unavailable(PgStore::connect("postgresql://postgres@127.0.0.1:1/test", options).await);
    assert!(why.contains("connection") || why.contains("refused"), "{why}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// A URL that does not parse is shown redacted, with the driver's reason
/// when that reason cannot quote the password.
#[test]
fn a_bad_url_never_shows_its_password() {
    let bad = |url: &str| invalid_url(PgStore::lazy(url, Options::default()));
    for (url, shown, said) in [
        (
            "postgres://u:hunter2@127.0.0.1:notaport/db",
            "postgres://u:***@127.0.0.1:notaport/db",
            "invalid value for option `port`",
        ),
        (
            "postgres://u@127.0.0.1:5432/db?sslmode=bogus&password=hunter2",
            "postgres://u@127.0.0.1:5432/db?sslmode=bogus&password=***",
            "sslmode=\"bogus\": one of disable, allow, prefer, require, verify-ca, verify-full",
        ),
        (
            "postgresql://u:hun/ter?2@h:x/db?PASSWORD=hunter2",
            "postgresql://u:***@h:x/db?PASSWORD=***",
            "invalid value for option `port`",
        ),
        // An unknown option's name is quoted, and here that name is part
        // of the password (a raw `@` and `?` in it): the driver's words
        // are left out.
        (
            "postgres://u:x@y?hunter2=1@h/db",
            "postgres://u:***@h/db",
            "percent-encode",
        ),
        ("mysql://u:hunter2@h/db", "mysql://u:***@h/db", "not a PostgreSQL URL"),
    ] {
        let why = bad(url);
        assert!(!why.contains("hunter2"), "{url}: {why}");
        assert!(why.contains(&format!("{shown:?}")), "{url}: {why}");
        assert!(why.contains(said), "{url}: {why}");
    }
    // Without a password, the driver's reason as it is.
    let why = bad("postgres://u@h/db?nonsense=1");
    assert!(why.contains("unknown option `nonsense`"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_migrating_at_once_apply_each_migration_once() {
    for _ in 0..5 {
        let Some(schema) = TestSchema::create().await else {
            return;
        };
        let (a, b) = tokio::join!(schema.store(Options::default()), schema.store(Options::default()));
        // And again, on a store already migrated: nothing to do.
        let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
        ra.unwrap();
        rb.unwrap();
        let client = schema.client().await;
        let rows = client
            .query("SELECT version FROM jadpo_migrations ORDER BY version", &[])
            .await
            .unwrap();
        let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(
            versions,
            (1..=jadpo_store::postgres::schema::LATEST).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn a_store_newer_than_this_build_is_refused() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let _store = schema.store(Options::default()).await;
    let client = schema.client().await;
    client
        .execute("INSERT INTO jadpo_migrations VALUES (9999, 0)", &[])
        .await
        .unwrap();
    // It records no oldest reader: assumed to remove what this build uses.
    let newer = Refusal::SchemaNewer {
        store: 9999,
        needs: 9999,
        build: LATEST,
    };
    let refused = schema.store_at(schema.url(), Options::default()).await.map(drop);
    assert_eq!(refused, Err(StoreError::Schema(newer)));
}

/// A newer build's expand leaves this build running; its contract stops
/// it, at start and while it runs, with both versions.
#[tokio::test]
async fn a_newer_schema_runs_until_a_contract_passes_this_build() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let client = schema.client().await;
    let last: (i32, Option<i32>) = client
        .query_one(
            "SELECT version, oldest_reader FROM jadpo_migrations ORDER BY version DESC LIMIT 1",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(last, (LATEST, Some(5)), "each row records its oldest reader");
    let unready = async |store: &PgStore| store.schema_standing().await.unwrap().unready().map(|(code, _)| code);
    assert_eq!(unready(&store).await, None, "ready at this build's schema");

    // As a backup from before the last migration: behind this build.
    let add = "INSERT INTO jadpo_migrations (version, applied_at, oldest_reader) VALUES ($1, 0, $2)";
    client
        .execute("DELETE FROM jadpo_migrations WHERE version = $1", &[&LATEST])
        .await
        .unwrap();
    assert_eq!(unready(&store).await, Some("store.schema_older"));
    client.execute(add, &[&LATEST, &5]).await.unwrap();

    client.execute(add, &[&(LATEST + 1), &LATEST]).await.unwrap();
    let again = schema.store(Options::default()).await;
    assert_eq!(store.check_schema().await, Ok(()));
    assert_eq!(unready(&store).await, None, "ahead through an expand: a rolling deploy");
    emit(&again, "log", 1, 0).await;
    assert_eq!(claim(&again, "w", 0, 10).await.claimed.len(), 1, "it still claims");

    client.execute(add, &[&(LATEST + 2), &(LATEST + 2)]).await.unwrap();
    let newer = Refusal::SchemaNewer {
        store: LATEST + 2,
        needs: LATEST + 2,
        build: LATEST,
    };
    assert_eq!(store.check_schema().await, Err(StoreError::Schema(newer.clone())));
    assert_eq!(unready(&store).await, Some("store.schema_newer"));
    let refused = schema.store_at(schema.url(), Options::default()).await.map(drop);
    assert_eq!(refused, Err(StoreError::Schema(newer)));
}

/// A store three migrations old: migration 4 drops a table builds before
/// it write, so opening refuses it and applies nothing; force applies it.
#[tokio::test]
async fn a_pending_contract_waits_for_force() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let client = schema.client().await;
    migrated_to(&client, 3).await;
    let pending = Refusal::ContractPending {
        version: 4,
        oldest_reader: 4,
        running: 0,
    };
    let refused = schema.store_at(schema.url(), Options::default()).await.map(drop);
    assert_eq!(refused, Err(StoreError::Schema(pending)));
    let applied: i64 = client
        .query_one("SELECT count(*) FROM jadpo_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied, 3, "nothing applied");

    schema.unmigrated(Options::default()).migrate_with(true).await.unwrap();
    schema.store(Options::default()).await;
}

#[tokio::test]
async fn emit_in_the_callers_transaction_exists_only_if_it_commits() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let mut conn = store.connection().await.unwrap();
    conn.batch_execute("CREATE TABLE app_orders (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let events = |n: usize| -> Vec<NewEvent> {
        (0..n)
            .map(|i| NewEvent {
                name: "OrderPlaced".into(),
                payload: format!("{{\"order\":{i}}}"),
                subscribers: vec!["log".into(), "pay".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect()
    };

    let tx = conn.transaction().await.unwrap();
    tx.execute("INSERT INTO app_orders VALUES (1)", &[]).await.unwrap();
    let rolled_back = emit_in(&tx, &events(3), at(0)).await.unwrap();
    tx.rollback().await.unwrap();
    for e in &rolled_back {
        assert_eq!(store.event(e.event_id).await.unwrap(), None);
        for id in &e.deliveries {
            assert_eq!(store.delivery(*id).await.unwrap(), None);
        }
    }
    assert!(claim(&store, "w", 0, 100).await.claimed.is_empty());

    let tx = conn.transaction().await.unwrap();
    tx.execute("INSERT INTO app_orders VALUES (2)", &[]).await.unwrap();
    let committed = emit_in(&tx, &events(3), at(0)).await.unwrap();
    tx.commit().await.unwrap();
    let orders: i64 = conn
        .query_one("SELECT count(*) FROM app_orders", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(orders, 1, "only the committed order");
    assert_eq!(committed.len(), 3);
    for e in &committed {
        assert_eq!(e.deliveries.len(), 2);
        assert!(store.event(e.event_id).await.unwrap().is_some());
    }
    assert_eq!(claim(&store, "w", 0, 100).await.claimed.len(), 6);
}

#[tokio::test]
async fn a_large_emit_keeps_emit_order_across_statements() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    // 12,000 events of two deliveries: three statements' worth.
    let events: Vec<NewEvent> = (0..12_000)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{i}"),
            subscribers: vec!["log".into(), "log2".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    let emitted = store.emit(&events, at(0)).await.unwrap();
    let ids: Vec<i64> = emitted.iter().flat_map(|e| e.deliveries.iter().map(|d| d.0)).collect();
    assert_eq!(ids.len(), 24_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase in emit order");
    let last = store.event(emitted[11_999].event_id).await.unwrap().unwrap();
    assert_eq!(last.payload, "11999");
}

/// A worker paused past its lease finishes at the very moment another
/// worker's claim takes the delivery over, on two pools: exactly one of
/// them wins, and the record shows that one's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_finish_racing_a_takeover_lets_exactly_one_win() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let a = schema.store(Options::default()).await;
    let b = schema.store(Options::default()).await;
    let failed = Outcome::Failed(FailureRecord::new("crm.rejected", FailureKind::Rejected));
    let (mut late_won, mut takeover_won) = (0, 0);
    let mut round = 0;
    while another_round(round, 40, 400, late_won > 0 && takeover_won > 0, "each side winning") {
        let t = round as i64 * 1000;
        round += 1;
        let ids = emit(&a, "log", 1, t).await;
        let first = claim(&a, "late", t, 1).await.claimed.remove(0);
        let barrier = Arc::new(Barrier::new(2));
        let (finished, taken) = tokio::join!(
            async {
                barrier.wait().await;
                a.finish(&finish_of(&first, Outcome::Succeeded, t + 61)).await
            },
            async {
                barrier.wait().await;
                claim(&b, "new", t + 61, 1).await
            }
        );
        let d = a.delivery(ids[0]).await.unwrap().unwrap();
        match finished {
            Ok(_) => {
                late_won += 1;
                assert!(taken.claimed.is_empty(), "round {round}: both won");
                assert_eq!(d.state, DeliveryState::Succeeded);
            }
            Err(StoreError::LeaseLost(id)) => {
                takeover_won += 1;
                assert_eq!(id, ids[0]);
                let second = &taken.claimed[0];
                assert_eq!(second.delivery.attempts, 2);
                assert_ne!(second.token(), first.token());
                b.finish(&finish_of(second, failed.clone(), t + 62)).await.unwrap();
                let d = a.delivery(ids[0]).await.unwrap().unwrap();
                assert_eq!(d.state, DeliveryState::Failed, "the newer run's outcome");
                assert_eq!(d.last_failure, failed.failure().cloned());
            }
            Err(e) => panic!("round {round}: {e}"),
        }
    }
    eprintln!("late finish won {late_won}, takeover won {takeover_won}");
    assert_eq!(late_won + takeover_won, round);
}

/// Two processes claim right after the pause: one probe between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_claiming_after_the_pause_send_one_probe() {
    let mut redone = 0;
    let mut round = 0;
    while another_round(round, 15, 200, redone > 0, "a claim redone after losing the probe race") {
        round += 1;
        let Some(schema) = TestSchema::create().await else {
            return;
        };
        let a = schema.store(Options::default()).await;
        let b = schema.store(Options::default()).await;
        open_breaker(&a, 0).await;
        emit(&a, "pay", 10, 1).await;
        let barrier = Arc::new(Barrier::new(2));
        let (ra, rb) = tokio::join!(
            async {
                barrier.wait().await;
                claim(&a, "a", 61, 4).await
            },
            async {
                barrier.wait().await;
                claim(&b, "b", 61, 4).await
            }
        );
        let probes: Vec<_> = ra.claimed.iter().chain(&rb.claimed).collect();
        assert_eq!(probes.len(), 1, "round {round}: {ra:?} {rb:?}");
        assert_eq!(probes[0].probe_for, vec!["payments".to_string()]);
        assert_eq!(ra.held.len() + rb.held.len(), 7);
        let view = a.breakers().await.unwrap().remove(0);
        redone += a.redone() + b.redone();
        assert_eq!(view.breaker.state, BreakerState::Probing);
        assert_eq!(view.breaker.probe.unwrap().delivery, probes[0].delivery.id);
    }
    eprintln!("claims redone after losing the probe race: {redone} of {round} rounds");
}

/// Two processes sweeping at once raise one alert, and wake one probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_sweeping_at_once_raise_one_alert_and_wake_one_probe() {
    let mut redone = 0;
    let mut round = 0;
    while another_round(round, 15, 200, redone > 0, "a sweep redone after losing the race") {
        round += 1;
        let Some(schema) = TestSchema::create().await else {
            return;
        };
        let a = schema.store(Options::default()).await;
        let b = schema.store(Options::default()).await;
        open_breaker(&a, 0).await;
        emit(&a, "pay", 4, 0).await;
        assert_eq!(claim(&a, "a", 0, 10).await.held.len(), 4);
        for (now, what) in [(1, "alert"), (60, "wake")] {
            let barrier = Arc::new(Barrier::new(2));
            let (ra, rb) = tokio::join!(
                async {
                    barrier.wait().await;
                    a.sweep(at(now), LEASE).await.unwrap()
                },
                async {
                    barrier.wait().await;
                    b.sweep(at(now), LEASE).await.unwrap()
                }
            );
            match what {
                "alert" => assert_eq!(ra.alerts.len() + rb.alerts.len(), 1, "round {round}"),
                _ => assert_eq!(ra.woken.len() + rb.woken.len(), 1, "round {round}"),
            }
        }
        let client = schema.client().await;
        let alerts: i64 = client
            .query_one("SELECT count(*) FROM jadpo_alerts", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(alerts, 1);
        redone += a.redone() + b.redone();
        let due = a
            .list(&DeliveryFilter {
                state: Some(DeliveryState::Due),
                subscriber: Some("pay".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        // The five that opened it are due again at 30 s; one held woke.
        assert_eq!(due.len(), 6);
    }
    eprintln!("sweeps redone after losing the race: {redone} of {} races", 2 * round);
}

/// Two processes record an unavailable call on the same closed breaker at
/// once: both counts land (a lost update would leave one), because the
/// second write finds the version moved and redoes its finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_finishes_on_one_breaker_both_count() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let a = schema.store(Options::default()).await;
    let b = schema.store(Options::default()).await;
    let gone = Outcome::Failed(FailureRecord::new("http.503", FailureKind::Rejected));
    let mut redone = 0;
    let mut round = 0;
    while another_round(round, 20, 400, redone > 0, "a finish redone after losing the race") {
        let t = round as i64 * 10;
        round += 1;
        emit(&a, "pay", 3, t).await;
        let r = claim(&a, "w", t, 3).await;
        assert_eq!(r.claimed.len(), 3, "round {round}");
        let unavailable = |c, s: &PgStore| {
            let mut f = finish_of(c, gone.clone(), t + 1);
            f.calls = vec![("payments".to_string(), CallVerdict::Unavailable)];
            let s = s.clone();
            async move { s.finish(&f).await }
        };
        let barrier = Arc::new(Barrier::new(2));
        let (fa, fb) = tokio::join!(
            async {
                barrier.wait().await;
                unavailable(&r.claimed[0], &a).await
            },
            async {
                barrier.wait().await;
                unavailable(&r.claimed[1], &b).await
            }
        );
        fa.unwrap();
        fb.unwrap();
        // Both stores live across rounds and their counts only grow.
        redone = a.redone() + b.redone();
        let after = a.breakers().await.unwrap().remove(0).breaker;
        assert_eq!(after.consecutive_unavailable, 2, "round {round}: both counted");
        let mut f = finish_of(&r.claimed[2], Outcome::Succeeded, t + 2);
        f.calls = vec![("payments".to_string(), CallVerdict::Answered)];
        a.finish(&f).await.unwrap();
        assert_eq!(a.breakers().await.unwrap()[0].breaker.consecutive_unavailable, 0);
    }
    eprintln!("finishes redone after losing the race: {redone} in {round} rounds");
}

#[tokio::test]
async fn prune_deletes_the_events_left_without_deliveries() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let ids = emit(&store, "log", 3, 0).await;
    let r = claim(&store, "w", 0, 3).await;
    for c in &r.claimed {
        store.finish(&finish_of(c, Outcome::Succeeded, 1)).await.unwrap();
    }
    let event = store.delivery(ids[0]).await.unwrap().unwrap().event_id;
    assert_eq!(store.prune(at(100), 10).await.unwrap(), 3);
    assert_eq!(store.event(event).await.unwrap(), None);
    let client = schema.client().await;
    for table in ["jadpo_events", "jadpo_deliveries", "jadpo_attempts"] {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{table}");
    }
}

/// Two processes prune the two deliveries of one event at once. Here the
/// first is a transaction of our own that did what a prune does (deleted
/// its delivery, locked the event, kept it because the other delivery was
/// still there) and has not committed; the store's prune takes the second
/// delivery, waits for the event's lock, and, once the first commits,
/// sees both deliveries gone and deletes the event. Without the lock each
/// would keep the event for the other, and it would stay for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_pruning_one_events_deliveries_leave_no_event_behind() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let two = NewEvent {
        name: "E".into(),
        payload: "{}".into(),
        subscribers: vec!["log".into(), "pay".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    let emitted = store.emit(&[two], at(0)).await.unwrap().remove(0);
    let r = claim(&store, "w", 0, 2).await;
    assert_eq!(r.claimed.len(), 2);
    for c in &r.claimed {
        store.finish(&finish_of(c, Outcome::Succeeded, 1)).await.unwrap();
    }
    let [first, second] = emitted.deliveries[..] else {
        panic!("two deliveries: {emitted:?}")
    };
    let mut other = schema.client().await;
    let tx = other.transaction().await.unwrap();
    let other_pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    tx.execute("DELETE FROM jadpo_deliveries WHERE id = $1", &[&first.0])
        .await
        .unwrap();
    tx.execute(
        "SELECT id FROM jadpo_events WHERE id = $1 FOR UPDATE",
        &[&emitted.event_id.0],
    )
    .await
    .unwrap();
    let pruning = {
        let store = store.clone();
        tokio::spawn(async move { store.prune(at(100), 1).await })
    };
    let pruned = commit_once_blocked(
        &schema,
        tx,
        other_pid,
        pruning,
        "the prune never waited for the other's lock on the event",
    )
    .await
    .unwrap();
    assert_eq!(pruned, 1, "the prune took the other delivery");
    assert_eq!(store.delivery(second).await.unwrap(), None);
    assert_eq!(
        store.event(emitted.event_id).await.unwrap(),
        None,
        "the event is left without deliveries"
    );
}

/// The size a soak reports: the store's own tables (not another schema's)
/// with their rows, dead rows and bytes, and the server's WAL position,
/// which moves as the store writes.
#[tokio::test]
async fn the_footprint_reads_the_stores_tables_and_the_wal_position() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let before = store.footprint().await.unwrap();
    emit(&store, "log", 500, 0).await;
    schema.client().await.batch_execute("ANALYZE").await.unwrap();
    let fp = store.footprint().await.unwrap();
    let deliveries = fp.table("jadpo_deliveries").unwrap();
    assert_eq!(deliveries.live_rows, 500);
    assert!(deliveries.dead_rows.is_some() && deliveries.vacuums.is_some(), "{fp:?}");
    assert!(deliveries.bytes.unwrap() > 8_192, "{fp:?}");
    assert!(fp.table("jadpo_events").is_some() && fp.table("jadpo_migrations").is_some());
    assert!(fp.tables.iter().all(|t| t.name.starts_with("jadpo_")), "{fp:?}");
    assert!(fp.table_bytes().unwrap() > deliveries.bytes.unwrap());
    assert!(fp.wal_position.unwrap() > before.wal_position.unwrap(), "{fp:?}");
    assert_eq!((fp.file_bytes, fp.wal_bytes, fp.free_bytes), (None, None, None));
}

/// Four processes prune one backlog at once: each finished delivery is
/// deleted by exactly one of them (their counts add up), none waits on
/// another's rows, and no event is left behind, though each event's two
/// deliveries may go in different processes' batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_processes_pruning_at_once_delete_each_delivery_once() {
    const EVENTS: usize = 2_000;
    const BATCH: usize = 100;
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(schema.store(Options::default()).await);
    }
    let events: Vec<NewEvent> = (0..EVENTS)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: vec!["log".into(), "pay".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    stores[0].emit(&events, at(0)).await.unwrap();
    loop {
        let r = claim(&stores[0], "w", 0, 1_000).await;
        if r.claimed.is_empty() {
            break;
        }
        let ends: Vec<Finish> = r.claimed.iter().map(|c| finish_of(c, Outcome::Succeeded, 1)).collect();
        assert!(stores[0].finish_batch(&ends).await.unwrap().iter().all(Result::is_ok));
    }
    let tasks: Vec<_> = stores
        .iter()
        .map(|store| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut pruned = 0;
                loop {
                    let n = store.prune(at(100), BATCH).await.unwrap();
                    pruned += n;
                    if n < BATCH {
                        return pruned;
                    }
                }
            })
        })
        .collect();
    let mut counts = Vec::new();
    for t in tasks {
        counts.push(t.await.unwrap());
    }
    assert_eq!(counts.iter().sum::<usize>(), 2 * EVENTS, "{counts:?}");
    let client = schema.client().await;
    for table in ["jadpo_events", "jadpo_deliveries", "jadpo_attempts"] {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{table} after {counts:?}");
    }
}

/// Two processes' ticks claim the same due schedule at once: one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_claiming_one_schedule_start_one_run() {
    use jadpo_store::ScheduleStore;
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let a = schema.store(Options::default()).await;
    let b = schema.store(Options::default()).await;
    let all = [("nightly".to_string(), at(0)), ("hourly".to_string(), at(0))];
    for round in 0..20 {
        let now = round * 100;
        let barrier = Arc::new(Barrier::new(2));
        let (ra, rb) = tokio::join!(
            async {
                barrier.wait().await;
                a.claim_schedules(&all, "a", at(now), LEASE).await.unwrap()
            },
            async {
                barrier.wait().await;
                b.claim_schedules(&all, "b", at(now), LEASE).await.unwrap()
            }
        );
        let mut names: Vec<&str> = ra.iter().chain(&rb).map(|c| c.state.name.as_str()).collect();
        names.sort_unstable();
        // A claim that found a row locked by the other skipped it; the
        // other claimed it. Each schedule runs once per round.
        assert_eq!(names, ["hourly", "nightly"], "round {round}");
        for c in ra.iter().chain(&rb) {
            let token = c.state.lease.as_ref().unwrap().token;
            let s = if ra.contains(c) { &a } else { &b };
            s.finish_schedule(&c.state.name, token, None, at(now + 100), at(now))
                .await
                .unwrap();
        }
    }
}

/// The claim sends its plan settings and its query in one round trip,
/// relying on the driver sending requests in the order `try_join!` first
/// polls them. Checked here, on the driver the store uses.
#[tokio::test]
async fn settings_pipelined_before_a_query_apply_to_it() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let mut conn = store.connection().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    let stmt = tx
        .prepare_cached("SELECT current_setting('enable_sort')")
        .await
        .unwrap();
    for _ in 0..20 {
        let (_, row) = tokio::try_join!(
            tx.batch_execute("SET LOCAL enable_sort = off"),
            tx.query_one(&stmt, &[])
        )
        .unwrap();
        assert_eq!(row.get::<_, &str>(0), "off");
        tx.batch_execute("SET LOCAL enable_sort = on").await.unwrap();
    }
}

/// On a table never analyzed, the claim still walks its partial indexes in
/// order and stops at its limit, instead of sorting every due row.
#[tokio::test]
async fn the_claim_goes_by_its_partial_indexes_even_without_statistics() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    emit(&store, "log", 5_000, 0).await;
    let plan = store.explain_claim(at(1), 100).await.unwrap();
    for mode in plan.split("-- ").filter(|m| !m.is_empty()) {
        assert!(mode.contains("Index Scan using jadpo_deliveries_due"), "{mode}");
        assert!(mode.contains("Index Scan using jadpo_deliveries_lost"), "{mode}");
        assert!(!mode.contains("Sort Key: jadpo_deliveries.due_at"), "{mode}");
        assert!(mode.contains("rows=100 loops=1"), "{mode}");
        // The events: a lookup by primary key each.
        assert!(mode.contains("Index Scan using jadpo_events_pkey"), "{mode}");
        assert!(!mode.contains("Seq Scan") && !mode.contains("Hash"), "{mode}");
    }
    // Explaining claimed nothing.
    assert_eq!(claim(&store, "w", 1, 10_000).await.claimed.len(), 5_000);
}

/// Returns once some session waits for a lock `pid` holds: the interleaving
/// a test builds is then in place, however slowly the other side started.
async fn blocked_behind(watcher: &tokio_postgres::Client, pid: i32, never: &str) {
    let ceiling = Instant::now() + Duration::from_secs(60);
    loop {
        let blocked: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if blocked > 0 {
            return;
        }
        assert!(Instant::now() < ceiling, "{never}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Commits `tx` (backend `pid`) once `task` waits for one of its locks,
/// then returns what `task` came to: how the races here line up, a lock
/// held by `tx` that the store's statement in `task` must wait for.
async fn commit_once_blocked<T>(
    schema: &TestSchema,
    tx: tokio_postgres::Transaction<'_>,
    pid: i32,
    task: tokio::task::JoinHandle<T>,
    never: &str,
) -> T {
    blocked_behind(&schema.client().await, pid, never).await;
    tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap()
}

/// A claim that decides to hold a delivery on a breaker another process is
/// closing at that moment must not commit the hold after the close: the
/// close's release would miss it. Here the close is a transaction of our
/// own, holding the breaker's row while the claim runs; the claim waits for
/// it, sees the breaker moved, and plans again: the delivery runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_racing_a_close_is_planned_again_not_left_held() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    open_breaker(&store, 0).await;
    let waiting = emit(&store, "pay", 1, 1).await;
    // Another process is closing the breaker: its row is locked, its change
    // not yet committed.
    let mut closer = schema.client().await;
    let tx = closer.transaction().await.unwrap();
    let closer_pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    tx.execute(
        "UPDATE jadpo_circuit_breakers SET state = 'closed', consecutive_unavailable = 0, opened_at = NULL, \
         outage_since = NULL, pause_ms = 0, probe_delivery = NULL, probe_until = NULL, alert_raised = false, \
         version = version + 1 WHERE connection = 'payments'",
        &[],
    )
    .await
    .unwrap();
    let claiming = {
        let store = store.clone();
        tokio::spawn(async move { claim(&store, "w", 2, 1).await })
    };
    let report = commit_once_blocked(
        &schema,
        tx,
        closer_pid,
        claiming,
        "the claim never waited for the close",
    )
    .await;
    assert_eq!(
        report.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        waiting,
        "{report:?}"
    );
    assert!(report.held.is_empty(), "held behind a breaker that closed: {report:?}");
}

/// A finish reads its rows without locking them and writes each fenced on
/// its lease. Here another process takes the lease over (its change not yet
/// committed) after the finish read the row: the finish's write waits for
/// it, finds the new token, and the finish is redone and refused as lease
/// lost, leaving the takeover's row as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_whose_lease_is_taken_over_after_its_read_writes_nothing() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let ids = emit(&store, "log", 1, 0).await;
    let first = claim(&store, "late", 0, 1).await.claimed.remove(0);
    let mut taker = schema.client().await;
    let tx = taker.transaction().await.unwrap();
    let taker_pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    tx.execute(
        "UPDATE jadpo_deliveries SET lease_owner = 'new', lease_token = lease_token + 1, \
         attempts = attempts + 1 WHERE id = $1",
        &[&ids[0].0],
    )
    .await
    .unwrap();
    let finishing = {
        let store = store.clone();
        let f = finish_of(&first, Outcome::Succeeded, 61);
        tokio::spawn(async move { store.finish(&f).await })
    };
    let finished = commit_once_blocked(
        &schema,
        tx,
        taker_pid,
        finishing,
        "the finish never waited for the takeover",
    )
    .await;
    assert_eq!(finished, Err(StoreError::LeaseLost(ids[0])));
    let d = store.delivery(ids[0]).await.unwrap().unwrap();
    assert_eq!(d.state, DeliveryState::Running);
    assert_eq!(d.lease.as_ref().map(|l| l.owner.as_str()), Some("new"));
    assert!(store.attempts(ids[0]).await.unwrap().is_empty(), "no attempt recorded");
}

/// Applies the first `n` migrations only, as a store of that version left
/// its schema.
async fn migrated_to(client: &tokio_postgres::Client, n: usize) {
    client
        .batch_execute("CREATE TABLE jadpo_migrations (version INT PRIMARY KEY, applied_at BIGINT NOT NULL)")
        .await
        .unwrap();
    for m in &jadpo_store::postgres::schema::MIGRATIONS[..n] {
        client.batch_execute(m.sql).await.unwrap();
        client
            .execute(
                "INSERT INTO jadpo_migrations (version, applied_at) VALUES ($1, 0)",
                &[&m.version],
            )
            .await
            .unwrap();
    }
}

/// Migration 4 moves each handled record onto its delivery, so a delivery
/// whose run committed before the upgrade is still never run again, and
/// drops the tables and indexes it replaces.
#[tokio::test]
async fn migration_4_keeps_every_handled_record() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let client = schema.client().await;
    // The schema as a store before migration 4 left it, with two due
    // deliveries of one event, one of them handled.
    migrated_to(&client, 3).await;
    client
        .batch_execute(
            "INSERT INTO jadpo_events (id, name, payload, emitted_at) VALUES (1, 'e', '{}', 0);
             INSERT INTO jadpo_deliveries (id, event_id, subscriber, state, due_at, budget_from, created_at, updated_at)
                 VALUES (1, 1, 'log', 'due', 0, 0, 0, 0), (2, 1, 'pay', 'due', 0, 0, 0, 0);
             INSERT INTO jadpo_handled (subscriber, event_id, handled_at) VALUES ('log', 1, 0);",
        )
        .await
        .unwrap();

    // Migration 4 is a contract: what `jadpo migrate --force` applies.
    let store = schema.unmigrated(Options::default());
    store.migrate_with(true).await.unwrap();
    let of_event = DeliveryFilter {
        event: Some(jadpo_core::EventId(1)),
        ..DeliveryFilter::default()
    };
    let listed: Vec<i64> = store.list(&of_event).await.unwrap().iter().map(|d| d.id.0).collect();
    assert_eq!(listed, vec![2, 1], "the event's deliveries, found by their ids");
    let r = claim(&store, "w", 1, 10).await;
    assert_eq!(
        r.succeeded,
        vec![jadpo_core::DeliveryId(1)],
        "handled before the upgrade"
    );
    assert_eq!(r.claimed.iter().map(|c| c.delivery.id.0).collect::<Vec<_>>(), vec![2]);
    let gone: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace
             AND relname IN ('jadpo_handled', 'jadpo_deliveries_subscriber', 'jadpo_attempts_pkey',
                             'jadpo_deliveries_event')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(gone, 0);
}

/// A finish plans from the row its claim returned only if that row is the
/// claim's own (same id, running under the finish's lease); anything else
/// is ignored and the row is read.
#[tokio::test]
async fn a_finish_ignores_a_carried_row_that_is_not_its_claims() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let ids = emit(&store, "log", 1, 0).await;
    let c = claim(&store, "w", 0, 1).await.claimed.remove(0);
    let mut other = c.delivery.clone();
    other.attempts = 9;
    if let Some(l) = other.lease.as_mut() {
        l.token.0 += 5;
    }
    let mut f = finish_of(&c, Outcome::Succeeded, 1);
    f.claimed = Some(other);
    store.finish(&f).await.unwrap();
    let d = store.delivery(ids[0]).await.unwrap().unwrap();
    assert_eq!((d.state, d.attempts), (DeliveryState::Succeeded, 1));
    let history = store.attempts(ids[0]).await.unwrap();
    assert_eq!(history.iter().map(|a| a.attempt).collect::<Vec<_>>(), vec![1]);
}

/// A finish's write looks each row up by its primary key, even where the
/// planner's statistics favour hashing the whole table (analyzed, 20,000
/// rows, 1,000 written): that plan read every delivery for every batch.
#[tokio::test]
async fn a_finish_writes_by_the_primary_key_whatever_the_statistics() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let ids = emit(&store, "log", 20_000, 0).await;
    schema
        .client()
        .await
        .batch_execute("ANALYZE jadpo_deliveries")
        .await
        .unwrap();
    let plan = store.explain_finish(&ids[..1_000]).await.unwrap();
    for mode in plan.split("-- ").filter(|m| !m.is_empty()) {
        assert!(mode.contains("Nested Loop"), "{mode}");
        assert!(mode.contains("Index Scan using jadpo_deliveries_pkey"), "{mode}");
        assert!(!mode.contains("Seq Scan"), "{mode}");
    }
}

/// Two processes emitting under one new idempotency key at once: exactly one
/// event is made, and the other emit returns it as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_racing_one_idempotency_key_make_one_event() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let a = schema.store(Options::default()).await;
    let b = schema.store(Options::default()).await;
    for round in 0..20 {
        let key = format!("order-{round}");
        let event = || NewEvent {
            name: "E".into(),
            payload: r#"{"n":1}"#.into(),
            subscribers: vec!["log".into()],
            idempotency_key: Some(key.clone()),
            trace: None,
            keys: Default::default(),
        };
        let barrier = Arc::new(Barrier::new(2));
        let (x, y) = tokio::join!(
            async {
                barrier.wait().await;
                a.emit(&[event()], at(round)).await.unwrap().remove(0)
            },
            async {
                barrier.wait().await;
                b.emit(&[event()], at(round)).await.unwrap().remove(0)
            }
        );
        assert_eq!(x.event_id, y.event_id, "round {round}");
        assert_eq!(x.deliveries, y.deliveries, "round {round}");
        assert!(x.duplicate != y.duplicate, "round {round}: exactly one made it");
    }
    let made: i64 = schema
        .client()
        .await
        .query_one("SELECT count(*) FROM jadpo_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(made, 20);
}

/// Migration 5 keeps the alerts raised before it, each with a public id,
/// left unsent: none is sent long after its outage.
#[tokio::test]
async fn migration_5_keeps_earlier_alerts_unsent() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let client = schema.client().await;
    migrated_to(&client, 4).await;
    client
        .batch_execute(
            "INSERT INTO jadpo_alerts (alert, connection, since, held, raised_at)
             VALUES ('connection_unavailable', 'payments', 1000, 4, 2000)",
        )
        .await
        .unwrap();
    // Migration 5 is a contract: what `jadpo migrate --force` applies.
    let store = schema.unmigrated(Options::default());
    store.migrate_with(true).await.unwrap();
    let kept = store.alerts(10).await.unwrap();
    assert_eq!(kept.len(), 1);
    let a = &kept[0];
    assert_eq!(
        (
            a.message.connection.as_deref(),
            a.message.held,
            a.message.since.as_millis(),
            a.message.raised_at.as_millis()
        ),
        (Some("payments"), Some(4), 1000, 2000)
    );
    assert_eq!(a.message.kind, jadpo_core::alert::AlertKind::Raised);
    assert_eq!(a.public_id.len(), 36);
    assert_eq!(a.sends.state(), jadpo_core::alert::SendState::Unsent);
    let now = jadpo_core::Timestamp::from_millis(1_700_000_000_000);
    assert!(store
        .claim_alert_sends(now, 10, Duration::from_secs(60))
        .await
        .unwrap()
        .is_empty());
}

/// Two callers' transactions emit one new idempotency key at once: the
/// second waits for the first and, when it commits, gets its event as a
/// duplicate (or the conflict, for another payload) in its own
/// transaction, which goes on and commits.
#[tokio::test]
async fn emit_in_racing_on_one_key_returns_the_winners_event() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let keyed = |payload: &str| {
        vec![NewEvent {
            name: "OrderPlaced".into(),
            payload: payload.into(),
            subscribers: vec!["log".into()],
            idempotency_key: Some("order-1".into()),
            trace: None,
            keys: Default::default(),
        }]
    };
    let mut first = store.connection().await.unwrap();
    first
        .batch_execute("CREATE TABLE app_orders (id INT PRIMARY KEY)")
        .await
        .unwrap();
    for (second_payload, same) in [(r#"{"order":1}"#, true), (r#"{"order":2}"#, false)] {
        first.batch_execute("TRUNCATE app_orders").await.unwrap();
        let key = format!("order-{}", same as u8);
        let with_key = |p: &str| {
            let mut e = keyed(p);
            e[0].idempotency_key = Some(key.clone());
            e
        };
        let t1 = first.transaction().await.unwrap();
        let won = emit_in(&t1, &with_key(r#"{"order":1}"#), at(0)).await.unwrap();
        let store2 = store.clone();
        let events2 = with_key(second_payload);
        let racer = tokio::spawn(async move {
            let mut second = store2.connection().await.unwrap();
            let t2 = second.transaction().await.unwrap();
            let got = emit_in(&t2, &events2, at(0)).await;
            // The caller's transaction is still usable, and commits.
            t2.execute("INSERT INTO app_orders VALUES (2)", &[]).await.unwrap();
            t2.commit().await.unwrap();
            got
        });
        // The second waits on the first's key before the first commits.
        let watcher = store.connection().await.unwrap();
        let start = Instant::now();
        loop {
            let waiting: i64 = watcher
                .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
                .await
                .unwrap()
                .get(0);
            if waiting > 0 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "the second never waited");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        t1.commit().await.unwrap();
        let got = racer.await.unwrap();
        if same {
            let got = got.unwrap();
            assert!(got[0].duplicate);
            assert_eq!(
                (got[0].event_id, &got[0].deliveries),
                (won[0].event_id, &won[0].deliveries)
            );
        } else {
            assert!(matches!(got, Err(StoreError::IdempotencyConflict(_))), "{got:?}");
        }
        let orders: i64 = first
            .query_one("SELECT count(*) FROM app_orders", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(orders, 1, "the second transaction committed its own write");
    }
    let events: i64 = first
        .query_one("SELECT count(*) FROM jadpo_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 2, "one event per key");
}

/// A key's deliveries are found through `jadpo_delivery_keys`, walked
/// newest first to the limit, never by reading every delivery; each key
/// row goes with its delivery when retention deletes it.
#[tokio::test]
async fn a_key_is_looked_up_in_its_table_and_pruned_with_its_delivery() {
    use jadpo_core::key::{Key, KeyValue};
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let events: Vec<NewEvent> = (0..4_000)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: vec!["log".into()],
            idempotency_key: None,
            trace: None,
            // Half keyed, over 100 keys, and one key of its own.
            keys: match i {
                7 => [("log".to_string(), Key::new(KeyValue::Str("rare")).unwrap().into())].into(),
                i if i % 2 == 0 => [("log".to_string(), Key::new(KeyValue::Int(i % 100)).unwrap().into())].into(),
                _ => Default::default(),
            },
        })
        .collect();
    store.emit(&events, at(0)).await.unwrap();
    let client = schema.client().await;
    client.batch_execute("ANALYZE").await.unwrap();
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count("SELECT count(*) FROM jadpo_delivery_keys").await, 2_001);
    for key in ["rare", "42"] {
        let filter = DeliveryFilter {
            key: Some(key.into()),
            limit: Some(5),
            ..DeliveryFilter::default()
        };
        let plan = store.explain_list(&filter).await.unwrap();
        for mode in plan.split("-- ").filter(|m| !m.is_empty()) {
            assert!(
                mode.contains("Index Only Scan Backward using jadpo_delivery_keys_pkey"),
                "{mode}"
            );
            assert!(
                mode.contains("Nested Loop") && mode.contains("rows=1 loops=5") || key == "rare",
                "{mode}"
            );
            assert!(!mode.contains("Seq Scan") && !mode.contains("Sort"), "{mode}");
        }
        let found = store.list(&filter).await.unwrap();
        assert!(!found.is_empty() && found.iter().all(|d| d.key.as_ref().unwrap().as_str() == key));
    }
    let r = claim(&store, "w", 1, 10_000).await;
    let finishes: Vec<Finish> = r.claimed.iter().map(|c| finish_of(c, Outcome::Succeeded, 2)).collect();
    for r in store.finish_batch(&finishes).await.unwrap() {
        r.unwrap();
    }
    let mut pruned = 0;
    loop {
        let n = store.prune(at(100), 1_000).await.unwrap();
        if n == 0 {
            break;
        }
        pruned += n;
    }
    assert_eq!(pruned, 4_000);
    assert_eq!(count("SELECT count(*) FROM jadpo_delivery_keys").await, 0);
}

/// What a queued delivery waits for is read from the deliveries: down the
/// key's deliveries from its first queued one, one index entry at a time,
/// never by reading the key's whole history or its whole queue (here 200
/// finished before the holder and 799 queued behind it), whatever the
/// statistics say (one key is every row here, where a plan left to them
/// would read the tables whole).
#[tokio::test]
async fn what_a_queued_delivery_waits_for_is_read_through_the_keys_indexes() {
    use jadpo_core::key::{Key, KeyValue, Keyed};
    use jadpo_core::key_rule::KeyRule;
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    let keyed = Keyed {
        key: Key::new(KeyValue::Str("hot")).unwrap(),
        rule: Some(KeyRule::Fifo),
    };
    let events: Vec<NewEvent> = (0..1_000).map(|i| keyed_event(i, keyed.clone())).collect();
    let ids: Vec<jadpo_core::DeliveryId> = store
        .emit(&events, at(0))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect();
    for t in 1..=200 {
        let r = claim(&store, "w", t, 10).await;
        assert_eq!(r.claimed.len(), 1, "one of the key at a time");
        store
            .finish(&finish_of(&r.claimed[0], Outcome::Succeeded, t))
            .await
            .unwrap();
    }
    schema.client().await.batch_execute("ANALYZE").await.unwrap();
    let holder = ids[200];
    for asking in [ids[201], ids[999]] {
        assert_eq!(store.waits_for(asking).await.unwrap(), Some(holder));
    }
    // Down from the first queued one (201), and from the top.
    for below in [ids[201], jadpo_core::DeliveryId(i64::MAX)] {
        let plan = store.explain_waits_for("log", "hot", below).await.unwrap();
        for mode in plan.split("-- ").filter(|m| !m.is_empty()) {
            assert!(
                mode.contains("Index Only Scan Backward using jadpo_delivery_keys_pkey"),
                "{mode}"
            );
            assert!(mode.contains("Index Scan using jadpo_deliveries_pkey"), "{mode}");
            assert!(!mode.contains("Seq Scan") && !mode.contains("Sort"), "{mode}");
        }
    }
    assert_eq!(store.waits_for(holder).await.unwrap(), None, "not queued");
}

/// A finish batch frees up to a thousand keys' slots at once; handing them
/// on must look each key up, never compare every freed key with every
/// promoted one (a nested loop the planner chose for arrays it expects to
/// hold ten rows, which made the hand-on most of a `fifo` drain).
#[tokio::test]
async fn a_thousand_keys_handed_on_are_looked_up_one_by_one() {
    use jadpo_core::key::{Key, KeyValue, Keyed};
    use jadpo_core::key_rule::KeyRule;
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    // Two deliveries of each key: one due, one queued behind it.
    let names: Vec<String> = (0..1_000).map(|k| format!("k{k}")).collect();
    let events: Vec<NewEvent> = (0..2_000)
        .map(|i| {
            let key = Key::new(KeyValue::Str(&names[i % 1_000])).unwrap();
            keyed_event(
                i,
                Keyed {
                    key,
                    rule: Some(KeyRule::Fifo),
                },
            )
        })
        .collect();
    store.emit(&events, at(0)).await.unwrap();
    let freed: Vec<(&str, &str)> = names.iter().map(|k| ("log", k.as_str())).collect();
    let plan = store.explain_hand_on(&freed, at(1)).await.unwrap();
    for mode in plan.split("-- ").filter(|m| !m.is_empty()) {
        // Rows a join compared and threw away: about a million when every
        // freed key meets every promoted one, at most a few per key when
        // each is looked up.
        let removed = mode
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Rows Removed by Join Filter: "))
            .map(|n| n.parse::<u64>().unwrap())
            .max()
            .unwrap_or(0);
        assert!(removed < 10_000, "{removed} pairs compared:\n{mode}");
        assert!(mode.contains("Index Only Scan using jadpo_deliveries_queued"), "{mode}");
    }
}

/// A process keeps two finish batches in flight on PostgreSQL (the next
/// one starts while one commits), one when its pool is too small to spare
/// the connections.
#[tokio::test]
async fn two_finish_batches_are_in_flight_when_the_pool_has_room() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(Options::default()).await;
    assert_eq!(store.finish_writers(), 2);
    let small = schema
        .store(Options {
            pool_size: 2,
            ..Options::default()
        })
        .await;
    assert_eq!(small.finish_writers(), 1);
}

/// Event `i` for subscriber `log`, its delivery under `keyed`.
fn keyed_event(i: usize, keyed: jadpo_core::key::Keyed) -> NewEvent {
    NewEvent {
        name: "E".into(),
        payload: format!("{{\"n\":{i}}}"),
        subscribers: vec!["log".into()],
        idempotency_key: None,
        trace: None,
        keys: [("log".to_string(), keyed)].into(),
    }
}
