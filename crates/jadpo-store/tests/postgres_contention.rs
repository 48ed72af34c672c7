//! 32 claimers on four pools (four "processes") drain 10,000 deliveries:
//! every delivery claimed exactly once, none lost, none run twice.

use jadpo_core::{Budget, DeliveryId, Outcome, Timestamp};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::Options;
use jadpo_store::{ClaimRequest, Finish, NewEvent, Route, Routes, Store};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DELIVERIES: usize = 10_000;
const CLAIMERS: usize = 32;
const POOLS: usize = 4;
const BATCH: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_claimers_on_four_pools_claim_each_delivery_exactly_once() {
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..POOLS {
        let options = Options {
            pool_size: CLAIMERS / POOLS,
            ..Options::default()
        };
        stores.push(schema.store(options).await);
    }
    let now = Timestamp::from_millis(1_000);
    let events: Vec<NewEvent> = (0..DELIVERIES)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{i}"),
            subscribers: vec!["noop".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect();
    let emitted: HashSet<DeliveryId> = stores[0]
        .emit(&events, now)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect();
    let mut routes = Routes::new();
    routes.insert(
        "noop",
        Route {
            budget: Budget::DEFAULT,
            connections: vec![],
        },
    );
    let routes = Arc::new(routes);

    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..CLAIMERS {
        let store = stores[w % POOLS].clone();
        let routes = routes.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut claimed = Vec::new();
            // Bounded: more rounds than there are batches to take.
            for _ in 0..DELIVERIES {
                let req = ClaimRequest {
                    worker: &worker,
                    routes: &routes,
                    now,
                    limit: BATCH,
                    lease: Duration::from_secs(600),
                };
                let got = store.claim(&req).await.unwrap().claimed;
                if got.is_empty() {
                    break;
                }
                let batch: Vec<Finish> = got.iter().map(|c| c.finish(Outcome::Succeeded, now, now)).collect();
                for r in store.finish_batch(&batch).await.unwrap() {
                    r.unwrap();
                }
                claimed.extend(got.iter().map(|c| c.delivery.id));
            }
            claimed
        }));
    }
    let mut all = Vec::new();
    let mut busiest = 0;
    for t in tasks {
        let ids = t.await.unwrap();
        busiest = busiest.max(ids.len());
        all.extend(ids);
    }
    eprintln!(
        "{} deliveries claimed and finished by {CLAIMERS} claimers in {:?} (busiest took {busiest})",
        all.len(),
        started.elapsed()
    );
    let unique: HashSet<DeliveryId> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "a delivery was claimed twice");
    assert_eq!(unique, emitted, "every delivery claimed, none lost");

    let client = schema.client().await;
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'succeeded' AND attempts = 1), count(*)
             FROM jadpo_deliveries",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (10_000, 10_000));
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT delivery_id), count(*) FILTER (WHERE attempt <> 1)
             FROM (SELECT delivery_id, attempt FROM jadpo_attempts
                   UNION ALL
                   SELECT id, attempts FROM jadpo_deliveries WHERE success_started_at IS NOT NULL) AS a",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2)),
        (10_000, 10_000, 0),
        "one attempt each"
    );
    let handled: i64 = client
        .query_one(
            "SELECT count(*) FROM jadpo_deliveries WHERE handled_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(handled, 10_000);
}
