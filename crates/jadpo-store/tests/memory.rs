//! What only the in-memory store can be made to show directly.

use jadpo_core::breaker::{BreakerState, CallVerdict};
use jadpo_core::{BreakerPolicy, Timestamp};
use jadpo_store::conformance::{at, retry_at, routes, LEASE};
use jadpo_store::memory::MemoryStore;
use jadpo_store::{ClaimRequest, Finish, NewEvent};

/// An event for the subscriber `pay` of the conformance routes.
fn event() -> NewEvent {
    NewEvent {
        name: "E".into(),
        payload: "{}".into(),
        subscribers: vec!["pay".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    }
}

/// A release racing a hold in another process can leave a delivery held
/// behind a closed breaker; the sweep releases it.
#[test]
fn the_sweep_releases_what_a_closed_breaker_still_holds() {
    let routes = routes();
    let mut s = MemoryStore::new(BreakerPolicy::DEFAULT);
    let req = |now: Timestamp| ClaimRequest {
        worker: "w",
        routes: &routes,
        now,
        limit: 10,
        lease: LEASE,
    };
    let events: Vec<NewEvent> = (0..7).map(|_| event()).collect();
    s.emit(&events, at(0)).unwrap();
    let r = s.claim(&ClaimRequest { limit: 5, ..req(at(0)) });
    for c in &r.claimed {
        s.finish(&Finish {
            calls: vec![("payments".into(), CallVerdict::Unavailable)],
            claimed: None,
            ..c.finish(retry_at("http.503", 30), at(0), at(0))
        })
        .unwrap();
    }
    assert_eq!(s.breaker("payments").unwrap().state, BreakerState::Open);
    assert_eq!(s.claim(&req(at(1))).held.len(), 2);
    s.close_breaker_for_test("payments");
    assert_eq!(s.held_count("payments"), 2);
    let sw = s.sweep(at(2), LEASE);
    assert_eq!(sw.released, 2);
    assert_eq!(s.held_count("payments"), 0);
}

/// The deliveries a step changed are kept for a checker that asks, and
/// not at all once it says it will not: a simulation checked only in full
/// pays nothing for them.
#[test]
fn changed_deliveries_are_kept_only_while_asked_for() {
    let routes = routes();
    let claim = |s: &mut MemoryStore, now| {
        s.claim(&ClaimRequest {
            worker: "w",
            routes: &routes,
            now,
            limit: 10,
            lease: LEASE,
        })
    };
    let mut s = MemoryStore::new(BreakerPolicy::DEFAULT);
    let made = s.emit(&[event()], at(0)).unwrap()[0].deliveries.clone();
    assert_eq!(s.take_changed(), made, "an emit's deliveries");
    assert_eq!(claim(&mut s, at(0)).claimed.len(), 1);
    assert_eq!(s.take_changed(), made, "a claim's");
    assert!(s.take_changed().is_empty(), "each once");

    s.emit(&[event()], at(1)).unwrap();
    s.track_changed(false);
    assert!(s.take_changed().is_empty(), "forgotten when turned off");
    s.emit(&[event()], at(2)).unwrap();
    assert_eq!(claim(&mut s, at(2)).claimed.len(), 2);
    assert!(s.take_changed().is_empty(), "nor kept after");
}
