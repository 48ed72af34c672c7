//! Per-key order and caps: which of a subscriber's deliveries that share a
//! key may be due at once (docs/decisions.md, "Per-key order").
//!
//! A subscriber with `key:` gives each of its deliveries the key's value
//! at the emit. With `order: fifo` or `order: strict` one delivery of a key
//! holds the key's one slot at a time, and the rest wait, queued, in emit
//! order; with `concurrency_per_key: N`, N slots. A delivery holds its slot
//! while it is due (including waiting for its retry), running or held
//! behind a breaker, so a retry or a hold keeps its place. Waiting for a
//! slot is not an attempt and spends no budget.
//!
//! The stores keep the count of slots taken per key and hand a freed slot
//! to the queued delivery with the lowest id; these functions are the
//! rules they apply, and the model the conformance tests check them by.

use crate::delivery::DeliveryState;
use std::fmt;

/// The longest key kept, in bytes. A longer one is refused at the emit
/// rather than cut: two keys cut to the same prefix would share an order
/// they do not have.
pub const MAX_KEY_BYTES: usize = 256;

/// The largest `concurrency_per_key:`.
pub const MAX_CONCURRENCY_PER_KEY: u32 = 1_000;

/// A delivery's key: the value of the subscriber's `key:` expression over
/// its event, as text (an int in decimal).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

/// The value a `key:` expression found in an event, as the shell read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyValue<'a> {
    Str(&'a str),
    Int(i64),
    /// The field is absent, or null.
    Missing,
    /// Any other JSON value: its type's name (`float`, `bool`, `object`, `list`).
    Other(&'static str),
}

/// Why an event's value cannot be a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyError {
    Missing,
    Empty,
    NotStringOrInt { found: &'static str },
    TooLong { bytes: usize },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing => {
                f.write_str("the key's field is missing or null; every event of a keyed subscriber needs it")
            }
            KeyError::Empty => f.write_str("the key is an empty string; give it a value"),
            KeyError::NotStringOrInt { found } => write!(f, "a key is a string or an int, not {found}"),
            KeyError::TooLong { bytes } => {
                write!(f, "the key is {bytes} bytes long; at most {MAX_KEY_BYTES} are kept")
            }
        }
    }
}

impl std::error::Error for KeyError {}

impl Key {
    /// The key for a value found in an event, or why it cannot be one.
    pub fn new(value: KeyValue<'_>) -> Result<Key, KeyError> {
        let text = match value {
            KeyValue::Str("") => return Err(KeyError::Empty),
            KeyValue::Str(s) => s.to_owned(),
            KeyValue::Int(i) => i.to_string(),
            KeyValue::Missing => return Err(KeyError::Missing),
            KeyValue::Other(found) => return Err(KeyError::NotStringOrInt { found }),
        };
        if text.len() > MAX_KEY_BYTES {
            return Err(KeyError::TooLong { bytes: text.len() });
        }
        Ok(Key(text))
    }

    /// A key read back from a store, which checked it on the way in.
    pub fn stored(text: String) -> Key {
        Key(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a subscriber asks of its deliveries that share a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyRule {
    /// One at a time, in emit order; a delivery that fails for good or is
    /// parked frees the key for the next.
    Fifo,
    /// As `Fifo`, but a delivery that fails for good or is parked keeps
    /// the key until an operator retries it (and it ends) or skips it.
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
    /// parked, so that the key waits for an operator.
    pub fn holds_slot(self, state: DeliveryState) -> bool {
        match state {
            DeliveryState::Due | DeliveryState::Running | DeliveryState::Held => true,
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
