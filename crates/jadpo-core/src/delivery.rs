//! A delivery: one subscriber's durable job for one event.

pub use crate::delivery_state::DeliveryState;
use crate::failure::FailureRecord;
pub use crate::ids::{DeliveryId, EventId, LeaseToken};
use crate::time::Timestamp;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub token: LeaseToken,
    pub until: Timestamp,
}

/// Why and since when a delivery is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub connection: String,
    pub since: Timestamp,
}

impl Held {
    /// A hold lasts at least this long, the store's unit of time. A
    /// delivery held behind a probe that answers within the same
    /// millisecond was still held: the time it shows (and the release its
    /// next attempt reports, [`Delivery::released_since_run`]) must not
    /// round to nothing.
    pub const SHORTEST: Duration = Duration::from_millis(1);

    /// How long this hold has lasted at `now`, never under
    /// [`Held::SHORTEST`].
    pub fn length(&self, now: Timestamp) -> Duration {
        now.since(self.since).max(Self::SHORTEST)
    }
}

/// Why a due delivery did not start at its last claim: a connection's
/// limit had no room (docs/decisions.md, "Connection limits"). Not an
/// attempt and not a hold; cleared by the next claim that decides anything
/// else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub connection: String,
    pub reason: crate::limit::WaitFor,
}

/// An operator's skip of a failed or parked delivery: they chose not to
/// retry it, and a `strict` key it blocked moves on (docs/retries.md,
/// "Order per key"). Nothing is called; the delivery keeps its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Who skipped it, as the operator named themselves (`--by`), or the
    /// surface it came through (`api`, `console`) when they didn't.
    pub by: String,
    pub at: Timestamp,
}

/// The longest name an operator's skip records.
pub const MAX_OPERATOR_NAME: usize = 64;

/// Why a name cannot be recorded as who skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorNameInvalid {
    Empty,
    TooLong,
    /// A control character: it would break the lines it is printed in.
    Control,
}

impl std::fmt::Display for OperatorNameInvalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorNameInvalid::Empty => f.write_str("the operator's name is empty"),
            OperatorNameInvalid::TooLong => {
                write!(f, "the operator's name is over {MAX_OPERATOR_NAME} bytes")
            }
            OperatorNameInvalid::Control => f.write_str("the operator's name holds a control character"),
        }
    }
}

/// A name an operator's skip may record: 1 to [`MAX_OPERATOR_NAME`]
/// bytes, no control characters.
pub fn check_operator_name(name: &str) -> Result<(), OperatorNameInvalid> {
    if name.is_empty() {
        Err(OperatorNameInvalid::Empty)
    } else if name.len() > MAX_OPERATOR_NAME {
        Err(OperatorNameInvalid::TooLong)
    } else if name.chars().any(char::is_control) {
        Err(OperatorNameInvalid::Control)
    } else {
        Ok(())
    }
}

/// A delivery's record: a row of `jadpo_deliveries` (docs/system-tables.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub event_id: EventId,
    pub subscriber: String,
    pub state: DeliveryState,
    /// Attempts started and counted against the budget.
    pub attempts: u32,
    pub due_at: Timestamp,
    /// The event's emitted time, or the operator's last retry.
    pub budget_from: Timestamp,
    /// Total time spent held, finished holds only; moves `within:` on.
    pub held_for: Duration,
    pub lease: Option<Lease>,
    pub last_failure: Option<FailureRecord>,
    pub held: Option<Held>,
    /// Set only while it is `due` after a claim found no room on a limited
    /// connection.
    pub waiting: Option<Waiting>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// Its subscriber's `key:` over its event, set at the emit and never
    /// changed (`crate::key`).
    pub key: Option<crate::key::Key>,
    /// What its subscriber asked of deliveries sharing its key when it was
    /// emitted (`order:` or `concurrency_per_key:`), kept with it so that
    /// its end frees its slot by the rule it took it under.
    pub key_rule: Option<crate::key_rule::KeyRule>,
    /// Set when an operator skipped it, failed or parked; cleared by an
    /// operator's retry.
    pub skipped: Option<Skipped>,
}

