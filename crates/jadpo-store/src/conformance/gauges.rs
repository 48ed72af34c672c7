//! What `/metrics` reads of a store (`Store::gauges`): each subscriber's
//! oldest due delivery, and held and waiting deliveries counted up to a cap.

use super::*;
use jadpo_core::limit::{Limits, Rate};
use std::collections::BTreeMap;

async fn gauges<S: Store>(s: &S, now: i64, cap: u64) -> Gauges {
    let subscribers = ["log".to_string(), "brief".into(), "pay".into()];
    let connections = ["limited".to_string(), "payments".into()];
    s.gauges(&GaugeQuery {
        subscribers: &subscribers,
        connections: &connections,
        now: at(now),
        cap,
    })
    .await
    .unwrap()
}

/// A subscriber's oldest due delivery is the earliest due at `now`: one
/// waiting out its backoff is not late, and a subscriber with none due is
/// absent.
pub async fn gauges_find_each_subscribers_oldest_due_delivery<S: Store>(s: &S) {
    assert_eq!(gauges(s, 0, 100).await, Gauges::default(), "an empty store");
    emit(s, "log", 2, 10).await;
    emit(s, "brief", 1, 20).await;
    let oldest = |g: Gauges| -> BTreeMap<String, i64> {
        g.oldest_due
            .into_iter()
            .map(|(k, v)| (k, v.as_millis() / 1000))
            .collect()
    };
    let expect =
        |pairs: &[(&str, i64)]| -> BTreeMap<String, i64> { pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    assert_eq!(
        oldest(gauges(s, 15, 100).await),
        expect(&[("log", 10)]),
        "brief not due yet"
    );
    assert_eq!(oldest(gauges(s, 25, 100).await), expect(&[("brief", 20), ("log", 10)]));
    let r = claim(s, 30, 2).await;
    assert_eq!(r.claimed.len(), 2);
    finish(s, &r.claimed[0], retry_at("http.503", 100), &[], 30)
        .await
        .unwrap();
    finish(s, &r.claimed[1], retry_at("http.503", 90), &[], 30)
        .await
        .unwrap();
    assert_eq!(
        oldest(gauges(s, 50, 100).await),
        expect(&[("brief", 20)]),
        "running, then waiting out a backoff: not late"
    );
    assert_eq!(oldest(gauges(s, 95, 100).await), expect(&[("brief", 20), ("log", 90)]));
}

/// Held deliveries behind each breaker, and due deliveries waiting for room
/// on each connection, are counted up to the cap and no further.
pub async fn gauges_count_held_and_waiting_up_to_the_cap<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 3, 1).await;
    assert_eq!(claim(s, 1, 10).await.held.len(), 3);
    let held = |g: &Gauges| {
        g.breakers
            .iter()
            .find(|b| b.breaker.connection == "payments")
            .map(|b| b.held)
    };
    assert_eq!(held(&gauges(s, 1, 100).await), Some(3));
    assert_eq!(held(&gauges(s, 1, 2).await), Some(2), "capped");
    assert_eq!(
        gauges(s, 1, 100).await.breakers,
        s.breakers().await.unwrap(),
        "under the cap, the breakers as listed"
    );

    let routes = super::limits::limited_routes(Limits {
        rate: Some(Rate::new(1, Duration::from_secs(1)).unwrap()),
        concurrency: None,
    });
    emit(s, "lim", 4, 2).await;
    let r = s
        .claim(&ClaimRequest {
            worker: "w1",
            routes: &routes,
            now: at(2),
            limit: 100,
            lease: LEASE,
        })
        .await
        .unwrap();
    assert_eq!(r.waiting.len(), 3, "one token: one runs, three wait");
    let waiting = |g: Gauges| g.waiting.into_iter().collect::<Vec<_>>();
    assert_eq!(waiting(gauges(s, 2, 100).await), vec![("limited".to_string(), 3)]);
    assert_eq!(
        waiting(gauges(s, 2, 2).await),
        vec![("limited".to_string(), 2)],
        "capped"
    );
}
