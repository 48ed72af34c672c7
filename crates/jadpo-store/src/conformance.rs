//! The scenarios every store must pass, unchanged: memory, SQLite and
//! PostgreSQL. Each takes a fresh, migrated store. Run them all for a store
//! with [`conformance_tests!`](crate::conformance_tests):
//!
//! ```ignore
//! jadpo_store::conformance_tests!(async { my_fresh_store().await });
//! ```
//!
//! They cover every rule of the seed that touches a store: the claim,
//! fencing, lease expiry, the handled record, the budget given up at the
//! claim, the hold, the probe, the release, one alert per outage, and the
//! operator's retry with a fresh budget.

use crate::types::*;
use crate::Store;
use jadpo_core::breaker::{BreakerState, CallVerdict, Transition};
use jadpo_core::{Alert, Budget, DeliveryId, DeliveryState, Failure, FailureKind, FailureRecord, Outcome, Timestamp};
use std::time::Duration;

pub const LEASE: Duration = Duration::from_secs(60);

pub fn at(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

/// `pay` calls `payments` with the default budget; `log` calls nothing and
/// has two attempts within an hour.
pub fn routes() -> Routes {
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
    routes
}

pub async fn emit<S: Store>(s: &S, subscriber: &str, n: usize, now: i64) -> Vec<DeliveryId> {
    let events: Vec<NewEvent> = (0..n)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: vec![subscriber.into()],
        })
        .collect();
    s.emit(&events, at(now))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect()
}

pub async fn claim<S: Store>(s: &S, now: i64, limit: usize) -> ClaimReport {
    claim_as(s, "w1", now, limit).await
}

pub async fn claim_as<S: Store>(s: &S, worker: &str, now: i64, limit: usize) -> ClaimReport {
    let routes = routes();
    s.claim(&ClaimRequest {
        worker,
        routes: &routes,
        now: at(now),
        limit,
        lease: LEASE,
    })
    .await
    .unwrap()
}

pub async fn finish<S: Store>(
    s: &S,
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
    .await
}

pub fn retry_at(code: &str, now: i64) -> Outcome {
    Outcome::Retry {
        at: at(now),
        failure: FailureRecord::new(code, FailureKind::Unavailable),
    }
}

async fn get<S: Store>(s: &S, id: DeliveryId) -> jadpo_core::Delivery {
    s.delivery(id).await.unwrap().expect("delivery exists")
}

async fn breaker<S: Store>(s: &S, connection: &str) -> BreakerView {
    s.breakers()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.breaker.connection == connection)
        .expect("breaker row")
}

/// Five unavailable attempts open the breaker of `payments` at `now`.
pub async fn open_breaker<S: Store>(s: &S, now: i64) {
    emit(s, "pay", 5, now).await;
    let r = claim(s, now, 5).await;
    assert_eq!(r.claimed.len(), 5);
    for c in &r.claimed {
        finish(
            s,
            c,
            retry_at("http.503", now + 30),
            &[("payments", CallVerdict::Unavailable)],
            now,
        )
        .await
        .unwrap();
    }
    assert_eq!(breaker(s, "payments").await.breaker.state, BreakerState::Open);
}