impl Delivery {
    /// A new delivery of `event_id` to `subscriber`, due at once.
    pub fn new(id: DeliveryId, event_id: EventId, subscriber: impl Into<String>, now: Timestamp) -> Delivery {
        Delivery {
            id,
            event_id,
            subscriber: subscriber.into(),
            state: DeliveryState::Due,
            attempts: 0,
            due_at: now,
            budget_from: now,
            held_for: Duration::ZERO,
            lease: None,
            last_failure: None,
            held: None,
            waiting: None,
            created_at: now,
            updated_at: now,
            finished_at: None,
            key: None,
            key_rule: None,
            skipped: None,
        }
    }

    /// Time held so far, the hold in progress included.
    pub fn held_for_at(&self, now: Timestamp) -> Duration {
        let current = self.held.as_ref().map_or(Duration::ZERO, |h| h.length(now));
        self.held_for.saturating_add(current)
    }

    /// A running delivery whose worker's lease has ended: its worker is
    /// taken as lost, and the next claim may take it over.
    pub fn lease_ended(&self, now: Timestamp) -> bool {
        self.state == DeliveryState::Running && self.lease.as_ref().is_some_and(|l| l.until <= now)
    }

    /// Due now: waiting and its time has come, or running under a lease
    /// that has ended.
    pub fn claimable(&self, now: Timestamp) -> bool {
        (self.state == DeliveryState::Due && self.due_at <= now) || self.lease_ended(now)
    }

    /// Held deliveries become due at once, their hold added to `held_for`.
    pub fn release(&mut self, now: Timestamp) {
        assert_eq!(self.state, DeliveryState::Held, "only a held delivery is released");
        self.held_for = self.held_for_at(now);
        self.held = None;
        self.state = DeliveryState::Due;
        self.due_at = now;
        self.updated_at = now;
    }

    /// Made due by a release from a hold ([`Delivery::release`]) and not
    /// run since: a trace shows the release on the attempt that follows.
    /// Read from the row alone: a release leaves it due at the moment of
    /// its last change, with time held; a run's end leaves it due at its
    /// backoff, later than that change (a backoff drawn as exactly zero
    /// after an earlier hold reads as a release: the cost is one span
    /// event).
    pub fn released_since_run(&self) -> bool {
        self.state == DeliveryState::Due
            && self.held.is_none()
            && !self.held_for.is_zero()
            && self.due_at == self.updated_at
    }

    /// An operator's retry: a fresh budget from now, the time held included.
    pub fn operator_retry(&mut self, due_at: Timestamp, now: Timestamp) {
        self.state = DeliveryState::Due;
        self.attempts = 0;
        self.budget_from = now;
        self.held_for = Duration::ZERO;
        self.held = None;
        self.waiting = None;
        self.lease = None;
        self.due_at = due_at;
        self.finished_at = None;
        self.skipped = None;
        self.updated_at = now;
    }

    /// Keeps its subscriber's key over its event, and the rule the key
    /// was given, as its emit found them (`None`: no `key:`).
    pub fn keyed(&mut self, keyed: Option<&crate::key::Keyed>) {
        self.key = keyed.map(|k| k.key.clone());
        self.key_rule = keyed.and_then(|k| k.rule);
    }

    /// Becomes due at once with the slot of its key an earlier delivery
    /// freed. Its budget is untouched: waiting spent none, and `within:`
    /// still counts from the event.
    pub fn promote(&mut self, now: Timestamp) {
        assert_eq!(self.state, DeliveryState::Queued, "only a queued delivery is promoted");
        self.state = DeliveryState::Due;
        self.due_at = self.due_at.max(now);
        self.updated_at = now;
    }

    /// Waits for a slot of its key rather than being due: its emit or an
    /// operator's retry found the key's slots taken.
    pub fn queue(&mut self, now: Timestamp) {
        assert_eq!(
            self.state,
            DeliveryState::Due,
            "only a delivery about to be due is queued"
        );
        self.state = DeliveryState::Queued;
        self.updated_at = now;
    }

    /// True when the operator may retry it.
    pub fn retryable_by_operator(&self) -> bool {
        matches!(self.state, DeliveryState::Failed | DeliveryState::Parked)
    }

