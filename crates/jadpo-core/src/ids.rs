//! The ids a delivery is known by: its own, its event's, and the token of
//! the lease it runs under. Apart from `delivery.rs` so that every module
//! of the core can name a delivery without depending on what one is.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A delivery's id, as its store numbered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(pub i64);

/// An event's id, as its store numbered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(pub i64);

/// Issued fresh by every claim. Every write after a claim names the token it
/// was claimed with, so a worker whose lease was taken over changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub i64);

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
