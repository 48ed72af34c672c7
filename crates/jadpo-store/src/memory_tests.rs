//! The store's scenarios, run against the in-memory store. Issue 4 moves
//! them into the conformance suite every store runs.

use super::*;
use jadpo_core::breaker::{BreakerState, CallVerdict};
use jadpo_core::{Budget, Failure, FailureKind, FailureRecord};

const LEASE: Duration = Duration::from_secs(60);

fn at(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

fn store() -> MemoryStore {
    let mut routes = Routes::new();
    routes.insert(
        "pay",
        Route {
            budget: Budget::DEFAULT,
            connections: vec!["payments".into()],
        },
    );
    routes.insert(
        "log",
        Route {
            budget: Budget::new(2, Duration::from_secs(3600)).unwrap(),
            connections: vec![],
        },
    );
    MemoryStore::new(routes, BreakerPolicy::DEFAULT)
}

fn emit(s: &mut MemoryStore, subscriber: &str, n: usize, now: i64) -> Vec<DeliveryId> {
    let events: Vec<NewEvent> = (0..n)
        .map(|_| NewEvent {
            name: "E".into(),
            payload: "{}".into(),
            subscribers: vec![subscriber.into()],
        })
        .collect();
    s.emit(&events, at(now))
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect()
}

fn claim(s: &mut MemoryStore, now: i64, limit: usize) -> ClaimReport {
    s.claim(&ClaimRequest {
        worker: "w1",
        now: at(now),
        limit,
        lease: LEASE,
    })
}

fn finish(
    s: &mut MemoryStore,
    c: &Claimed,
    outcome: Outcome,
    calls: &[(&str, CallVerdict)],
    now: i64,
) -> Result<FinishReport, StoreError> {
    s.finish(&Finish {
        id: c.delivery.id,
        token: c.token(),
        outcome,
        calls: calls.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
        probe_for: c.probe_for.clone(),
        started_at: at(now),
        now: at(now),
    })
}

fn retry(code: &str, now: i64) -> Outcome {
    Outcome::Retry {
        at: at(now),
        failure: FailureRecord::new(code, FailureKind::Unavailable),
    }
}

/// Five unavailable attempts open the breaker of `payments`.
fn open_breaker(s: &mut MemoryStore, now: i64) {
    emit(s, "pay", 5, now);
    let r = claim(s, now, 5);
    assert_eq!(r.claimed.len(), 5);
    for c in &r.claimed {
        finish(
            s,
            c,
            retry("http.503", now + 30),
            &[("payments", CallVerdict::Unavailable)],
            now,
        )
        .unwrap();
    }
    assert_eq!(s.breaker("payments").unwrap().state, BreakerState::Open);
}

#[test]
fn claim_takes_due_deliveries_oldest_first_up_to_the_limit() {
    let mut s = store();
    let ids = emit(&mut s, "log", 3, 0);
    emit(&mut s, "log", 2, 10);
    let r = claim(&mut s, 5, 10);
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        ids
    );
    let r = claim(&mut s, 10, 1);
    assert_eq!(r.claimed.len(), 1);
    assert!(claim(&mut s, 10, 1).claimed.len() == 1 && claim(&mut s, 10, 5).claimed.is_empty());
}

#[test]
fn every_claim_issues_a_new_lease_and_a_late_worker_changes_nothing() {
    let mut s = store();
    emit(&mut s, "log", 1, 0);
    let first = claim(&mut s, 0, 1).claimed.remove(0);
    // The first worker is paused past its lease; another takes it over.
    let second = claim(&mut s, 60, 1).claimed.remove(0);
    assert_ne!(first.token(), second.token());
    assert_eq!(
        second.delivery.last_failure,
        Some(FailureRecord::lease_expired())
    );
    assert_eq!(second.delivery.attempts, 2);
    assert_eq!(
        finish(&mut s, &first, Outcome::Succeeded, &[], 61),
        Err(StoreError::LeaseLost(first.delivery.id))
    );
    let failed = Outcome::Failed(FailureRecord::new("crm.rejected", FailureKind::Rejected));
    finish(&mut s, &second, failed.clone(), &[], 62).unwrap();
    let d = s.delivery(second.delivery.id).unwrap();
    assert_eq!(
        (d.state, d.last_failure.clone()),
        (DeliveryState::Failed, failed.failure().cloned())
    );
    assert!(
        !s.is_handled("log", d.event_id),
        "the late success wrote no handled record"
    );
}

