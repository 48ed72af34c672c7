use super::*;
use crate::delivery::{DeliveryId, EventId, Lease, LeaseToken};
use crate::failure::FailureKind::{self, *};
use crate::time::{DAY, HOUR, SECOND};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

fn at(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

/// A delivery claimed for its `attempts`-th attempt.
fn running(attempts: u32) -> Delivery {
    let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(0));
    d.state = DeliveryState::Running;
    d.attempts = attempts;
    d.lease = Some(Lease {
        owner: "w".into(),
        token: LeaseToken(1),
        until: at(30),
    });
    d
}

fn decide_now(d: &Delivery, budget: Budget, end: AttemptEnd, now: i64) -> Outcome {
    decide(d, budget, &end, at(now), &mut ChaCha8Rng::seed_from_u64(1))
}

fn fail(kind: FailureKind) -> AttemptEnd {
    AttemptEnd::Failed(Failure::new(format!("test.{kind}"), kind))
}

/// The table of failure kinds in docs/retries.md, each row through the
/// whole decision.
#[test]
fn failure_kinds_table_rows() {
    let d = running(1);
    let b = Budget::DEFAULT;
    assert_eq!(
        decide_now(&d, b, AttemptEnd::Succeeded, 1),
        Outcome::Succeeded,
        "Succeeded: done"
    );
    for kind in [Unavailable, RateLimited] {
        assert!(
            matches!(decide_now(&d, b, fail(kind), 1), Outcome::Retry { .. }),
            "{kind}: retried later"
        );
    }
    for kind in [NotFound, Conflict, Rejected, Unauthorized, Invalid] {
        assert!(
            matches!(decide_now(&d, b, fail(kind), 1), Outcome::Failed(_)),
            "{kind}: failed, not retried"
        );
    }
    // A fault before anything committed: the store, or a run out of time.
    for end in [
        Failure::store_unavailable(),
        Failure::deadline_exceeded(),
        Failure::lease_expired(),
    ] {
        assert!(
            matches!(
                decide_now(&d, b, AttemptEnd::Failed(end.clone()), 1),
                Outcome::Retry { .. }
            ),
            "{end:?}"
        );
    }
    assert!(
        matches!(decide_now(&d, b, fail(OutcomeUnknown), 1), Outcome::Parked(_)),
        "parked, never retried"
    );
    for kind in [InternalFault, Overflow] {
        assert!(
            matches!(decide_now(&d, b, fail(kind), 1), Outcome::Failed(_)),
            "{kind}: a defect fails"
        );
    }
    assert!(matches!(
        decide_now(&d, b, AttemptEnd::Failed(Failure::panicked()), 1),
        Outcome::Failed(_)
    ));
}

#[test]
fn the_record_keeps_code_and_kind_never_fields() {
    let end = AttemptEnd::Failed(Failure::new("payments.card_declined", Rejected).with_field("card", "4242"));
    let out = decide_now(&running(1), Budget::DEFAULT, end, 1);
    assert_eq!(
        out,
        Outcome::Failed(FailureRecord::new("payments.card_declined", Rejected))
    );
}

#[test]
fn the_tenth_attempt_failing_is_the_last() {
    let b = Budget::DEFAULT;
    assert!(matches!(
        decide_now(&running(9), b, fail(Unavailable), 1),
        Outcome::Retry { .. }
    ));
    assert_eq!(
        decide_now(&running(10), b, fail(Unavailable), 1),
        Outcome::Failed(FailureRecord::new("test.unavailable", Unavailable))
    );
}

#[test]
fn one_attempt_budget_never_retries() {
    let b = Budget::new(1, DAY).unwrap();
    assert!(matches!(
        decide_now(&running(1), b, fail(Unavailable), 1),
        Outcome::Failed(_)
    ));
}

#[test]
fn hundred_attempt_budget_retries_until_the_hundredth() {
    let b = Budget::new(100, 30 * DAY).unwrap();
    assert!(matches!(
        decide_now(&running(99), b, fail(Unavailable), 1),
        Outcome::Retry { .. }
    ));
    assert!(matches!(
        decide_now(&running(100), b, fail(Unavailable), 1),
        Outcome::Failed(_)
    ));
}

#[test]
fn a_next_attempt_past_within_fails_now() {
    // Attempt 8's ceiling is 64 min; a minute before the deadline, any wait
    // over a minute falls past it. Seed 1 draws above a minute here.
    let b = Budget::new(20, HOUR).unwrap();
    let out = decide_now(&running(8), b, fail(Unavailable), 3540);
    assert!(matches!(out, Outcome::Failed(_)), "{out:?}");
    // A minimum wait of a second fits exactly before the deadline.
    let d = running(1);
    let out = decide(&d, b, &fail(Unavailable), at(0), &mut AlwaysZero);
    assert_eq!(
        out,
        Outcome::Retry {
            at: at(1),
            failure: FailureRecord::new("test.unavailable", Unavailable)
        }
    );
    let out = decide(&d, b, &fail(Unavailable), at(3599), &mut AlwaysZero);
    assert!(
        matches!(out, Outcome::Retry { .. }),
        "exactly at the deadline is within"
    );
    let out = decide(&d, b, &fail(Unavailable), at(3600), &mut AlwaysZero);
    assert!(matches!(out, Outcome::Failed(_)));
}

#[test]
fn time_held_is_not_spent_from_within() {
    let b = Budget::new(20, HOUR).unwrap();
    let mut d = running(1);
    d.held_for = 5 * HOUR;
    let out = decide(&d, b, &fail(Unavailable), at(5 * 3600 + 3599), &mut AlwaysZero);
    assert!(matches!(out, Outcome::Retry { .. }));
}

