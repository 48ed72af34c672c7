//! Per-key order and caps: which of a subscriber's deliveries that share a
//! key may be due at once (docs/decisions.md, "Per-key order").
//!
//! With `order: fifo` or `order: strict` one delivery of a key holds the
//! key's one slot at a time, and the rest wait, queued, in emit order;
//! with `concurrency_per_key: N`, N slots. A delivery holds its slot while
//! it is due (including waiting for its retry), running or held behind a
//! breaker, so a retry or a hold keeps its place. Waiting for a slot is not
//! an attempt and spends no budget.
//!
//! The stores keep the count of slots taken per key and hand a freed slot
//! to the queued delivery with the lowest id; these functions are the
//! rules they apply, and the model the conformance tests check them by.

use crate::delivery_state::DeliveryState;
use std::fmt;

/// The largest `concurrency_per_key:`.
pub const MAX_CONCURRENCY_PER_KEY: u32 = 1_000;

/// What a subscriber asks of its deliveries that share a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyRule {
    /// One at a time, in emit order; a delivery that fails for good or is
    /// parked frees the key for the next.
    Fifo,
    /// As `Fifo`, but a delivery that fails for good or is parked keeps
    /// the key until an operator retries it (and it ends) or skips it
    /// (`Delivery::skip`).
    Strict,
    /// At most this many at once, in no particular order.
    Cap(u32),
}

/// Why a `concurrency_per_key:` cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapOutOfRange(pub i128);

impl fmt::Display for CapOutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`concurrency_per_key:` takes a whole number from 1 to {MAX_CONCURRENCY_PER_KEY}, not {}",
            self.0
        )
    }
}

impl KeyRule {
    /// `concurrency_per_key: n`, checked.
    pub fn cap(n: i128) -> Result<KeyRule, CapOutOfRange> {
        match u32::try_from(n) {
            Ok(n) if (1..=MAX_CONCURRENCY_PER_KEY).contains(&n) => Ok(KeyRule::Cap(n)),
            _ => Err(CapOutOfRange(n)),
        }
    }

    /// The rule as a store keeps it on a delivery: `fifo`, `strict`,
    /// `cap:N`.
    pub fn stored(self) -> String {
        match self {
            KeyRule::Fifo => "fifo".into(),
            KeyRule::Strict => "strict".into(),
            KeyRule::Cap(n) => format!("cap:{n}"),
        }
    }

    /// A rule as [`KeyRule::stored`] wrote it; `None` for anything else.
    pub fn from_stored(s: &str) -> Option<KeyRule> {
        match s {
            "fifo" => Some(KeyRule::Fifo),
            "strict" => Some(KeyRule::Strict),
            _ => s
                .strip_prefix("cap:")?
                .parse::<i128>()
                .ok()
                .and_then(|n| KeyRule::cap(n).ok()),
        }
    }

    /// How many deliveries of one key may hold a slot at once.
    pub fn slots(self) -> u32 {
        match self {
            KeyRule::Fifo | KeyRule::Strict => 1,
            KeyRule::Cap(n) => n,
        }
    }

    /// Whether freed slots go to the queued deliveries in emit order (the
    /// lowest id first). With a cap they do too, so that no delivery waits
    /// behind later ones, but nothing depends on it.
    pub fn in_order(self) -> bool {
        matches!(self, KeyRule::Fifo | KeyRule::Strict)
    }

    /// Whether a new delivery, with `taken` slots of its key already
    /// taken, starts due (taking a slot) rather than queued.
    pub fn starts_due(self, taken: u32) -> bool {
        taken < self.slots()
    }

    /// Whether a delivery in `state` holds a slot of its key: while it may
    /// still run, and, under `Strict`, when it failed for good or is
    /// parked, so that the key waits for an operator (until they retry or
    /// skip it: `Delivery::holds_slot` adds the skip).
    pub fn holds_slot(self, state: DeliveryState) -> bool {
        match state {
            DeliveryState::Due | DeliveryState::Running | DeliveryState::Held => true,
            DeliveryState::Queued => false,
            DeliveryState::Succeeded => false,
            DeliveryState::Failed | DeliveryState::Parked => self == KeyRule::Strict,
        }
    }

    /// Whether moving a delivery from `from` to `to` frees its key's slot
    /// (the store then hands it to the next queued delivery).
    pub fn frees_slot(self, from: DeliveryState, to: DeliveryState) -> bool {
        self.holds_slot(from) && !self.holds_slot(to)
    }

    /// Whether moving a delivery from `from` to `to` takes a slot: an
    /// operator's retry of a failed or parked delivery of a key, which
    /// under `Fifo` or a cap gave its slot up when it ended. The store
    /// makes it due only when the key has room, and queues it otherwise.
    pub fn takes_slot(self, from: DeliveryState, to: DeliveryState) -> bool {
        !self.holds_slot(from) && self.holds_slot(to)
    }
}

#[cfg(test)]
#[path = "key_tests.rs"]
mod tests;