pub async fn emit_writes_events_and_due_deliveries<S: Store>(s: &S) {
    let events = [NewEvent {
        name: "PaymentReceived".into(),
        payload: r#"{"id":"p1"}"#.into(),
        subscribers: vec!["pay".into(), "log".into()],
    }];
    let emitted = s.emit(&events, at(7)).await.unwrap();
    assert_eq!(emitted.len(), 1);
    assert_eq!(emitted[0].deliveries.len(), 2);
    let e = s.event(emitted[0].event_id).await.unwrap().unwrap();
    assert_eq!(
        (e.name.as_str(), e.payload.as_str(), e.emitted_at),
        ("PaymentReceived", r#"{"id":"p1"}"#, at(7))
    );
    for id in &emitted[0].deliveries {
        let d = get(s, *id).await;
        assert_eq!(
            (d.state, d.attempts, d.due_at, d.budget_from),
            (DeliveryState::Due, 0, at(7), at(7))
        );
        assert_eq!(d.event_id, emitted[0].event_id);
    }
    assert!(s.emit(&[], at(8)).await.unwrap().is_empty());
}

pub async fn claim_takes_due_deliveries_oldest_first_up_to_the_limit<S: Store>(s: &S) {
    let ids = emit(s, "log", 3, 0).await;
    emit(s, "log", 2, 10).await;
    let r = claim(s, 5, 10).await;
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        ids,
        "only what is due, oldest first"
    );
    for c in &r.claimed {
        assert_eq!((c.delivery.state, c.delivery.attempts), (DeliveryState::Running, 1));
        assert_eq!(c.delivery.lease.as_ref().unwrap().until, at(5).plus(LEASE));
        assert_eq!(c.event_name, "E");
    }
    assert_eq!(claim(s, 10, 1).await.claimed.len(), 1);
    assert_eq!(claim(s, 10, 5).await.claimed.len(), 1);
    assert!(claim(s, 10, 5).await.claimed.is_empty(), "nothing is claimed twice");
}

pub async fn a_late_worker_whose_lease_was_taken_over_changes_nothing<S: Store>(s: &S) {
    emit(s, "log", 1, 0).await;
    let first = claim_as(s, "w1", 0, 1).await.claimed.remove(0);
    // The first worker is paused past its lease; another takes it over.
    let second = claim_as(s, "w2", 60, 1).await.claimed.remove(0);
    assert_ne!(first.token(), second.token());
    assert_eq!(second.delivery.last_failure, Some(FailureRecord::lease_expired()));
    assert_eq!(second.delivery.attempts, 2);
    let id = first.delivery.id;
    assert_eq!(
        finish(s, &first, Outcome::Succeeded, &[], 61).await,
        Err(StoreError::LeaseLost(id))
    );
    assert_eq!(
        s.hold_claimed(id, first.token(), "payments", at(61)).await,
        Err(StoreError::LeaseLost(id))
    );
    assert_eq!(
        s.give_back(id, first.token(), at(61)).await,
        Err(StoreError::LeaseLost(id))
    );
    let failed = Outcome::Failed(FailureRecord::new("crm.rejected", FailureKind::Rejected));
    finish(s, &second, failed.clone(), &[], 62).await.unwrap();
    let d = get(s, id).await;
    assert_eq!(
        (d.state, d.last_failure.clone()),
        (DeliveryState::Failed, failed.failure().cloned())
    );
    assert_eq!(
        finish(s, &second, Outcome::Succeeded, &[], 63).await,
        Err(StoreError::LeaseLost(id)),
        "a finished delivery takes no second finish"
    );
}

pub async fn a_spent_budget_fails_at_the_claim_without_counting_an_attempt<S: Store>(s: &S) {
    emit(s, "log", 1, 0).await;
    for t in [0, 100] {
        let c = claim(s, t, 1).await.claimed.remove(0);
        finish(s, &c, retry_at("http.503", t + 50), &[], t).await.unwrap();
    }
    let r = claim(s, 150, 1).await;
    assert!(r.claimed.is_empty());
    assert_eq!(r.gave_up.len(), 1);
    let d = get(s, r.gave_up[0]).await;
    assert_eq!((d.state, d.attempts), (DeliveryState::Failed, 2));
    assert_eq!(d.last_failure.as_ref().map(|f| f.code.as_str()), Some("http.503"));
    assert_eq!(d.finished_at, Some(at(150)));
}

pub async fn never_tried_in_time_fails_as_deadline_exceeded<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let r = claim(s, 3601, 1).await;
    assert_eq!(r.gave_up, ids);
    assert_eq!(
        get(s, ids[0]).await.last_failure,
        Some(FailureRecord::deadline_exceeded())
    );
}

