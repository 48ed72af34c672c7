//! What happens after an attempt: done, retry at a time, failed or parked.

use crate::backoff::Backoff;
use crate::budget::Budget;
use crate::delivery::{Delivery, DeliveryState};
use crate::failure::{Disposition, Failure, FailureRecord};
use crate::time::Timestamp;
use rand::Rng;

/// How an attempt ended, as the shell saw it. A store fault before commit,
/// a run stopped by its time limit, and a panic arrive here as failures of
/// their kinds (`Failure::store_unavailable`, `deadline_exceeded`, `panicked`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptEnd {
    Succeeded,
    Failed(Failure),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// Due again at `at`.
    Retry {
        at: Timestamp,
        failure: FailureRecord,
    },
    Failed(FailureRecord),
    Parked(FailureRecord),
}

impl Outcome {
    pub fn state(&self) -> DeliveryState {
        match self {
            Outcome::Succeeded => DeliveryState::Succeeded,
            Outcome::Retry { .. } => DeliveryState::Due,
            Outcome::Failed(_) => DeliveryState::Failed,
            Outcome::Parked(_) => DeliveryState::Parked,
        }
    }

    pub fn failure(&self) -> Option<&FailureRecord> {
        match self {
            Outcome::Succeeded => None,
            Outcome::Retry { failure, .. } | Outcome::Failed(failure) | Outcome::Parked(failure) => Some(failure),
        }
    }
}

/// The table of failure kinds in docs/retries.md, with the budget applied. `d` is the delivery as
/// claimed: running, its attempt already counted.
pub fn decide(d: &Delivery, budget: Budget, end: &AttemptEnd, now: Timestamp, rng: &mut impl Rng) -> Outcome {
    assert_eq!(
        d.state,
        DeliveryState::Running,
        "an attempt ends only on a running delivery"
    );
    let failure = match end {
        AttemptEnd::Succeeded => return Outcome::Succeeded,
        AttemptEnd::Failed(f) => f,
    };
    let record = failure.record();
    match failure.kind.disposition() {
        Disposition::Fail | Disposition::Defect => Outcome::Failed(record),
        Disposition::Park => Outcome::Parked(record),
        Disposition::Retry => {
            if budget.attempts_used(d.attempts) {
                return Outcome::Failed(record);
            }
            let wait = Backoff::DELIVERY.draw(d.attempts, failure.retry_after, rng);
            let at = now.plus(wait);
            if at > budget.deadline(d.budget_from, d.held_for) {
                Outcome::Failed(record)
            } else {
                Outcome::Retry { at, failure: record }
            }
        }
    }
}

/// Writes an outcome into the delivery.
pub fn apply(d: &mut Delivery, outcome: &Outcome, now: Timestamp) {
    d.state = outcome.state();
    d.lease = None;
    d.updated_at = now;
    if let Some(f) = outcome.failure() {
        d.last_failure = Some(f.clone());
    }
    match outcome {
        Outcome::Retry { at, .. } => d.due_at = *at,
        _ => d.finished_at = Some(now),
    }
}

#[cfg(test)]
#[path = "attempt_tests.rs"]
mod tests;
