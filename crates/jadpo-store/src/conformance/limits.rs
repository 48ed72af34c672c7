//! Scenarios of connection limits: tokens and slots taken in the store, so
//! every worker sees them; waiting spends no attempt; slots come back with
//! a finish or when their lease ends.

use super::*;
use jadpo_core::limit::{Limits, Rate, SLOT_RECHECK};
use jadpo_core::{DeliveryState, Outcome, WaitFor, Waiting};

fn waiting_on(connection: &str, reason: WaitFor) -> Option<Waiting> {
    Some(Waiting {
        connection: connection.into(),
        reason,
    })
}

/// `lim` calls `limited`, which takes 10 calls a second and 2 at once.
pub(super) fn limited_routes(limits: Limits) -> Routes {
    let mut routes = routes();
    routes.insert(
        "lim",
        Route {
            budget: Budget::DEFAULT,
            connections: vec!["limited".into()],
        },
    );
    routes.limit("limited", limits);
    routes
}

fn both() -> Limits {
    Limits {
        rate: Some(Rate::new(10, Duration::from_secs(1)).unwrap()),
        concurrency: Some(2),
    }
}

fn ms(n: u64) -> Timestamp {
    at(0).plus(Duration::from_millis(n))
}

async fn claim_at<S: Store>(s: &S, routes: &Routes, worker: &str, now: Timestamp) -> ClaimReport {
    s.claim(&ClaimRequest {
        worker,
        routes,
        now,
        limit: 100,
        lease: LEASE,
    })
    .await
    .unwrap()
}

async fn finish_limited<S: Store>(s: &S, c: &Claimed, now: Timestamp) {
    s.finish(&Finish {
        slots: vec!["limited".into()],
        ..c.finish(Outcome::Succeeded, now, now)
    })
    .await
    .unwrap();
}

/// A limited connection lets run only what its tokens and slots have room for,
/// the same for every worker; the rest wait a token apart, due, spending
/// nothing, each with why it waits; a finish gives its slot back.
pub async fn a_limited_connection_lets_through_only_what_it_has_room_for<S: Store>(s: &S) {
    let routes = limited_routes(both());
    let ids = emit(s, "lim", 5, 0).await;
    // The bucket holds one token: one runs, the rest wait a token apart.
    let r = claim_at(s, &routes, "w1", ms(0)).await;
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    assert_eq!(
        r.waiting,
        vec![
            (ids[1], ms(100)),
            (ids[2], ms(200)),
            (ids[3], ms(300)),
            (ids[4], ms(400))
        ]
    );
    for id in &ids[1..] {
        let d = get(s, *id).await;
        assert_eq!(
            (d.state, d.attempts, d.lease.is_none()),
            (DeliveryState::Due, 0, true),
            "waiting spends nothing"
        );
        assert_eq!(d.waiting, waiting_on("limited", WaitFor::Token), "kept with its reason");
        assert!(d.held.is_none(), "waiting is not held");
    }
    assert_eq!(
        s.waiting_counts().await.unwrap(),
        [("limited".to_string(), 4)].into(),
        "the queue behind the connection"
    );
    // Another worker sees the same bucket: nothing before the next token.
    assert!(claim_at(s, &routes, "w2", ms(50)).await.claimed.is_empty());
    let second = claim_at(s, &routes, "w2", ms(100)).await.claimed;
    assert_eq!(second.iter().map(|c| c.delivery.id).collect::<Vec<_>>(), vec![ids[1]]);
    // Two slots in use: the third waits for one, tokens or not.
    let r = claim_at(s, &routes, "w1", ms(200)).await;
    assert!(r.claimed.is_empty());
    assert_eq!(r.waiting, vec![(ids[2], ms(200).plus(SLOT_RECHECK))]);
    assert_eq!(get(s, ids[2]).await.waiting, waiting_on("limited", WaitFor::Slot));
    // A finish gives its slot back: the longest due of the others takes it,
    // and the rest wait for the next token.
    finish_limited(s, &second[0], ms(300)).await;
    let r = claim_at(s, &routes, "w1", ms(1200)).await;
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        vec![ids[3]]
    );
    assert_eq!(
        r.waiting.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![ids[4], ids[2]]
    );
    assert_eq!(s.waiting_counts().await.unwrap(), [("limited".to_string(), 2)].into());
    let started = get(s, ids[3]).await;
    assert_eq!(
        (started.state, started.waiting),
        (DeliveryState::Running, None),
        "a run clears the reason it waited"
    );
}