pub async fn attempts_are_recorded_with_code_and_kind<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 1).await.claimed.remove(0);
    finish(s, &c, retry_at("http.503", 40), &[], 2).await.unwrap();
    let c = claim(s, 40, 1).await.claimed.remove(0);
    finish(s, &c, Outcome::Succeeded, &[], 41).await.unwrap();
    let history = s.attempts(ids[0]).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        (history[0].attempt, history[0].state, history[0].ended_at),
        (1, DeliveryState::Due, at(2))
    );
    assert_eq!(
        history[0].failure,
        Some(FailureRecord::new("http.503", FailureKind::Unavailable))
    );
    assert_eq!(
        (history[1].attempt, history[1].state, history[1].failure.clone()),
        (2, DeliveryState::Succeeded, None)
    );
    assert_eq!(get(s, ids[0]).await.state, DeliveryState::Succeeded);
}

pub async fn a_handled_record_makes_a_lost_run_succeeded_without_running_again<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 1).await.claimed.remove(0);
    finish(s, &c, Outcome::Succeeded, &[], 1).await.unwrap();
    // An operator cannot make a committed run run again either.
    assert!(s.retry(&[(ids[0], at(2))], at(2)).await.unwrap().is_empty());
    assert_eq!(get(s, ids[0]).await.state, DeliveryState::Succeeded);
}

pub async fn held_while_open_then_probe_then_release<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    let waiting = emit(s, "pay", 3, 1).await;
    let r = claim(s, 1, 10).await;
    assert!(r.claimed.is_empty());
    assert_eq!(r.held, waiting);
    for id in &waiting {
        let d = get(s, *id).await;
        assert_eq!(
            (d.state, d.attempts),
            (DeliveryState::Held, 0),
            "held spends no attempt"
        );
        assert_eq!(
            d.held.as_ref().map(|h| (h.connection.as_str(), h.since)),
            Some(("payments", at(1)))
        );
    }
    let held = s
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Held),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(held.len(), 3);
    // The first five come due at 30 s and are held too.
    assert_eq!(claim(s, 30, 10).await.held.len(), 5);
    assert_eq!(breaker(s, "payments").await.held, 8);
    // After the minute's pause the sweep wakes the longest held as the probe.
    assert!(s.sweep(at(59), LEASE).await.unwrap().woken.is_empty());
    let sw = s.sweep(at(60), LEASE).await.unwrap();
    assert_eq!(sw.woken, vec![waiting[0]]);
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    assert_eq!(probe.delivery.id, waiting[0]);
    assert_eq!(probe.probe_for, vec!["payments".to_string()]);
    assert_eq!(breaker(s, "payments").await.breaker.state, BreakerState::Probing);
    let rep = finish(
        s,
        &probe,
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        61,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Closed)]);
    assert_eq!(rep.released, 7);
    let b = breaker(s, "payments").await;
    assert_eq!((b.breaker.state, b.held), (BreakerState::Closed, 0));
    let r = claim(s, 61, 10).await;
    assert_eq!(r.claimed.len(), 7, "released deliveries are due at once");
    for c in &r.claimed {
        assert!(
            c.delivery.held_for >= Duration::from_secs(31),
            "held time kept: {:?}",
            c.delivery.held_for
        );
        assert!(c.delivery.held.is_none());
    }
}

pub async fn the_first_claimed_after_the_pause_is_the_probe<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    let ids = emit(s, "pay", 2, 61).await;
    // The five that opened it came due at 30 s: the oldest due is claimed
    // first and probes; the six others are held behind it.
    let r = claim(s, 61, 10).await;
    assert_eq!(r.claimed.len(), 1, "one probe at a time");
    assert_eq!(r.claimed[0].probe_for, vec!["payments".to_string()]);
    assert_eq!(r.held.len(), 6);
    assert!(r.held.contains(&ids[0]) && r.held.contains(&ids[1]));
}

