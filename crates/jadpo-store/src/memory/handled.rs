//! The in-memory store's handled records: the deliveries whose run
//! committed its effects, so a run lost after that is never run again.
//!
//! PostgreSQL keys its records by event and subscriber, which is one
//! delivery; here a record lives exactly as long as its delivery's row (it
//! is removed with it), so it is kept by the delivery's id. A claim asks of
//! every candidate, and nearly every answer is no: a set of ids answers
//! that without hashing a key or comparing a subscriber's name.

use jadpo_core::DeliveryId;
use std::collections::BTreeSet;

#[derive(Debug, Default)]
pub(super) struct Handled(BTreeSet<DeliveryId>);

impl Handled {
    pub(super) fn contains(&self, id: DeliveryId) -> bool {
        self.0.contains(&id)
    }

    pub(super) fn insert(&mut self, id: DeliveryId) {
        self.0.insert(id);
    }

    pub(super) fn remove(&mut self, id: DeliveryId) {
        self.0.remove(&id);
    }
}