#[test]
fn a_handled_record_makes_a_lost_run_succeeded_without_running_again() {
    let mut s = store();
    emit(&mut s, "log", 1, 0);
    let c = claim(&mut s, 0, 1).claimed.remove(0);
    s.commit_handled(c.delivery.id, c.token()).unwrap();
    // The worker dies before it records the outcome.
    let r = claim(&mut s, 60, 1);
    assert!(r.claimed.is_empty());
    assert_eq!(r.succeeded, vec![c.delivery.id]);
    assert_eq!(
        s.delivery(c.delivery.id).unwrap().state,
        DeliveryState::Succeeded
    );
}

#[test]
fn a_spent_budget_fails_at_the_claim_without_counting_an_attempt() {
    let mut s = store();
    emit(&mut s, "log", 1, 0);
    for t in [0, 100] {
        let c = claim(&mut s, t, 1).claimed.remove(0);
        finish(&mut s, &c, retry("http.503", t + 50), &[], t).unwrap();
    }
    let r = claim(&mut s, 150, 1);
    assert_eq!(r.gave_up.len(), 1);
    let d = s.delivery(r.gave_up[0]).unwrap();
    assert_eq!((d.state, d.attempts), (DeliveryState::Failed, 2));
    assert_eq!(d.last_failure.as_ref().unwrap().code, "http.503");
}

#[test]
fn held_while_open_probe_after_the_pause_released_when_answered() {
    let mut s = store();
    open_breaker(&mut s, 0);
    let waiting = emit(&mut s, "pay", 3, 1);
    let r = claim(&mut s, 1, 10);
    assert!(r.claimed.is_empty());
    assert_eq!(r.held, waiting);
    for id in &waiting {
        let d = s.delivery(*id).unwrap();
        assert_eq!((d.state, d.attempts), (DeliveryState::Held, 0));
    }
    // The earlier five come due at 30 s and are held too.
    assert_eq!(claim(&mut s, 30, 10).held.len(), 5);
    assert_eq!(s.held_count("payments"), 8);
    // After the minute's pause the sweep wakes the longest held as the probe.
    let sw = s.sweep(at(59), LEASE);
    assert!(sw.woken.is_empty());
    let sw = s.sweep(at(60), LEASE);
    assert_eq!(sw.woken, vec![waiting[0]]);
    let probe = claim(&mut s, 60, 10).claimed.remove(0);
    assert_eq!(probe.delivery.id, waiting[0]);
    assert_eq!(probe.probe_for, vec!["payments".to_string()]);
    assert_eq!(s.breaker("payments").unwrap().state, BreakerState::Probing);
    let rep = finish(
        &mut s,
        &probe,
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        61,
    )
    .unwrap();
    assert_eq!(
        rep.transitions,
        vec![("payments".to_string(), Transition::Closed)]
    );
    assert_eq!(rep.released, 7);
    assert_eq!(s.held_count("payments"), 0);
    let r = claim(&mut s, 61, 10);
    assert_eq!(r.claimed.len(), 7, "released deliveries are due at once");
    for c in &r.claimed {
        assert!(
            c.delivery.held_for >= Duration::from_secs(31),
            "held time is kept: {:?}",
            c.delivery.held_for
        );
    }
}

#[test]
fn a_probe_that_finds_it_unavailable_reopens_for_twice_the_pause() {
    let mut s = store();
    open_breaker(&mut s, 0);
    emit(&mut s, "pay", 1, 0);
    claim(&mut s, 0, 10);
    s.sweep(at(60), LEASE);
    let probe = claim(&mut s, 60, 10).claimed.remove(0);
    let rep = finish(
        &mut s,
        &probe,
        retry("http.503", 200),
        &[("payments", CallVerdict::Unavailable)],
        61,
    )
    .unwrap();
    assert_eq!(
        rep.transitions,
        vec![("payments".to_string(), Transition::Reopened)]
    );
    let b = s.breaker("payments").unwrap();
    assert_eq!(
        (b.state, b.pause, b.opened_at),
        (BreakerState::Open, Duration::from_secs(120), Some(at(61)))
    );
}

#[test]
fn a_probe_that_no_longer_calls_the_provider_gives_the_probe_back() {
    let mut s = store();
    open_breaker(&mut s, 0);
    emit(&mut s, "pay", 2, 0);
    claim(&mut s, 0, 10);
    s.sweep(at(60), LEASE);
    let probe = claim(&mut s, 60, 10).claimed.remove(0);
    finish(&mut s, &probe, Outcome::Succeeded, &[], 61).unwrap();
    let b = s.breaker("payments").unwrap();
    assert_eq!((b.state, b.probe), (BreakerState::Open, None));
    assert_eq!(
        s.sweep(at(62), LEASE).woken.len(),
        1,
        "the next held delivery probes"
    );
}