pub async fn a_probe_that_finds_it_unavailable_reopens_for_twice_the_pause<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 1, 0).await;
    claim(s, 0, 10).await;
    s.sweep(at(60), LEASE).await.unwrap();
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    let rep = finish(
        s,
        &probe,
        retry_at("http.503", 200),
        &[("payments", CallVerdict::Unavailable)],
        61,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Reopened)]);
    let b = breaker(s, "payments").await.breaker;
    assert_eq!(
        (b.state, b.pause, b.opened_at),
        (BreakerState::Open, Duration::from_secs(120), Some(at(61)))
    );
}

pub async fn a_probe_that_no_longer_calls_the_provider_gives_the_probe_back<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 2, 0).await;
    claim(s, 0, 10).await;
    s.sweep(at(60), LEASE).await.unwrap();
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    finish(s, &probe, Outcome::Succeeded, &[], 61).await.unwrap();
    let b = breaker(s, "payments").await.breaker;
    assert_eq!((b.state, b.probe), (BreakerState::Open, None));
    assert_eq!(
        s.sweep(at(62), LEASE).await.unwrap().woken.len(),
        1,
        "the next held delivery probes"
    );
}

pub async fn a_lost_probe_loses_its_place_when_its_lease_ends<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 2, 0).await;
    claim(s, 0, 10).await;
    s.sweep(at(60), LEASE).await.unwrap();
    let lost = claim(s, 60, 10).await.claimed.remove(0);
    assert!(s.sweep(at(119), LEASE).await.unwrap().woken.is_empty());
    assert_eq!(s.sweep(at(120), LEASE).await.unwrap().woken.len(), 1);
    let r = claim(s, 120, 10).await;
    assert_eq!(r.claimed.len(), 1, "still one probe");
    assert_eq!(r.held.len() + r.claimed.len(), 2);
    assert!(r.lease_expired.contains(&lost.delivery.id));
}

pub async fn a_breaker_opening_after_the_claim_holds_before_the_run<S: Store>(s: &S) {
    emit(s, "pay", 6, 0).await;
    let r = claim(s, 0, 6).await;
    for c in &r.claimed[..5] {
        finish(
            s,
            c,
            retry_at("http.503", 30),
            &[("payments", CallVerdict::Unavailable)],
            1,
        )
        .await
        .unwrap();
    }
    let late = &r.claimed[5];
    let b = breaker(s, "payments").await.breaker;
    assert!(!b.lets_run(late.delivery.id, at(2)));
    s.hold_claimed(late.delivery.id, late.token(), "payments", at(2))
        .await
        .unwrap();
    let d = get(s, late.delivery.id).await;
    assert_eq!(
        (d.state, d.attempts),
        (DeliveryState::Held, 0),
        "its attempt is given back"
    );
}

pub async fn a_run_under_way_when_it_opened_closes_it_with_its_answer<S: Store>(s: &S) {
    emit(s, "pay", 6, 0).await;
    let r = claim(s, 0, 6).await;
    for c in &r.claimed[..5] {
        finish(
            s,
            c,
            retry_at("http.503", 30),
            &[("payments", CallVerdict::Unavailable)],
            1,
        )
        .await
        .unwrap();
    }
    let more = emit(s, "pay", 1, 2).await;
    assert_eq!(claim(s, 2, 1).await.held, more);
    let rep = finish(
        s,
        &r.claimed[5],
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        3,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Closed)]);
    assert_eq!(rep.released, 1);
    assert_eq!(get(s, more[0]).await.state, DeliveryState::Due);
}

pub async fn one_alert_per_outage_with_the_held_count<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 4, 0).await;
    claim(s, 0, 10).await;
    let alerts = s.sweep(at(1), LEASE).await.unwrap().alerts;
    assert_eq!(
        alerts,
        vec![Alert {
            connection: "payments".into(),
            since: at(0),
            held: 4
        }]
    );
    assert!(s.sweep(at(2), LEASE).await.unwrap().alerts.is_empty());
    assert!(s.sweep(at(600), LEASE).await.unwrap().alerts.is_empty());
    assert!(breaker(s, "payments").await.breaker.alert_raised);
}