/// While deliveries wait their turn for a token, one emitted after them
/// waits after the last turn, even when a claim finds it first: a backlog
/// drains in order, and each waiting delivery is claimed again at its turn,
/// not at every token.
pub async fn a_delivery_emitted_behind_waiting_ones_waits_after_their_turns<S: Store>(s: &S) {
    let routes = limited_routes(Limits {
        rate: Some(Rate::new(10, Duration::from_secs(1)).unwrap()),
        concurrency: None,
    });
    let ids = emit(s, "lim", 4, 0).await;
    let r = claim_at(s, &routes, "w1", ms(0)).await;
    assert_eq!(r.claimed.len(), 1);
    assert_eq!(r.waiting, vec![(ids[1], ms(100)), (ids[2], ms(200)), (ids[3], ms(300))]);
    let late = s
        .emit(
            &[NewEvent {
                name: "E".into(),
                payload: "{}".into(),
                subscribers: vec!["lim".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            }],
            ms(50),
        )
        .await
        .unwrap()[0]
        .deliveries[0];
    // Due at 50 ms, the late one comes first in the claim, but the token of
    // 100 ms is the first waiter's.
    let r = claim_at(s, &routes, "w2", ms(100)).await;
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    assert_eq!(r.waiting, vec![(late, ms(400))]);
    assert_eq!(get(s, late).await.waiting, waiting_on("limited", WaitFor::Token));
    for (id, turn) in [(ids[2], 200), (ids[3], 300), (late, 400)] {
        let r = claim_at(s, &routes, "w1", ms(turn)).await;
        assert_eq!(
            (r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(), r.waiting),
            (vec![id], vec![]),
            "at {turn} ms"
        );
    }
}

/// A slot held by a lost worker comes back when its lease ends, for the next
/// delivery to take.
pub async fn a_slot_comes_back_when_its_lease_ends<S: Store>(s: &S) {
    let one = Limits {
        rate: None,
        concurrency: Some(1),
    };
    let routes = limited_routes(one);
    let ids = emit(s, "lim", 2, 0).await;
    let r = claim_at(s, &routes, "lost", at(0)).await;
    assert_eq!(r.claimed.len(), 1);
    assert_eq!(r.waiting.len(), 1);
    // The first worker is killed: its slot is back once its lease ends,
    // and the other delivery takes it.
    let r = claim_at(s, &routes, "w2", at(60)).await;
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    assert_eq!(r.lease_expired, vec![ids[0]]);
    assert_eq!(r.waiting.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![ids[0]]);
    let lost = get(s, ids[0]).await;
    assert_eq!(lost.state, DeliveryState::Due, "taken over, then waiting");
}

/// A worker lost while holding the one slot finishes late, giving the slot
/// back and reporting a 429: both fenced out. The slot stays with the run
/// that took over, and nothing pauses the connection.
pub async fn a_late_finish_after_a_takeover_gives_back_no_slot_and_pauses_nothing<S: Store>(s: &S) {
    let one = Limits {
        rate: None,
        concurrency: Some(1),
    };
    let routes = limited_routes(one);
    let ids = emit(s, "lim", 3, 0).await;
    let lost = claim_at(s, &routes, "lost", at(0)).await.claimed.remove(0);
    let holder = claim_at(s, &routes, "w2", at(60)).await.claimed.remove(0);
    assert_eq!((lost.delivery.id, holder.delivery.id), (ids[0], ids[1]));
    assert_eq!(
        s.finish(&Finish {
            slots: vec!["limited".into()],
            calls: vec![("limited".into(), jadpo_core::CallVerdict::Unavailable)],
            rate_limited: vec![("limited".into(), Some(Duration::from_secs(600)))],
            ..lost.finish(retry_at("http.429", 700), at(61), at(61))
        })
        .await,
        Err(StoreError::LeaseLost(ids[0]))
    );
    let state = s
        .limit_states()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.connection == "limited")
        .expect("the slot's row");
    assert_eq!(state.paused_until, None, "{state:?}");
    assert_eq!(state.slots.len(), 1, "the holder keeps its slot: {state:?}");
    // The others still wait for that slot, not for a pause.
    let r = claim_at(s, &routes, "w3", at(62)).await;
    assert!(r.claimed.is_empty(), "{r:?}");
    for (id, _) in &r.waiting {
        assert_eq!(get(s, *id).await.waiting, waiting_on("limited", WaitFor::Slot));
    }
    // The holder's own finish gives it back.
    finish_limited(s, &holder, at(63)).await;
    assert_eq!(claim_at(s, &routes, "w3", at(64)).await.claimed.len(), 1);
}

/// A limit holds back only the deliveries that call its connection: a
/// subscriber that calls no limited connection runs at once.
pub async fn limits_leave_other_connections_alone<S: Store>(s: &S) {
    let routes = limited_routes(both());
    emit(s, "lim", 3, 0).await;
    let logs = emit(s, "log", 3, 0).await;
    let r = claim_at(s, &routes, "w1", ms(0)).await;
    let claimed: Vec<_> = r.claimed.iter().map(|c| c.delivery.id).collect();
    for id in &logs {
        assert!(claimed.contains(id), "an unlimited subscriber runs at once");
    }
    assert_eq!(claimed.len(), 4);
    assert_eq!(r.waiting.len(), 2);
}

/// A 429 with its `Retry-After` pauses its connection for every claimer, even
/// one without limits: new deliveries wait until the pause ends.
pub async fn a_429_pauses_the_connection_for_every_claimer<S: Store>(s: &S) {
    // `payments` has no limits; its provider's 429 pauses it all the same.
    let ids = emit(s, "pay", 3, 0).await;
    let first = claim_at(s, &routes(), "w1", at(0)).await.claimed;
    assert_eq!(first.len(), 3);
    s.finish(&Finish {
        calls: vec![("payments".into(), jadpo_core::CallVerdict::Unavailable)],
        rate_limited: vec![("payments".into(), Some(Duration::from_secs(30)))],
        ..first[0].finish(retry_at("http.429", 40), at(1), at(1))
    })
    .await
    .unwrap();
    // The other two were already running; new deliveries wait.
    let more = emit(s, "pay", 2, 2).await;
    let r = claim_at(s, &routes(), "w2", at(2)).await;
    assert!(r.claimed.is_empty());
    assert_eq!(r.waiting, vec![(more[0], at(31)), (more[1], at(31))]);
    assert_eq!(get(s, more[0]).await.waiting, waiting_on("payments", WaitFor::Pause));
    let r = claim_at(s, &routes(), "w2", at(31)).await;
    assert_eq!(r.claimed.len(), 2);
    assert_ne!(ids[0], more[0]);
}
