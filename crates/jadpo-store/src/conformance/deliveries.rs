//! Scenarios of the claim, fencing, budgets, handled records, operator
//! retries, listing and retention.

use super::*;
use crate::Store;
use jadpo_core::{DeliveryId, DeliveryState, Failure, FailureKind, FailureRecord, Outcome};

/// An emit writes the event and one delivery per subscriber, due at once, its
/// budget counted from then; an empty emit writes nothing.
pub async fn emit_writes_events_and_due_deliveries<S: Store>(s: &S) {
    let events = [NewEvent {
        name: "PaymentReceived".into(),
        payload: r#"{"id":"p1"}"#.into(),
        subscribers: vec!["pay".into(), "log".into()],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
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

/// A claim takes only what is due, oldest first, at most its limit, each
/// running under a new lease with its attempt counted; nothing is claimed
/// twice.
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

/// Lost leases and due deliveries are one queue, by time: a lease that ran
/// out at 60 comes between a delivery due at 30 and one due at 70.
pub async fn a_claim_takes_lost_leases_and_due_deliveries_together_by_time<S: Store>(s: &S) {
    let lost = emit(s, "log", 1, 0).await[0];
    assert_eq!(claim_as(s, "killed", 0, 1).await.claimed.len(), 1);
    let early = emit(s, "log", 1, 30).await[0];
    let late = emit(s, "log", 1, 70).await[0];
    let r = claim(s, 100, 2).await;
    assert_eq!(
        r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
        vec![early, lost],
        "due at 30, then the lease that ended at 60; the one due at 70 waits"
    );
    assert_eq!(r.lease_expired, vec![lost]);
    let r = claim(s, 100, 10).await;
    assert_eq!(r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(), vec![late]);
}

/// A worker paused past its lease is taken over, its last failure
/// `lease_expired`; its late finish, hold and give-back are refused with
/// `LeaseLost`, and a finished delivery takes no second finish.
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

/// A delivery whose attempts are spent fails at the claim without running and
/// without counting an attempt, keeping its last failure.
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

/// A delivery never tried within its `within:` fails at the claim as
/// `deadline_exceeded`.
pub async fn never_tried_in_time_fails_as_deadline_exceeded<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let r = claim(s, 3601, 1).await;
    assert_eq!(r.gave_up, ids);
    assert_eq!(
        get(s, ids[0]).await.last_failure,
        Some(FailureRecord::deadline_exceeded())
    );
}

/// A batch may finish one delivery twice (an outcome sent again): the
/// first is written, the second refused by the lease it no longer holds,
/// and one attempt is recorded. Planned from the claimed row each carries,
/// the second must not be written from it.
pub async fn a_batch_that_finishes_one_delivery_twice_writes_the_first<S: Store>(s: &S) {
    let id = emit(s, "log", 1, 0).await[0];
    let c = claim(s, 0, 1).await.claimed.remove(0);
    let results = s
        .finish_batch(&[
            c.finish(Outcome::Succeeded, at(1), at(2)),
            c.finish(retry_at("http.503", 40), at(1), at(3)),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(results[1], Err(StoreError::LeaseLost(id)));
    let d = get(s, id).await;
    assert_eq!(
        (d.state, d.finished_at, d.last_failure),
        (DeliveryState::Succeeded, Some(at(2)), None)
    );
    assert_eq!(s.attempts(id).await.unwrap().len(), 1);
}

/// Each attempt is recorded with its number, its times, the state it left and
/// its failure's code and kind, whether the finish carried its claimed row or
/// not.
pub async fn attempts_are_recorded_with_code_and_kind<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 1).await.claimed.remove(0);
    finish(s, &c, retry_at("http.503", 40), &[], 2).await.unwrap();
    let c = claim(s, 40, 1).await.claimed.remove(0);
    s.finish(&Finish {
        claimed: None,
        ..c.finish(Outcome::Succeeded, at(40), at(43))
    })
    .await
    .unwrap();
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
    assert_eq!((history[1].started_at, history[1].ended_at), (at(40), at(43)));
    assert!(history.iter().all(|a| a.delivery == ids[0]));
    assert_eq!(get(s, ids[0]).await.state, DeliveryState::Succeeded);
}

/// A run commits its effects (the handled record) and its worker is lost
/// before the finish: the next claim takes the lease over and makes it
/// `succeeded` without running it, attempts unchanged; the lost worker's
/// late writes change nothing.
pub async fn a_handled_record_makes_a_lost_run_succeeded_without_running_again<S: Store>(s: &S) {
    let id = emit(s, "log", 1, 0).await[0];
    let lost = claim_as(s, "w1", 0, 1).await.claimed.remove(0);
    s.commit_handled(id, lost.token(), at(1)).await.unwrap();
    s.commit_handled(id, lost.token(), at(2))
        .await
        .expect("a second commit of the same run keeps the first");
    let running = get(s, id).await;
    assert_eq!((running.state, running.attempts), (DeliveryState::Running, 1));
    // The worker dies here. After its lease, another worker's claim finds
    // the handled record and does not run it.
    let r = claim_as(s, "w2", 60, 10).await;
    assert!(r.claimed.is_empty(), "a committed run must not run again: {r:?}");
    assert_eq!(r.succeeded, vec![id]);
    assert_eq!(r.lease_expired, vec![id]);
    let d = get(s, id).await;
    assert_eq!(
        (d.state, d.attempts, d.finished_at, d.lease.is_none()),
        (DeliveryState::Succeeded, 1, Some(at(60)), true)
    );
    assert_eq!(
        finish(s, &lost, Outcome::Succeeded, &[], 61).await,
        Err(StoreError::LeaseLost(id))
    );
    assert_eq!(
        s.commit_handled(id, lost.token(), at(61)).await,
        Err(StoreError::LeaseLost(id))
    );
    // An operator cannot make a committed run run again either.
    assert!(s.retry(&[(id, at(62))], at(62)).await.unwrap().is_empty());
    assert_eq!(get(s, id).await.state, DeliveryState::Succeeded);
    assert!(claim(s, 62, 10).await.claimed.is_empty());
}

/// Without a handled record, the same lost run runs again: the record, not
/// the lost lease, is what stops it.
pub async fn a_lost_run_without_a_handled_record_runs_again<S: Store>(s: &S) {
    let id = emit(s, "log", 1, 0).await[0];
    let lost = claim_as(s, "w1", 0, 1).await.claimed.remove(0);
    let r = claim_as(s, "w2", 60, 10).await;
    assert_eq!(r.claimed.iter().map(|c| c.delivery.id).collect::<Vec<_>>(), vec![id]);
    assert!(r.succeeded.is_empty());
    assert_eq!(
        s.commit_handled(id, lost.token(), at(61)).await,
        Err(StoreError::LeaseLost(id)),
        "the lost worker's commit is refused once its lease was taken over"
    );
    s.commit_handled(id, r.claimed[0].token(), at(61)).await.unwrap();
}

/// A delivery given back unstarted is due at once, its attempt not spent and
/// its lease gone.
pub async fn give_back_makes_a_claimed_delivery_due_without_spending<S: Store>(s: &S) {
    let ids = emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 1).await.claimed.remove(0);
    s.give_back(c.delivery.id, c.token(), at(1)).await.unwrap();
    let d = get(s, ids[0]).await;
    assert_eq!((d.state, d.attempts, d.due_at), (DeliveryState::Due, 0, at(1)));
    assert!(d.lease.is_none());
}

/// An operator's retry makes failed and parked deliveries due at their times
/// with a fresh budget from the retry; other deliveries are left alone.
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

/// A delivery whose subscriber is gone from the app fails at the claim as
/// `subscriber.unknown`.
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

/// A listing is newest first; it filters by subscriber, event and state, stops
/// at its limit and pages with `before`.
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
    // The next page: older than the last one shown.
    let next = DeliveryFilter {
        before: Some(logs[1]),
        ..f.clone()
    };
    assert_eq!(
        s.list(&next).await.unwrap().iter().map(|d| d.id).collect::<Vec<_>>(),
        [logs[0]]
    );
    let older = DeliveryFilter {
        before: Some(pays[0]),
        limit: Some(10),
        ..Default::default()
    };
    assert_eq!(
        s.list(&older).await.unwrap().iter().map(|d| d.id).collect::<Vec<_>>(),
        [logs[2], logs[1], logs[0]]
    );
    let event = get(s, pays[0]).await.event_id;
    let f = DeliveryFilter {
        event: Some(event),
        ..Default::default()
    };
    assert_eq!(s.list(&f).await.unwrap().len(), 1);
    // An event with two subscribers, between two others.
    let event = |subscribers: &[&str]| crate::NewEvent {
        name: "E".into(),
        payload: "{}".into(),
        subscribers: subscribers.iter().map(|s| s.to_string()).collect(),
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    let emitted = s
        .emit(&[event(&["log"]), event(&["log", "pay"]), event(&["pay"])], at(2))
        .await
        .unwrap();
    let f = DeliveryFilter {
        event: Some(emitted[1].event_id),
        ..Default::default()
    };
    let mut both = emitted[1].deliveries.clone();
    both.reverse();
    assert_eq!(s.list(&f).await.unwrap().iter().map(|d| d.id).collect::<Vec<_>>(), both);
    let f = DeliveryFilter {
        state: Some(DeliveryState::Failed),
        ..Default::default()
    };
    assert!(s.list(&f).await.unwrap().is_empty());
    assert!(s.delivery(DeliveryId(999_999)).await.unwrap().is_none());
}

/// Retention deletes deliveries finished before its time (succeeded, failed or
/// parked), with their attempts, at most a batch at a time; due, held, running
/// and recent ones stay.
pub async fn prune_deletes_old_finished_deliveries_in_batches_and_nothing_else<S: Store>(s: &S) {
    // Claimed and never finished: running, its lease long over by the
    // prune, as a lost worker leaves it.
    let running = emit(s, "log", 1, 0).await;
    assert_eq!(claim(s, 0, 1).await.claimed[0].delivery.id, running[0]);
    // Old and finished every way: succeeded, failed, parked (an operator's
    // to look at, but kept only as long as the rest).
    let old = emit(s, "log", 5, 0).await;
    let r = claim(s, 0, 5).await;
    let gone = FailureRecord::new("http.410", FailureKind::Rejected);
    let ends = [
        Outcome::Succeeded,
        Outcome::Succeeded,
        Outcome::Succeeded,
        Outcome::Failed(gone.clone()),
        Outcome::Parked(gone),
    ];
    for (c, end) in r.claimed.iter().zip(ends) {
        finish(s, c, end, &[], 10).await.unwrap();
    }
    // Old but never finished: a due one, a held one (and the running one).
    let due = emit(s, "log", 1, 0).await;
    open_breaker(s, 0).await;
    let held = emit(s, "pay", 1, 0).await;
    claim(s, 0, 100).await;
    let recent = emit(s, "log", 1, 500).await;
    let c = claim(s, 500, 1).await.claimed.remove(0);
    finish(s, &c, Outcome::Succeeded, &[], 501).await.unwrap();

    assert_eq!(s.prune(at(100), 2).await.unwrap(), 2, "bounded by the batch");
    assert_eq!(s.prune(at(100), 2).await.unwrap(), 2);
    assert_eq!(s.prune(at(100), 2).await.unwrap(), 1);
    assert_eq!(s.prune(at(100), 2).await.unwrap(), 0);
    for id in &old {
        assert!(s.delivery(*id).await.unwrap().is_none());
        assert!(s.attempts(*id).await.unwrap().is_empty());
    }
    assert_eq!(get(s, running[0]).await.state, DeliveryState::Running);
    for id in due.iter().chain(&held).chain(&recent).chain(&running) {
        assert!(
            s.delivery(*id).await.unwrap().is_some(),
            "delivery {id} was not finished long enough"
        );
    }
    // The five that opened the breaker are due again, not finished: kept,
    // beside the due, held, recent and running ones.
    assert_eq!(s.list(&DeliveryFilter::default()).await.unwrap().len(), 9);
}

/// Retention deletes old events no delivery refers to; recent ones, and any a
/// delivery still refers to, stay.
pub async fn prune_deletes_old_events_no_delivery_refers_to<S: Store>(s: &S) {
    let none = NewEvent {
        name: "Nobody".into(),
        payload: "{}".into(),
        subscribers: vec![],
        idempotency_key: None,
        trace: None,
        keys: Default::default(),
    };
    let old = s.emit(&[none.clone(), none.clone()], at(0)).await.unwrap();
    let recent = s.emit(&[none], at(500)).await.unwrap();
    let kept = emit(s, "log", 1, 0).await;
    s.prune(at(100), 10).await.unwrap();
    for e in &old {
        assert!(
            s.event(e.event_id).await.unwrap().is_none(),
            "an old event with no delivery is pruned"
        );
    }
    assert!(
        s.event(recent[0].event_id).await.unwrap().is_some(),
        "a recent one is kept"
    );
    let d = s.delivery(kept[0]).await.unwrap().unwrap();
    assert!(
        s.event(d.event_id).await.unwrap().is_some(),
        "an event a delivery still refers to is kept"
    );
}

/// In a batch of finishes, one whose lease was taken over is refused alone and
/// the others are written.
pub async fn finish_batch_fences_each_delivery_on_its_own<S: Store>(s: &S) {
    let ids = emit(s, "log", 3, 0).await;
    let first = claim(s, 0, 3).await.claimed;
    // The third is taken over by another worker after its lease ended.
    let r = claim_as(s, "w2", 60, 3).await;
    assert_eq!(r.claimed.len(), 3);
    let fin = |c: &Claimed, outcome: Outcome| Finish {
        claimed: None,
        ..c.finish(outcome, at(60), at(61))
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

/// Counts give deliveries by state, leaving out states with none; capped counts
/// stop each state at the cap.
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
    assert_eq!(s.counts_up_to(100).await.unwrap(), counts, "under the cap, the same");
    // Capped: each state stops at the cap.
    emit(s, "log", 4, 2).await;
    let failing = claim(s, 2, 3).await.claimed;
    for c in &failing {
        let failure = FailureRecord::new("http.400", FailureKind::Rejected);
        finish(s, c, Outcome::Failed(failure), &[], 3).await.unwrap();
    }
    let capped = s.counts_up_to(2).await.unwrap();
    assert_eq!(capped.get(&DeliveryState::Due), Some(&2));
    assert_eq!(capped.get(&DeliveryState::Failed), Some(&2), "3 failed, capped");
    assert_eq!(capped.get(&DeliveryState::Succeeded), Some(&1));
    assert_eq!(capped.get(&DeliveryState::Parked), None);
}
