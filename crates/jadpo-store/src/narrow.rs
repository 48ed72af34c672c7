//! Which rows a claim or a finish may write narrowly: most rows change
//! the same few columns the same way (a claim's runs: `running` under a new
//! lease; a finish's plain ends: finished, lease cleared). Each SQL store
//! writes those with a statement that sets only those columns, and every
//! other row whole. Which rows are narrow is decided here by comparing the
//! planned row with the row as read, so `plan.rs` stays the only place that
//! decides what a delivery becomes, and both stores decide it alike.

use jadpo_core::{Delivery, DeliveryState};

/// `a` and `b` agree on every column neither a claim's lease nor a plain
/// end writes. Taken apart whole, without a copy (this runs for every row
/// of every claim and finish): a field added to `Delivery` fails to compile
/// here until it is placed.
fn same_apart_from_lease_and_end(a: &Delivery, b: &Delivery) -> bool {
    let Delivery {
        id,
        event_id,
        subscriber,
        state: _,
        attempts: _,
        due_at,
        budget_from,
        held_for,
        lease: _,
        last_failure,
        held,
        waiting,
        created_at,
        updated_at: _,
        finished_at: _,
        key,
        key_rule,
        skipped,
    } = a;
    *id == b.id
        && *event_id == b.event_id
        && *subscriber == b.subscriber
        && *due_at == b.due_at
        && *budget_from == b.budget_from
        && *held_for == b.held_for
        && *last_failure == b.last_failure
        && *held == b.held
        && *waiting == b.waiting
        && *created_at == b.created_at
        && *key == b.key
        && *key_rule == b.key_rule
        && *skipped == b.skipped
}

/// `after` is `before` made `running` under a new lease, nothing else.
pub(crate) fn only_leased(before: &Delivery, after: &Delivery) -> bool {
    after.state == DeliveryState::Running
        && after.lease.is_some()
        && before.finished_at == after.finished_at
        && same_apart_from_lease_and_end(before, after)
}

/// `after` is `before` ended at its `updated_at`, its lease cleared,
/// nothing else (no failure recorded, no retry time).
pub(crate) fn only_ended(before: &Delivery, after: &Delivery) -> bool {
    after.state.is_finished()
        && after.finished_at == Some(after.updated_at)
        && after.lease.is_none()
        && before.attempts == after.attempts
        && same_apart_from_lease_and_end(before, after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::{DeliveryId, EventId, FailureRecord, Lease, LeaseToken, Outcome, Timestamp};

    fn due() -> Delivery {
        Delivery::new(DeliveryId(7), EventId(3), "log", Timestamp::from_millis(1_000))
    }

    fn leased(mut d: Delivery) -> Delivery {
        d.state = DeliveryState::Running;
        d.attempts += 1;
        d.updated_at = Timestamp::from_millis(2_000);
        d.lease = Some(Lease {
            owner: "w".into(),
            token: LeaseToken(1),
            until: Timestamp::from_millis(32_000),
        });
        d
    }

    #[test]
    fn a_plain_run_is_narrow_and_a_run_that_records_a_lost_lease_is_not() {
        let before = due();
        assert!(only_leased(&before, &leased(before.clone())));
        let mut lost = leased(before.clone());
        lost.last_failure = Some(FailureRecord::lease_expired());
        assert!(!only_leased(&before, &lost));
        let mut held = before.clone();
        held.state = DeliveryState::Held;
        assert!(!only_leased(&before, &held), "not running");
    }

    /// Every column but the ones a lease or a plain end writes, changed one
    /// at a time: each makes the write a full row.
    #[test]
    fn any_other_change_is_written_as_a_full_row() {
        let t = Timestamp::from_millis;
        type Change = (&'static str, fn(&mut Delivery));
        let changes: [Change; 10] = [
            ("id", |d| d.id = DeliveryId(8)),
            ("event", |d| d.event_id = EventId(4)),
            ("subscriber", |d| d.subscriber = "mail".into()),
            ("due_at", |d| d.due_at = Timestamp::from_millis(9)),
            ("budget_from", |d| d.budget_from = Timestamp::from_millis(9)),
            ("held_for", |d| d.held_for = std::time::Duration::from_secs(1)),
            ("last_failure", |d| {
                d.last_failure = Some(FailureRecord::lease_expired())
            }),
            ("held", |d| {
                d.held = Some(jadpo_core::Held {
                    connection: "pay".into(),
                    since: Timestamp::from_millis(9),
                })
            }),
            ("waiting", |d| {
                d.waiting = Some(jadpo_core::Waiting {
                    connection: "pay".into(),
                    reason: jadpo_core::limit::WaitFor::Token,
                })
            }),
            ("created_at", |d| d.created_at = Timestamp::from_millis(9)),
        ];
        let before = due();
        let running = leased(due());
        let mut ended = running.clone();
        jadpo_core::attempt::apply(&mut ended, &Outcome::Succeeded, t(3_000));
        assert!(only_leased(&before, &leased(before.clone())) && only_ended(&running, &ended));
        for (column, change) in changes {
            let mut after = leased(before.clone());
            change(&mut after);
            assert!(!only_leased(&before, &after), "a lease that also changes {column}");
            let mut after = ended.clone();
            change(&mut after);
            assert!(!only_ended(&running, &after), "an end that also changes {column}");
        }
        let mut finished_too = leased(before.clone());
        finished_too.finished_at = Some(t(2_000));
        assert!(
            !only_leased(&before, &finished_too),
            "a lease that also sets finished_at"
        );
        let mut counted = ended.clone();
        counted.attempts += 1;
        assert!(!only_ended(&running, &counted), "an end that also counts an attempt");
    }

    #[test]
    fn a_plain_end_is_narrow_and_a_failure_or_a_retry_is_not() {
        let running = leased(due());
        let at = Timestamp::from_millis(3_000);
        let end = |outcome: Outcome| {
            let mut d = running.clone();
            jadpo_core::attempt::apply(&mut d, &outcome, at);
            d
        };
        assert!(only_ended(&running, &end(Outcome::Succeeded)));
        let failure = FailureRecord {
            code: "card_declined".into(),
            kind: jadpo_core::FailureKind::Rejected,
        };
        assert!(!only_ended(&running, &end(Outcome::Failed(failure.clone()))));
        assert!(!only_ended(&running, &end(Outcome::Retry { failure, at })));
    }
}
