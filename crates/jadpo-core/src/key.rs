//! A delivery's key: the value of its subscriber's `key:` over its event
//! (docs/app-file.md, "Keys"), what deliveries of one customer, account or
//! order share. What a key asks of them is [`crate::key_rule`].

use std::fmt;

/// The longest key kept, in bytes. A longer one is refused at the emit
/// rather than cut: two keys cut to the same prefix would share an order
/// they do not have.
pub const MAX_KEY_BYTES: usize = 256;

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

/// A delivery's key, and what its subscriber asks of the deliveries that
/// share it: `None` when its key only names them (for lookups), else its
/// `order:` or `concurrency_per_key:` (`crate::key_rule`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyed {
    pub key: Key,
    pub rule: Option<crate::key_rule::KeyRule>,
}

impl From<Key> for Keyed {
    /// A key that only names its deliveries.
    fn from(key: Key) -> Keyed {
        Keyed { key, rule: None }
    }
}