pub async fn give_back_makes_a_claimed_delivery_due_without_spending<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 1).await.claimed.remove(0);
    s.give_back(c.delivery.id, c.token(), at(1)).await.unwrap();
    let d = get(s, ids[0]).await;
    assert_eq!((d.state, d.attempts, d.due_at), (DeliveryState::Due, 0, at(1)));
    assert!(d.lease.is_none());
}

pub async fn operator_retry_gives_a_fresh_budget<S: Store>(s: &S) {
    let ids = emit(s, "log", 2, 0).await;
    let r = claim(s, 0, 2).await;
    let parked = Outcome::Parked(Failure::new("http.timeout", FailureKind::OutcomeUnknown).record());
    for c in &r.claimed {
        finish(s, c, parked.clone(), &[], 1).await.unwrap();
    }
    assert_eq!(get(s, ids[0]).await.state, DeliveryState::Parked);
    let retried = s
        .retry(&[(ids[0], at(5000)), (ids[1], at(5001))], at(4000))
        .await
        .unwrap();
    assert_eq!(retried, ids);
    let d = get(s, ids[0]).await;
    assert_eq!(
        (d.state, d.attempts, d.budget_from, d.due_at),
        (DeliveryState::Due, 0, at(4000), at(5000))
    );
    assert_eq!(d.finished_at, None);
    assert!(
        s.retry(&[(ids[0], at(5000))], at(4001)).await.unwrap().is_empty(),
        "only failed and parked"
    );
    assert_eq!(
        claim(s, 5001, 10).await.claimed.len(),
        2,
        "within counts from the retry, not the event"
    );
}

pub async fn a_subscriber_gone_from_the_app_fails_as_a_defect<S: Store>(s: &S) {
    let ids = emit(s, "gone", 1, 0).await;
    let r = claim(s, 0, 1).await;
    assert_eq!(r.gave_up, ids);
    let d = get(s, ids[0]).await;
    assert_eq!(
        (d.state, d.last_failure.clone()),
        (DeliveryState::Failed, Some(unknown_subscriber()))
    );
}

pub async fn list_filters_and_orders_newest_first<S: Store>(s: &S) {
    let logs = emit(s, "log", 3, 0).await;
    let pays = emit(s, "pay", 2, 1).await;
    let all = s.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(
        all.iter().map(|d| d.id).collect::<Vec<_>>(),
        [pays[1], pays[0], logs[2], logs[1], logs[0]]
    );
    let f = DeliveryFilter {
        subscriber: Some("log".into()),
        limit: Some(2),
        ..Default::default()
    };
    assert_eq!(
        s.list(&f).await.unwrap().iter().map(|d| d.id).collect::<Vec<_>>(),
        [logs[2], logs[1]]
    );
    let event = get(s, pays[0]).await.event_id;
    let f = DeliveryFilter {
        event: Some(event),
        ..Default::default()
    };
    assert_eq!(s.list(&f).await.unwrap().len(), 1);
    let f = DeliveryFilter {
        state: Some(DeliveryState::Failed),
        ..Default::default()
    };
    assert!(s.list(&f).await.unwrap().is_empty());
    assert!(s.delivery(DeliveryId(999_999)).await.unwrap().is_none());
}