    /// True when the operator may skip it: failed or parked, and not
    /// skipped already (the first skip is the one recorded).
    pub fn skippable_by_operator(&self) -> bool {
        self.retryable_by_operator() && self.skipped.is_none()
    }

    /// An operator's skip: recorded, and nothing else changes but
    /// whether it holds its key's slot ([`Delivery::holds_slot`]).
    pub fn skip(&mut self, by: impl Into<String>, now: Timestamp) {
        assert!(
            self.skippable_by_operator(),
            "only a failed or parked delivery not skipped yet is skipped"
        );
        self.skipped = Some(Skipped { by: by.into(), at: now });
        self.updated_at = now;
    }

    /// Whether it holds a slot of its key now: as its rule has it for
    /// its state (`KeyRule::holds_slot`), unless an operator skipped it.
    pub fn holds_slot(&self) -> bool {
        self.key_rule.is_some_and(|r| r.holds_slot(self.state)) && self.skipped.is_none()
    }

    /// Whether the change from `before` to this gave its key's slot up
    /// (the store then hands it to the key's next queued delivery).
    pub fn gave_slot_up(&self, before: &Delivery) -> bool {
        before.holds_slot() && !self.holds_slot()
    }

    /// Whether the change from `before` to this takes a slot of its key:
    /// an operator's retry of a delivery that gave its slot up when it
    /// ended (under `fifo` or a cap) or was skipped. The store makes it due
    /// only when the key has room, and queues it otherwise.
    pub fn takes_slot(&self, before: &Delivery) -> bool {
        !before.holds_slot() && self.holds_slot()
    }
}

