//! Many SQLite stores (each its own connections, as separate processes would
//! have) on one file at once: claims, fencing and breakers under real
//! concurrency.

use jadpo_core::breaker::{BreakerState, CallVerdict, Transition};
use jadpo_core::{Budget, DeliveryId, DeliveryState, FailureKind, FailureRecord, Outcome};
use jadpo_store::conformance::{at, retry_at, routes, LEASE};
use jadpo_store::sqlite::{rusqlite, SqliteStore};
use jadpo_store::{ClaimRequest, Claimed, DeliveryFilter, Finish, NewEvent, Route, Routes, Store, StoreError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn fresh_file(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("sqlite_contention-{test}"));
    jadpo_store::sqlite::testing::fresh_path(&dir)
}

async fn open(path: &std::path::Path) -> SqliteStore {
    SqliteStore::open(&format!("sqlite:{}", path.display())).await.unwrap()
}

fn fin(c: &Claimed, outcome: Outcome, calls: &[(&str, CallVerdict)], now: i64) -> Finish {
    Finish {
        calls: calls.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
        claimed: None,
        ..c.finish(outcome, at(now), at(now))
    }
}

/// Retries what a real worker retries, a store busy past its bound,
/// counting how often.
macro_rules! patiently {
    ($unavailable:expr, $op:expr) => {{
        let mut tries = 0;
        loop {
            match $op.await {
                Ok(v) => break v,
                Err(StoreError::Unavailable(_)) if tries < 100 => {
                    tries += 1;
                    $unavailable += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }};
}

/// 32 claimers, each with its own store on the same file, drain 10,000
/// deliveries in batches: every delivery claimed exactly once, all
/// succeeded, one attempt each.
///
/// The interleaving the test needs is forced, not hoped for: every claimer
/// starts at one barrier, and the first to claim a batch keeps it unfinished
/// until a second claimer has claimed one too. Which claimers then win the
/// write lock is the scheduler's business and is not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_claimers_claim_each_delivery_exactly_once() {
    const DELIVERIES: usize = 10_000;
    const CLAIMERS: usize = 32;
    let path = fresh_file("drain");
    let seed = open(&path).await;
    let events: Vec<NewEvent> = (0..DELIVERIES)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: vec!["quiet".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    let emitted = seed.emit(&events, at(0)).await.unwrap();
    let mut expected: Vec<DeliveryId> = emitted.iter().flat_map(|e| e.deliveries.clone()).collect();
    expected.sort();

    let mut routes = Routes::new();
    routes.insert(
        "quiet",
        Route {
            budget: Budget::DEFAULT,
            connections: vec![],
        },
    );
    let routes = Arc::new(routes);
    let start = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    // How many claimers have claimed a batch so far.
    let (first_claims, _) = tokio::sync::watch::channel(0usize);
    let first_claims = Arc::new(first_claims);
    let mut tasks = Vec::new();
    for w in 0..CLAIMERS {
        let store = open(&path).await;
        let routes = routes.clone();
        let (start, first_claims) = (start.clone(), first_claims.clone());
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let (mut claimed, mut unavailable) = (Vec::new(), 0usize);
            start.wait().await;
            loop {
                let req = ClaimRequest {
                    worker: &worker,
                    routes: &routes,
                    now: at(1),
                    limit: 25 + w,
                    lease: LEASE,
                };
                let batch = patiently!(unavailable, store.claim(&req)).claimed;
                if batch.is_empty() {
                    return (claimed, unavailable);
                }
                if claimed.is_empty() {
                    // Holding an unfinished batch while another claims is
                    // the overlap under test: its rows stay running, so the
                    // other claim must skip them.
                    first_claims.send_modify(|n| *n += 1);
                    let mut seen = first_claims.subscribe();
                    seen.wait_for(|n| *n >= 2).await.unwrap();
                }
                let finishes: Vec<Finish> = batch.iter().map(|c| fin(c, Outcome::Succeeded, &[], 2)).collect();
                let results = patiently!(unavailable, store.finish_batch(&finishes));
                assert!(results.iter().all(Result::is_ok), "{results:?}");
                claimed.extend(batch.iter().map(|c| c.delivery.id));
            }
        }));
    }
    let (mut all, mut unavailable, mut busy_workers) = (Vec::new(), 0, 0);
    for t in tasks {
        let (claimed, u) = t.await.unwrap();
        busy_workers += usize::from(!claimed.is_empty());
        all.extend(claimed);
        unavailable += u;
    }
    eprintln!("{busy_workers} of {CLAIMERS} claimers claimed; {unavailable} calls found the file busy past 5 s");
    assert!(
        busy_workers >= 2,
        "the barrier lets a second claimer in while the first holds its batch"
    );
    all.sort();
    let claimed = all.len();
    all.dedup();
    assert_eq!(claimed, all.len(), "a delivery was claimed twice");
    assert_eq!(all, expected, "every delivery claimed, none missing");

    let done = seed
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Succeeded),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(done.len(), DELIVERIES);
    assert!(done.iter().all(|d| d.attempts == 1));
    let conn = rusqlite::Connection::open(&path).unwrap();
    // One attempt each, the one that succeeded, kept on the delivery's row.
    let (attempts, succeeded): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT COUNT(*) FROM jadpo_attempts), \
             (SELECT COUNT(*) FROM jadpo_deliveries WHERE success_started_at IS NOT NULL)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((attempts, succeeded), (0, DELIVERIES as i64));
    let handled: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM jadpo_deliveries WHERE handled_at IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(handled, DELIVERIES as i64);
}

