//! What happens to a due delivery when a worker claims it, before it runs.
//!
//! The rules of docs/retries.md, "At the claim, before it runs", in the
//! order they apply:
//! 1. a lease that ended marks the last failure `lease_expired`;
//! 2. a subscriber the app no longer declares fails it
//!    (`subscriber.unknown`, [`unknown_subscriber`]);
//! 3. a handled record means the run already committed: `succeeded`;
//! 4. a spent budget fails it without running, not counted as an attempt;
//! 5. an open breaker on any connection its action may call holds it;
//! 6. a connection's rate or concurrency limit with no room makes it wait,
//!    due again when there is room, no attempt spent ([`Claim::with_room`]);
//! 7. otherwise it runs, as the probe of each connection whose pause passed.
//!
//! [`decide`] applies 1 and 3-5 and 7; the store asks a limit for room only
//! for a delivery that would run (taking room is the limit's side effect),
//! and hands the answer to [`Claim::with_room`].

use crate::breaker::Gate;
use crate::budget::Budget;
use crate::delivery::{Delivery, DeliveryState, Held, Lease};
use crate::failure::FailureRecord;
use crate::limit::WaitFor;
use crate::time::Timestamp;

/// Everything the claim decision looks at.
#[derive(Clone, Copy, Debug)]
pub struct ClaimInput<'a> {
    pub delivery: &'a Delivery,
    pub budget: Budget,
    /// A handled record exists for (subscriber, event).
    pub handled: bool,
    /// The gate of each connection the subscriber's action may call.
    pub gates: &'a [(&'a str, Gate)],
    pub now: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimDecision {
    /// The run committed before: `succeeded` without running again.
    Succeed,
    /// The budget is spent: `failed` without running, with this record.
    GiveUp(FailureRecord),
    /// Held behind this connection's breaker; the attempt is not spent.
    Hold { connection: String },
    /// Run it. It is the probe of these connections, if any.
    Run { probe_for: Vec<String> },
    /// It would run, but a connection's rate or concurrency limit has no
    /// room now: due again at `until`, no attempt spent, not held (see
    /// [`crate::limit`]).
    Wait {
        until: Timestamp,
        connection: String,
        reason: WaitFor,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The delivery's worker was lost: its last failure becomes `lease_expired`.
    pub lease_expired: bool,
    pub decision: ClaimDecision,
}

impl Claim {
    /// Whether the delivery would run: the only decision a connection's
    /// limit can change.
    pub fn runs(&self) -> bool {
        matches!(self.decision, ClaimDecision::Run { .. })
    }

    /// The decision once the limits of the delivery's connections have
    /// answered: a run with no room on one of them waits until `until` on
    /// that `connection` instead. Any other decision stays as it is.
    pub fn with_room(self, room: Result<(), (Timestamp, String, WaitFor)>) -> Claim {
        match (self.decision, room) {
            (ClaimDecision::Run { .. }, Err((until, connection, reason))) => Claim {
                decision: ClaimDecision::Wait {
                    until,
                    connection,
                    reason,
                },
                ..self
            },
            (decision, _) => Claim { decision, ..self },
        }
    }
}

/// The claim of a delivery whose subscriber the app no longer declares:
/// failed at once, its lease (if it ended) marked as such first.
pub fn unknown_subscriber(d: &Delivery, now: Timestamp) -> Claim {
    assert!(d.claimable(now), "claim of a delivery that is not due: {d:?}");
    Claim {
        lease_expired: d.lease_ended(now),
        decision: ClaimDecision::GiveUp(FailureRecord::unknown_subscriber()),
    }
}

pub fn decide(input: ClaimInput<'_>) -> Claim {
    let ClaimInput {
        delivery: d,
        budget,
        handled,
        gates,
        now,
    } = input;
    assert!(d.claimable(now), "claim of a delivery that is not due: {d:?}");
    let lease_expired = d.lease_ended(now);
    let decision = if handled {
        ClaimDecision::Succeed
    } else if budget.attempts_used(d.attempts) || now > budget.deadline(d.budget_from, d.held_for_at(now)) {
        let last = if lease_expired {
            Some(FailureRecord::lease_expired())
        } else {
            d.last_failure.clone()
        };
        ClaimDecision::GiveUp(last.unwrap_or_else(FailureRecord::deadline_exceeded))
    } else if let Some((connection, _)) = gates.iter().find(|(_, g)| *g == Gate::Hold) {
        ClaimDecision::Hold {
            connection: (*connection).to_owned(),
        }
    } else {
        let probe_for = gates
            .iter()
            .filter(|(_, g)| *g == Gate::Probe)
            .map(|(c, _)| (*c).to_owned())
            .collect();
        ClaimDecision::Run { probe_for }
    };
    Claim {
        lease_expired,
        decision,
    }
}

/// Writes a claim's decision into the delivery. `lease` is used only when it
/// runs.
pub fn apply(d: &mut Delivery, claim: &Claim, lease: Lease, now: Timestamp) {
    if claim.lease_expired {
        d.last_failure = Some(FailureRecord::lease_expired());
    }
    d.lease = None;
    d.waiting = None;
    d.updated_at = now;
    match &claim.decision {
        ClaimDecision::Succeed => {
            d.state = DeliveryState::Succeeded;
            d.finished_at = Some(now);
        }
        ClaimDecision::GiveUp(record) => {
            d.state = DeliveryState::Failed;
            d.last_failure = Some(record.clone());
            d.finished_at = Some(now);
        }
        ClaimDecision::Hold { connection } => {
            d.state = DeliveryState::Held;
            d.held = Some(Held {
                connection: connection.clone(),
                since: now,
            });
        }
        ClaimDecision::Run { .. } => {
            d.state = DeliveryState::Running;
            d.attempts += 1;
            d.lease = Some(lease);
        }
        ClaimDecision::Wait {
            until,
            connection,
            reason,
        } => {
            d.state = DeliveryState::Due;
            d.due_at = (*until).max(now);
            d.waiting = Some(crate::delivery::Waiting {
                connection: connection.clone(),
                reason: *reason,
            });
        }
    }
}

/// A claimed delivery that the worker did not start after all (its breaker
/// opened after the claim, seen in memory just before the run): held, with
/// the attempt its claim counted given back.
pub fn hold_claimed(d: &mut Delivery, connection: &str, now: Timestamp) {
    assert_eq!(
        d.state,
        DeliveryState::Running,
        "hold_claimed of a delivery not running"
    );
    assert!(d.attempts > 0);
    d.attempts -= 1;
    d.state = DeliveryState::Held;
    d.lease = None;
    d.held = Some(Held {
        connection: connection.to_owned(),
        since: now,
    });
    d.updated_at = now;
}

/// A claimed delivery given back unstarted at a graceful shutdown: due at
/// once, the attempt not spent.
pub fn give_back(d: &mut Delivery, now: Timestamp) {
    assert_eq!(d.state, DeliveryState::Running, "give_back of a delivery not running");
    assert!(d.attempts > 0);
    d.attempts -= 1;
    d.state = DeliveryState::Due;
    d.lease = None;
    d.due_at = now;
    d.updated_at = now;
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
