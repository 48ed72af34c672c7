use super::*;
use crate::breaker::Gate;
use crate::delivery::{DeliveryId, EventId, LeaseToken};
use crate::failure::FailureKind;
use crate::time::{DAY, HOUR, MINUTE};

fn at(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

fn due(attempts: u32) -> Delivery {
    let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(0));
    d.attempts = attempts;
    d
}

fn lease(until: i64) -> Lease {
    Lease {
        owner: "w1".into(),
        token: LeaseToken(9),
        until: at(until),
    }
}

fn decide_with(d: &Delivery, handled: bool, gates: &[(&str, Gate)], now: i64) -> Claim {
    decide(ClaimInput {
        delivery: d,
        budget: Budget::DEFAULT,
        handled,
        gates,
        now: at(now),
    })
}

fn run(probe_for: &[&str]) -> ClaimDecision {
    ClaimDecision::Run {
        probe_for: probe_for.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_fresh_delivery_runs() {
    let c = decide_with(&due(0), false, &[], 0);
    assert_eq!(
        c,
        Claim {
            lease_expired: false,
            decision: run(&[])
        }
    );
}

#[test]
fn a_handled_record_found_first_makes_it_succeeded() {
    // Even with the budget spent and a breaker open: the run committed.
    let d = due(10);
    let c = decide_with(&d, true, &[("payments", Gate::Hold)], 2 * 86_400);
    assert_eq!(c.decision, ClaimDecision::Succeed);
}

#[test]
fn past_its_attempts_it_fails_without_running_keeping_the_last_failure() {
    let mut d = due(10);
    d.last_failure = Some(FailureRecord::new("http.503", FailureKind::Unavailable));
    let c = decide_with(&d, false, &[], 60);
    assert_eq!(
        c.decision,
        ClaimDecision::GiveUp(FailureRecord::new("http.503", FailureKind::Unavailable))
    );
    // The attempt that gives up is not counted.
    let mut after = d.clone();
    apply(&mut after, &c, lease(90), at(60));
    assert_eq!(after.attempts, 10);
    assert_eq!(after.state, DeliveryState::Failed);
    assert_eq!(after.finished_at, Some(at(60)));
}

#[test]
fn later_than_within_it_fails_without_running() {
    let d = due(3);
    let day = DAY.as_secs() as i64;
    assert_eq!(
        decide_with(&d, false, &[], day).decision,
        run(&[]),
        "exactly at the deadline still runs"
    );
    let c = decide_with(&d, false, &[], day + 1);
    assert!(matches!(c.decision, ClaimDecision::GiveUp(_)));
}

#[test]
fn never_tried_in_time_records_deadline_exceeded() {
    let d = due(0);
    let c = decide_with(&d, false, &[], DAY.as_secs() as i64 + 1);
    assert_eq!(c.decision, ClaimDecision::GiveUp(FailureRecord::deadline_exceeded()));
}

#[test]
fn time_held_moves_the_deadline_on() {
    let mut d = due(3);
    d.held_for = 2 * HOUR;
    let day = DAY.as_secs() as i64;
    assert_eq!(decide_with(&d, false, &[], day + 3600).decision, run(&[]));
    assert!(matches!(
        decide_with(&d, false, &[], day + 7201).decision,
        ClaimDecision::GiveUp(_)
    ));
}

#[test]
fn a_lease_that_ended_marks_lease_expired() {
    let mut d = due(1);
    d.state = DeliveryState::Running;
    d.lease = Some(lease(30));
    d.last_failure = None;
    let c = decide_with(&d, false, &[], 30);
    assert!(c.lease_expired);
    assert_eq!(c.decision, run(&[]));
    let mut after = d.clone();
    apply(&mut after, &c, lease(60), at(30));
    assert_eq!(after.last_failure, Some(FailureRecord::lease_expired()));
    assert_eq!(after.attempts, 2);
}

#[test]
fn a_lost_run_past_its_budget_fails_as_lease_expired() {
    let mut d = due(10);
    d.state = DeliveryState::Running;
    d.lease = Some(lease(30));
    d.last_failure = Some(FailureRecord::new("http.503", FailureKind::Unavailable));
    let c = decide_with(&d, false, &[], 30);
    assert_eq!(c.decision, ClaimDecision::GiveUp(FailureRecord::lease_expired()));
}

#[test]
fn an_open_breaker_holds_it_and_gives_the_attempt_back() {
    let d = due(2);
    let c = decide_with(&d, false, &[("crm", Gate::Pass), ("payments", Gate::Hold)], 10);
    assert_eq!(
        c.decision,
        ClaimDecision::Hold {
            connection: "payments".into()
        }
    );
    let mut after = d.clone();
    apply(&mut after, &c, lease(40), at(10));
    assert_eq!(after.state, DeliveryState::Held);
    assert_eq!(after.attempts, 2, "held spends no attempt");
    assert_eq!(after.held.as_ref().unwrap().since, at(10));
    assert!(after.lease.is_none());
}

#[test]
fn hold_wins_over_probe() {
    // It may not probe one provider while it would be held for another.
    let c = decide_with(&due(0), false, &[("payments", Gate::Probe), ("crm", Gate::Hold)], 10);
    assert_eq!(
        c.decision,
        ClaimDecision::Hold {
            connection: "crm".into()
        }
    );
}

#[test]
fn the_first_claimed_after_the_pause_is_the_probe() {
    let c = decide_with(&due(0), false, &[("payments", Gate::Probe), ("crm", Gate::Pass)], 10);
    assert_eq!(c.decision, run(&["payments"]));
}

#[test]
fn budget_give_up_comes_before_the_breaker() {
    let c = decide_with(&due(10), false, &[("payments", Gate::Hold)], 10);
    assert!(matches!(c.decision, ClaimDecision::GiveUp(_)));
}

#[test]
fn hold_claimed_gives_the_attempt_back() {
    let mut d = due(0);
    let c = decide_with(&d, false, &[], 0);
    apply(&mut d, &c, lease(30), at(0));
    assert_eq!(d.attempts, 1);
    hold_claimed(&mut d, "payments", at(1));
    assert_eq!((d.state, d.attempts), (DeliveryState::Held, 0));
    assert_eq!(d.held.as_ref().unwrap().connection, "payments");
}

#[test]
fn give_back_makes_it_due_at_once_without_spending() {
    let mut d = due(4);
    let c = decide_with(&d, false, &[], 0);
    apply(&mut d, &c, lease(30), at(0));
    give_back(&mut d, at(2));
    assert_eq!((d.state, d.attempts, d.due_at), (DeliveryState::Due, 4, at(2)));
    assert!(d.lease.is_none());
}

#[test]
fn an_operator_retry_gives_a_fresh_budget_even_after_a_long_hold() {
    let mut d = due(10);
    d.state = DeliveryState::Failed;
    d.held_for = 3 * DAY;
    d.operator_retry(at(100), at(100));
    let c = decide(ClaimInput {
        delivery: &d,
        budget: Budget::new(1, MINUTE).unwrap(),
        handled: false,
        gates: &[],
        now: at(159),
    });
    assert_eq!(c.decision, run(&[]));
}

/// A connection's limit changes only a run: with no room it waits, due
/// again when there is room; every other decision stays as it was.
#[test]
fn no_room_on_a_limited_connection_turns_only_a_run_into_a_wait() {
    let no_room = || Err((at(30), "payments".to_string(), WaitFor::Token));
    let wait = ClaimDecision::Wait {
        until: at(30),
        connection: "payments".into(),
        reason: WaitFor::Token,
    };
    let runs = decide_with(&due(0), false, &[], 0);
    assert!(runs.runs());
    assert_eq!(runs.clone().with_room(Ok(())).decision, run(&[]));
    assert_eq!(runs.with_room(no_room()).decision, wait);
    let held = decide_with(&due(0), false, &[("payments", Gate::Hold)], 0);
    assert!(!held.runs());
    assert_eq!(held.clone().with_room(no_room()), held);
    let handled = decide_with(&due(0), true, &[], 0);
    assert_eq!(handled.clone().with_room(no_room()), handled);
}

#[test]
fn a_subscriber_the_app_no_longer_declares_fails_its_delivery() {
    let c = unknown_subscriber(&due(0), at(0));
    assert_eq!(
        c,
        Claim {
            lease_expired: false,
            decision: ClaimDecision::GiveUp(FailureRecord::unknown_subscriber()),
        }
    );
    let mut lost = due(1);
    lost.state = DeliveryState::Running;
    lost.lease = Some(lease(10));
    let c = unknown_subscriber(&lost, at(20));
    assert!(c.lease_expired, "the lost lease is still marked");
    let mut d = lost.clone();
    apply(&mut d, &c, lease(80), at(20));
    assert_eq!(d.state, DeliveryState::Failed);
    assert_eq!(d.last_failure, Some(FailureRecord::unknown_subscriber()));
    assert_eq!(d.lease, None);
    assert_eq!(d.finished_at, Some(at(20)));
}

/// A release reads as one from the row alone until the delivery runs
/// again: a claim given back unstarted keeps it, a run's end or an
/// operator's retry clears it (`Delivery::released_since_run`).
#[test]
fn a_release_reads_as_one_until_the_delivery_runs_again() {
    let mut d = due(0);
    assert!(!d.released_since_run(), "new: never held");
    d.state = DeliveryState::Held;
    d.held = Some(Held {
        connection: "payments".into(),
        since: at(10),
    });
    d.updated_at = at(10);
    assert!(!d.released_since_run(), "still held");
    d.release(at(70));
    assert!(d.released_since_run());
    let run = Claim {
        decision: ClaimDecision::Run { probe_for: vec![] },
        lease_expired: false,
    };
    apply(&mut d, &run, lease(100), at(71));
    give_back(&mut d, at(72));
    assert!(d.released_since_run(), "given back unstarted: still not run since");
    apply(&mut d, &run, lease(100), at(73));
    crate::attempt::apply(
        &mut d,
        &crate::attempt::Outcome::Retry {
            at: at(130),
            failure: FailureRecord::new("http.503", FailureKind::Unavailable),
        },
        at(75),
    );
    assert!(!d.released_since_run(), "a run ended since, due at its backoff");
    d.operator_retry(at(200), at(200));
    assert!(!d.released_since_run(), "an operator's retry forgets the hold");
}