/// A worker paused past its lease finishes at the same moment as the one
/// that took the delivery over, each on its own connection: the late one is
/// refused whichever commits first, and the record shows the newer run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_worker_racing_the_new_owner_is_refused() {
    let path = fresh_file("fence");
    let (a, b) = (open(&path).await, open(&path).await);
    let routes = routes();
    for round in 0..50i64 {
        let t = round * 1000;
        let e = a
            .emit(
                &[NewEvent {
                    name: "E".into(),
                    payload: "{}".into(),
                    subscribers: vec!["log".into()],
                    idempotency_key: None,
                    trace: None,
                    keys: Default::default(),
                }],
                at(t),
            )
            .await
            .unwrap();
        let id = e[0].deliveries[0];
        let req = |worker, now| ClaimRequest {
            worker,
            routes: &routes,
            now: at(now),
            limit: 1,
            lease: LEASE,
        };
        let late = a.claim(&req("paused", t)).await.unwrap().claimed.remove(0);
        let owner = b.claim(&req("owner", t + 60)).await.unwrap().claimed.remove(0);
        assert_eq!(owner.delivery.id, id);
        let failed = Outcome::Failed(FailureRecord::new("crm.rejected", FailureKind::Rejected));
        let (late_f, owner_f) = (
            fin(&late, Outcome::Succeeded, &[], t + 61),
            fin(&owner, failed.clone(), &[], t + 61),
        );
        let (late_r, owner_r) = tokio::join!(a.finish(&late_f), b.finish(&owner_f),);
        assert_eq!(late_r, Err(StoreError::LeaseLost(id)));
        owner_r.unwrap();
        let d = a.delivery(id).await.unwrap().unwrap();
        assert_eq!(
            (d.state, d.last_failure.as_ref()),
            (DeliveryState::Failed, failed.failure())
        );
        let history = b.attempts(id).await.unwrap();
        assert_eq!(history.len(), 1, "only the owner's attempt is recorded");
        assert_eq!(history[0].state, DeliveryState::Failed);
    }
}

/// Two stores record unavailable calls on one breaker at once, then sweep
/// and claim at once: it opens once, one probe goes, one alert is raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_share_one_breaker() {
    let path = fresh_file("breaker");
    let stores = [open(&path).await, open(&path).await];
    let routes = routes();
    let events: Vec<NewEvent> = (0..20)
        .map(|_| NewEvent {
            name: "E".into(),
            payload: "{}".into(),
            subscribers: vec!["pay".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    stores[0].emit(&events, at(0)).await.unwrap();
    let req = |worker, now, limit| ClaimRequest {
        worker,
        routes: &routes,
        now: at(now),
        limit,
        lease: LEASE,
    };
    let mut claimed = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        claimed.push(s.claim(&req(["a", "b"][i], 0, 5)).await.unwrap().claimed);
    }
    let unavailable = [("payments", CallVerdict::Unavailable)];
    let finishes = |cs: &[Claimed]| -> Vec<Finish> {
        cs.iter()
            .map(|c| fin(c, retry_at("http.503", 30), &unavailable, 1))
            .collect()
    };
    let (fa, fb) = (finishes(&claimed[0]), finishes(&claimed[1]));
    let (ra, rb) = tokio::join!(stores[0].finish_batch(&fa), stores[1].finish_batch(&fb));
    let opened = ra
        .unwrap()
        .into_iter()
        .chain(rb.unwrap())
        .flat_map(|r| r.unwrap().transitions)
        .filter(|(_, t)| *t == Transition::Opened)
        .count();
    assert_eq!(opened, 1, "ten unavailable attempts open it once");

    // The other ten are held; then both sweep at once after the pause.
    let held = stores[1].claim(&req("b", 2, 20)).await.unwrap().held.len();
    assert_eq!(held, 10);
    let (sa, sb) = tokio::join!(stores[0].sweep(at(61), LEASE), stores[1].sweep(at(61), LEASE));
    let (sa, sb) = (sa.unwrap(), sb.unwrap());
    assert_eq!(sa.woken.len() + sb.woken.len(), 1, "one probe woken");
    assert_eq!(sa.alerts.len() + sb.alerts.len(), 1, "one alert per outage");
    let (qa, qb) = (req("a", 61, 20), req("b", 61, 20));
    let (ca, cb) = tokio::join!(stores[0].claim(&qa), stores[1].claim(&qb));
    let probes: Vec<Claimed> = ca.unwrap().claimed.into_iter().chain(cb.unwrap().claimed).collect();
    assert_eq!(probes.len(), 1, "one probe at a time");
    let b = &stores[0].breakers().await.unwrap()[0];
    assert_eq!(b.breaker.state, BreakerState::Probing);

    let answered = [("payments", CallVerdict::Answered)];
    let rep = stores[1]
        .finish(&fin(&probes[0], Outcome::Succeeded, &answered, 62))
        .await
        .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Closed)]);
    assert_eq!(
        rep.released, 19,
        "the other held ones and the ten due again were released"
    );
    let _ = Duration::ZERO;
}