pub async fn prune_deletes_old_finished_deliveries_in_batches_and_nothing_else<S: Store>(s: &S) {
    let old = emit(s, "log", 3, 0).await;
    let r = claim(s, 0, 3).await;
    for c in &r.claimed {
        finish(s, c, Outcome::Succeeded, &[], 10).await.unwrap();
    }
    // Old but never finished: a due one, a running one, a held one.
    let due = emit(s, "log", 1, 0).await;
    open_breaker(s, 0).await;
    let held = emit(s, "pay", 1, 0).await;
    claim(s, 0, 100).await;
    let recent = emit(s, "log", 1, 500).await;
    let c = claim(s, 500, 1).await.claimed.remove(0);
    finish(s, &c, Outcome::Succeeded, &[], 501).await.unwrap();

    assert_eq!(s.prune(at(100), 2).await.unwrap(), 2, "bounded by the batch");
    assert_eq!(s.prune(at(100), 2).await.unwrap(), 1);
    assert_eq!(s.prune(at(100), 2).await.unwrap(), 0);
    for id in &old {
        assert!(s.delivery(*id).await.unwrap().is_none());
        assert!(s.attempts(*id).await.unwrap().is_empty());
    }
    for id in due.iter().chain(&held).chain(&recent) {
        assert!(
            s.delivery(*id).await.unwrap().is_some(),
            "delivery {id} was not finished long enough"
        );
    }
    // The five that opened the breaker are due again, not finished: kept.
    assert_eq!(s.list(&DeliveryFilter::default()).await.unwrap().len(), 8);
}

pub async fn finish_batch_fences_each_delivery_on_its_own<S: Store>(s: &S) {
    let ids = emit(s, "log", 3, 0).await;
    let first = claim(s, 0, 3).await.claimed;
    // The third is taken over by another worker after its lease ended.
    let r = claim_as(s, "w2", 60, 3).await;
    assert_eq!(r.claimed.len(), 3);
    let fin = |c: &Claimed, outcome: Outcome| Finish {
        id: c.delivery.id,
        token: c.token(),
        outcome,
        calls: vec![],
        probe_for: vec![],
        started_at: at(60),
        now: at(61),
    };
    let batch = [
        fin(&r.claimed[0], Outcome::Succeeded),
        fin(&first[2], Outcome::Succeeded),
        fin(&r.claimed[1], retry_at("http.503", 90)),
    ];
    let results = s.finish_batch(&batch).await.unwrap();
    assert!(results[0].is_ok());
    assert_eq!(results[1], Err(StoreError::LeaseLost(ids[2])));
    assert!(results[2].is_ok());
    assert_eq!(get(s, ids[0]).await.state, DeliveryState::Succeeded);
    assert_eq!(get(s, ids[1]).await.state, DeliveryState::Due);
    assert_eq!(
        get(s, ids[2]).await.state,
        DeliveryState::Running,
        "the late worker's write changed nothing"
    );
    assert!(s.finish_batch(&[]).await.unwrap().is_empty());
}

pub async fn counts_give_deliveries_by_state<S: Store>(s: &S) {
    assert!(s.counts().await.unwrap().is_empty());
    emit(s, "log", 3, 0).await;
    let c = claim(s, 0, 1).await.claimed.remove(0);
    finish(s, &c, Outcome::Succeeded, &[], 1).await.unwrap();
    claim(s, 1, 1).await;
    let counts = s.counts().await.unwrap();
    assert_eq!(counts.get(&DeliveryState::Succeeded), Some(&1));
    assert_eq!(counts.get(&DeliveryState::Running), Some(&1));
    assert_eq!(counts.get(&DeliveryState::Due), Some(&1));
    assert_eq!(counts.get(&DeliveryState::Failed), None);
}

/// One `#[tokio::test]` per scenario, each with a fresh store from `$make`
/// (an expression giving a future of a migrated store).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            emit_writes_events_and_due_deliveries,
            claim_takes_due_deliveries_oldest_first_up_to_the_limit,
            a_late_worker_whose_lease_was_taken_over_changes_nothing,
            a_spent_budget_fails_at_the_claim_without_counting_an_attempt,
            never_tried_in_time_fails_as_deadline_exceeded,
            attempts_are_recorded_with_code_and_kind,
            a_handled_record_makes_a_lost_run_succeeded_without_running_again,
            held_while_open_then_probe_then_release,
            the_first_claimed_after_the_pause_is_the_probe,
            a_probe_that_finds_it_unavailable_reopens_for_twice_the_pause,
            a_probe_that_no_longer_calls_the_provider_gives_the_probe_back,
            a_lost_probe_loses_its_place_when_its_lease_ends,
            a_breaker_opening_after_the_claim_holds_before_the_run,
            a_run_under_way_when_it_opened_closes_it_with_its_answer,
            one_alert_per_outage_with_the_held_count,
            give_back_makes_a_claimed_delivery_due_without_spending,
            operator_retry_gives_a_fresh_budget,
            a_subscriber_gone_from_the_app_fails_as_a_defect,
            list_filters_and_orders_newest_first,
            prune_deletes_old_finished_deliveries_in_batches_and_nothing_else,
            finish_batch_fences_each_delivery_on_its_own,
            counts_give_deliveries_by_state,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let store = $make.await;
                $crate::conformance::$name(&store).await;
            }
        )*
    };
}