#[test]
fn retry_after_is_honoured_between_attempts() {
    let end = AttemptEnd::Failed(Failure::new("http.429", RateLimited).with_retry_after(120 * SECOND));
    for seed in 0..200 {
        let out = decide(
            &running(1),
            Budget::DEFAULT,
            &end,
            at(1000),
            &mut ChaCha8Rng::seed_from_u64(seed),
        );
        let Outcome::Retry { at: due, .. } = out else {
            panic!("{out:?}")
        };
        assert!(due >= at(1120), "not retried before 120 s");
    }
}

#[test]
fn a_retry_after_past_the_budget_fails_now() {
    let end = AttemptEnd::Failed(Failure::new("http.503", Unavailable).with_retry_after(2 * DAY));
    assert!(matches!(
        decide_now(&running(1), Budget::DEFAULT, end, 0),
        Outcome::Failed(_)
    ));
}

#[test]
fn apply_writes_the_outcome() {
    let mut d = running(3);
    let f = FailureRecord::new("http.503", Unavailable);
    apply(
        &mut d,
        &Outcome::Retry {
            at: at(90),
            failure: f.clone(),
        },
        at(10),
    );
    assert_eq!(
        (d.state, d.due_at, d.last_failure.clone(), d.lease.clone()),
        (DeliveryState::Due, at(90), Some(f), None)
    );
    assert_eq!(d.finished_at, None);
    let mut d = running(3);
    apply(
        &mut d,
        &Outcome::Parked(FailureRecord::new("http.timeout", OutcomeUnknown)),
        at(10),
    );
    assert_eq!((d.state, d.finished_at), (DeliveryState::Parked, Some(at(10))));
    let mut d = running(3);
    apply(&mut d, &Outcome::Succeeded, at(10));
    assert_eq!((d.state, d.last_failure.clone()), (DeliveryState::Succeeded, None));
}

/// A random source that always draws the lowest value.
struct AlwaysZero;

impl rand::RngCore for AlwaysZero {
    fn next_u32(&mut self) -> u32 {
        0
    }
    fn next_u64(&mut self) -> u64 {
        0
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        dst.fill(0);
    }
}

proptest! {
    /// Whatever happens, a delivery never gets more attempts than its budget
    /// and never a retry past its deadline.
    #[test]
    fn retries_stay_inside_the_budget(
        attempts in 1u32..=100,
        max in 1u64..=100,
        within_s in 1u64..=30 * 86_400,
        held_s in 0u64..=86_400,
        now_s in 0i64..=40 * 86_400,
        retry_after_s in proptest::option::of(0u64..=86_400),
        seed in any::<u64>(),
    ) {
        let b = Budget::new(max, Duration::from_secs(within_s)).unwrap();
        let mut d = running(attempts);
        d.held_for = Duration::from_secs(held_s);
        let mut f = Failure::new("http.503", Unavailable);
        f.retry_after = retry_after_s.map(Duration::from_secs);
        let retry_after = f.retry_after;
        let out = decide(&d, b, &AttemptEnd::Failed(f), at(now_s), &mut ChaCha8Rng::seed_from_u64(seed));
        let deadline = b.deadline(d.budget_from, d.held_for);
        match out {
            Outcome::Retry { at: due, .. } => {
                prop_assert!(attempts < b.attempts());
                prop_assert!(due <= deadline);
                prop_assert!(due >= at(now_s).plus(SECOND));
            }
            Outcome::Failed(_) => {
                // Given up only with the budget spent: every attempt used,
                // or the retry this very draw would schedule past the
                // deadline. A `Failed` for any other reason is a lost retry.
                let wait = Backoff::DELIVERY.draw(attempts, retry_after, &mut ChaCha8Rng::seed_from_u64(seed));
                prop_assert!(
                    b.attempts_used(attempts) || at(now_s).plus(wait) > deadline,
                    "failed with {attempts} of {} attempts and a retry at {:?} before the deadline {deadline:?}",
                    b.attempts(),
                    at(now_s).plus(wait)
                );
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }
}

proptest! {
    /// Near the deadline, with attempts left, the drawn retry decides
    /// alone: due at now plus the draw when that is not past the deadline,
    /// given up when it is. (The property above draws its times from weeks,
    /// where the last hour before a deadline is rarely hit.)
    #[test]
    fn near_the_deadline_only_a_retry_past_it_gives_up(
        attempts in 1u32..=20,
        within_h in 1u64..=48,
        held_s in 0u64..=3_600,
        before_deadline_s in 0i64..=6 * 3_600,
        retry_after_s in proptest::option::of(0u64..=3_600),
        seed in any::<u64>(),
    ) {
        let b = Budget::new(100, Duration::from_secs(within_h * 3_600)).unwrap();
        let mut d = running(attempts);
        d.held_for = Duration::from_secs(held_s);
        let deadline = b.deadline(d.budget_from, d.held_for);
        let now = Timestamp::from_millis(deadline.as_millis() - before_deadline_s * 1_000);
        let mut f = Failure::new("http.503", Unavailable);
        f.retry_after = retry_after_s.map(Duration::from_secs);
        let retry_after = f.retry_after;
        let out = decide(&d, b, &AttemptEnd::Failed(f), now, &mut ChaCha8Rng::seed_from_u64(seed));
        let due = now.plus(Backoff::DELIVERY.draw(attempts, retry_after, &mut ChaCha8Rng::seed_from_u64(seed)));
        if due > deadline {
            prop_assert!(matches!(out, Outcome::Failed(_)), "{out:?}");
        } else {
            prop_assert!(matches!(out, Outcome::Retry { at, .. } if at == due), "{out:?}, not a retry at {due:?}");
        }
    }
}