#[test]
fn a_lost_probe_loses_its_place_when_its_lease_ends() {
    let mut s = store();
    open_breaker(&mut s, 0);
    emit(&mut s, "pay", 2, 0);
    claim(&mut s, 0, 10);
    s.sweep(at(60), LEASE);
    let lost = claim(&mut s, 60, 10).claimed.remove(0);
    assert!(s.sweep(at(119), LEASE).woken.is_empty());
    assert_eq!(s.sweep(at(120), LEASE).woken.len(), 1);
    let r = claim(&mut s, 120, 10);
    // The lost probe's own delivery is also due again (lease ended): one of
    // the two probes, the other is held.
    assert_eq!(r.claimed.len(), 1);
    assert_eq!(r.held.len() + r.claimed.len(), 2);
    assert!(r.lease_expired.contains(&lost.delivery.id));
}

#[test]
fn a_breaker_opening_after_the_claim_holds_the_delivery_before_its_run() {
    let mut s = store();
    emit(&mut s, "pay", 6, 0);
    let r = claim(&mut s, 0, 6);
    for c in &r.claimed[..5] {
        finish(
            &mut s,
            c,
            retry("http.503", 30),
            &[("payments", CallVerdict::Unavailable)],
            1,
        )
        .unwrap();
    }
    let late = &r.claimed[5];
    let held = s.held_before_run(late.delivery.id, &late.connections, at(2));
    assert_eq!(held.as_deref(), Some("payments"));
    s.hold_claimed(late.delivery.id, late.token(), "payments", at(2))
        .unwrap();
    let d = s.delivery(late.delivery.id).unwrap();
    assert_eq!((d.state, d.attempts), (DeliveryState::Held, 0));
}

#[test]
fn one_alert_per_outage_with_the_held_count() {
    let mut s = store();
    open_breaker(&mut s, 0);
    emit(&mut s, "pay", 4, 0);
    claim(&mut s, 0, 10);
    let alerts = s.sweep(at(1), LEASE).alerts;
    assert_eq!(
        alerts,
        vec![Alert {
            connection: "payments".into(),
            since: at(0),
            held: 4
        }]
    );
    assert!(s.sweep(at(2), LEASE).alerts.is_empty());
    assert!(s.sweep(at(600), LEASE).alerts.is_empty());
    assert_eq!(s.alerts().len(), 1);
}

#[test]
fn the_sweep_releases_what_a_closed_breaker_still_holds() {
    let mut s = store();
    open_breaker(&mut s, 0);
    emit(&mut s, "pay", 2, 0);
    claim(&mut s, 0, 10);
    // A delivery that was running when it opened answers: closed, released.
    emit(&mut s, "log", 1, 0);
    // Simulate a release racing a hold: close the breaker behind the store's back.
    let policy = *s.policy();
    s.breaker_mut("payments")
        .record(CallVerdict::Answered, DeliveryId(99), at(3), &policy);
    assert_eq!(s.held_count("payments"), 2);
    assert_eq!(s.sweep(at(4), LEASE).released, 2);
    assert_eq!(s.held_count("payments"), 0);
}

#[test]
fn operator_retry_gives_a_fresh_budget_and_never_reruns_a_committed_run() {
    let mut s = store();
    let ids = emit(&mut s, "log", 2, 0);
    let r = claim(&mut s, 0, 2);
    let parked =
        Outcome::Parked(Failure::new("http.timeout", FailureKind::OutcomeUnknown).record());
    for c in &r.claimed {
        finish(&mut s, c, parked.clone(), &[], 1).unwrap();
    }
    let retried = s.retry(
        &[(ids[0], at(5000)), (DeliveryId(ids[1].0), at(5000))],
        at(4000),
    );
    assert_eq!(retried, ids);
    let d = s.delivery(ids[0]).unwrap();
    assert_eq!(
        (d.state, d.attempts, d.budget_from, d.due_at),
        (DeliveryState::Due, 0, at(4000), at(5000))
    );
    assert!(
        s.retry(&[(ids[0], at(5000))], at(4001)).is_empty(),
        "only failed and parked"
    );
    assert_eq!(
        claim(&mut s, 5000, 10).claimed.len(),
        2,
        "within counts from the retry, not the event"
    );
}

#[test]
fn a_subscriber_gone_from_the_app_fails_as_a_defect() {
    let mut s = store();
    emit(&mut s, "gone", 1, 0);
    let r = claim(&mut s, 0, 1);
    let d = s.delivery(r.gave_up[0]).unwrap();
    assert_eq!(d.last_failure, Some(unknown_subscriber()));
    assert_eq!(d.state, DeliveryState::Failed);
}