pub async fn schedules_are_claimed_once_when_due_and_fenced<S: crate::ScheduleStore>(s: &S) {
    let all = [("nightly".to_string(), at(100))];
    assert!(
        s.claim_schedules(&all, "w1", at(99), LEASE).await.unwrap().is_empty(),
        "not due yet"
    );
    let c = s.claim_schedules(&all, "w1", at(100), LEASE).await.unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].due_at, c[0].lost_run), (at(100), false));
    assert!(
        s.claim_schedules(&all, "w2", at(101), LEASE).await.unwrap().is_empty(),
        "one run at a time"
    );
    let token = c[0].state.lease.as_ref().unwrap().token;
    assert_eq!(s.finish_schedule("nightly", token, None, at(3700)).await.unwrap(), None);
    assert!(matches!(
        s.finish_schedule("nightly", token, None, at(3700)).await,
        Err(StoreError::ScheduleLeaseLost(_))
    ));
    let state = s.schedules().await.unwrap().remove(0);
    assert_eq!(
        (state.next_due, state.lease.clone(), state.consecutive_failures),
        (at(3700), None, 0)
    );
    assert!(
        s.claim_schedules(&all, "w1", at(3699), LEASE).await.unwrap().is_empty(),
        "its next due time is its retry"
    );
}

pub async fn a_schedule_run_lost_with_its_worker_ends_as_lease_expired<S: crate::ScheduleStore>(s: &S) {
    let all = [("sync".to_string(), at(0))];
    let lost = s.claim_schedules(&all, "w1", at(0), LEASE).await.unwrap().remove(0);
    let again = s.claim_schedules(&all, "w2", at(60), LEASE).await.unwrap().remove(0);
    assert!(again.lost_run);
    assert_eq!(again.state.last_failure, Some(FailureRecord::lease_expired()));
    let old = lost.state.lease.as_ref().unwrap().token;
    assert!(matches!(
        s.finish_schedule("sync", old, None, at(500)).await,
        Err(StoreError::ScheduleLeaseLost(_))
    ));
}

pub async fn a_schedule_failing_three_runs_in_a_row_raises_one_alert<S: crate::ScheduleStore>(s: &S) {
    let all = [("sync".to_string(), at(0))];
    let mut alerts = Vec::new();
    for i in 0..4 {
        let c = s
            .claim_schedules(&all, "w", at(i * 100), LEASE)
            .await
            .unwrap()
            .remove(0);
        let token = c.state.lease.as_ref().unwrap().token;
        let failure = Some(FailureRecord::new("http.503", FailureKind::Unavailable));
        alerts.extend(
            s.finish_schedule("sync", token, failure, at(i * 100 + 100))
                .await
                .unwrap(),
        );
    }
    assert_eq!(alerts.len(), 1);
    assert_eq!((alerts[0].schedule.as_str(), alerts[0].failures), ("sync", 3));
}

/// The schedule scenarios, for stores that keep schedules.
#[macro_export]
macro_rules! schedule_conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            schedules_are_claimed_once_when_due_and_fenced,
            a_schedule_run_lost_with_its_worker_ends_as_lease_expired,
            a_schedule_failing_three_runs_in_a_row_raises_one_alert,
        );
    };
}