/// When each delivery of an operator's retry is due: one alone at once;
/// several evenly at random over `window` from `now`, so a bulk retry does
/// not reach the provider all at once. The one rule the command line, the
/// API, the console, the embedded API and the simulation follow.
pub fn retry_spread(
    ids: &[DeliveryId],
    now: Timestamp,
    window: Duration,
    rng: &mut impl rand::Rng,
) -> Vec<(DeliveryId, Timestamp)> {
    let window_ms = if ids.len() > 1 {
        u64::try_from(window.as_millis()).unwrap_or(u64::MAX)
    } else {
        0
    };
    ids.iter()
        .map(|id| (*id, now.plus(Duration::from_millis(rng.random_range(0..=window_ms)))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_spreads_several_over_the_window_and_one_not_at_all() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let now = Timestamp::from_millis(1_000_000);
        let one = retry_spread(&[DeliveryId(1)], now, Duration::from_secs(30), &mut rng);
        assert_eq!(one, vec![(DeliveryId(1), now)]);
        let ids: Vec<DeliveryId> = (0..200).map(DeliveryId).collect();
        let many = retry_spread(&ids, now, Duration::from_secs(30), &mut rng);
        assert_eq!(
            many.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            ids,
            "in order, each once"
        );
        let end = now.plus(Duration::from_secs(30));
        assert!(many.iter().all(|(_, t)| *t >= now && *t <= end));
        let late = many
            .iter()
            .filter(|(_, t)| *t > now.plus(Duration::from_secs(15)))
            .count();
        assert!((60..=140).contains(&late), "about half in the second half: {late}");
        let zero = retry_spread(&ids, now, Duration::ZERO, &mut rng);
        assert!(zero.iter().all(|(_, t)| *t == now));
    }
    use crate::time::{MINUTE, SECOND};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_millis(s * 1000)
    }

    #[test]
    fn release_adds_the_hold_to_held_for_and_makes_it_due_at_once() {
        let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(0));
        d.held_for = 2 * MINUTE;
        d.state = DeliveryState::Held;
        d.held = Some(Held {
            connection: "payments".into(),
            since: at(100),
        });
        assert_eq!(d.held_for_at(at(130)), 2 * MINUTE + 30 * SECOND);
        d.release(at(400));
        assert_eq!(d.state, DeliveryState::Due);
        assert_eq!(d.due_at, at(400));
        assert_eq!(d.held_for, 2 * MINUTE + 300 * SECOND);
        assert!(d.held.is_none());
    }

    #[test]
    fn a_hold_released_within_its_millisecond_still_counts_and_shows() {
        // Held behind a probe that answered at once: the release reads as
        // a release, and the time held is the store's smallest unit.
        let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(0));
        d.state = DeliveryState::Held;
        d.held = Some(Held {
            connection: "payments".into(),
            since: at(100),
        });
        assert_eq!(d.held_for_at(at(100)), Held::SHORTEST);
        d.release(at(100));
        assert_eq!(d.held_for, Duration::from_millis(1));
        assert!(d.released_since_run());
    }

    #[test]
    fn claimable_when_due_or_lease_ended() {
        let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(10));
        assert!(!d.claimable(at(9)));
        assert!(d.claimable(at(10)));
        d.state = DeliveryState::Running;
        d.lease = Some(Lease {
            owner: "w".into(),
            token: LeaseToken(1),
            until: at(40),
        });
        assert!(!d.claimable(at(39)));
        assert!(d.claimable(at(40)));
        for s in [
            DeliveryState::Held,
            DeliveryState::Succeeded,
            DeliveryState::Failed,
            DeliveryState::Parked,
        ] {
            d.state = s;
            assert!(!d.claimable(at(1_000_000)), "{s}");
        }
    }

    #[test]
    fn operator_retry_gives_a_fresh_budget() {
        let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(0));
        d.state = DeliveryState::Failed;
        d.attempts = 10;
        d.held_for = 5 * MINUTE;
        d.finished_at = Some(at(50));
        assert!(d.retryable_by_operator());
        d.operator_retry(at(70), at(60));
        assert_eq!(
            (d.state, d.attempts, d.budget_from, d.held_for, d.due_at),
            (DeliveryState::Due, 0, at(60), Duration::ZERO, at(70))
        );
        assert_eq!(d.finished_at, None);
        assert!(!d.retryable_by_operator());
    }

    #[test]
    fn a_skip_is_recorded_once_frees_a_strict_slot_and_a_retry_clears_it() {
        use crate::key_rule::KeyRule;
        let mut d = Delivery::new(DeliveryId(1), EventId(1), "s", at(0));
        d.key = Some(crate::key::Key::stored("c-1".into()));
        d.key_rule = Some(KeyRule::Strict);
        assert!(!d.skippable_by_operator(), "a due delivery is not skipped");
        d.state = DeliveryState::Failed;
        d.finished_at = Some(at(5));
        assert!(d.holds_slot(), "a strict failure holds its key");
        let before = d.clone();
        d.skip("ana", at(9));
        assert_eq!(
            d.skipped,
            Some(Skipped {
                by: "ana".into(),
                at: at(9)
            })
        );
        assert_eq!(
            (d.state, d.finished_at, d.updated_at),
            (DeliveryState::Failed, Some(at(5)), at(9))
        );
        assert!(d.gave_slot_up(&before) && !d.holds_slot());
        assert!(!d.skippable_by_operator(), "skipped once");
        assert!(d.retryable_by_operator(), "a skipped delivery may still be retried");
        let skipped = d.clone();
        d.operator_retry(at(20), at(20));
        assert_eq!(d.skipped, None);
        assert!(
            d.takes_slot(&skipped),
            "retried, it takes its key's slot again or waits"
        );
        let mut fifo = before.clone();
        fifo.key_rule = Some(KeyRule::Fifo);
        let was = fifo.clone();
        fifo.skip("ana", at(9));
        assert!(!fifo.gave_slot_up(&was), "a fifo failure held no slot to give up");
    }

    #[test]
    fn an_operator_name_is_short_printable_text() {
        assert_eq!(check_operator_name("ana@ops"), Ok(()));
        assert_eq!(check_operator_name(""), Err(OperatorNameInvalid::Empty));
        assert_eq!(check_operator_name(&"a".repeat(65)), Err(OperatorNameInvalid::TooLong));
        assert_eq!(check_operator_name(&"a".repeat(64)), Ok(()));
        assert_eq!(check_operator_name("a\nb"), Err(OperatorNameInvalid::Control));
    }

    #[test]
    fn states_round_trip() {
        for s in DeliveryState::ALL {
            assert_eq!(DeliveryState::parse(s.as_str()), Some(s));
        }
        assert_eq!(DeliveryState::ALL.iter().filter(|s| s.is_finished()).count(), 3);
    }
}
