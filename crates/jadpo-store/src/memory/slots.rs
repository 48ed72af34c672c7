//! Each ordered key's slots in memory (docs/decisions.md, "Per-key
//! order"): the count taken, the holder, and who waits, by id.

use super::MemoryStore;
use jadpo_core::{Delivery, DeliveryId, DeliveryState, Timestamp};
use std::collections::BTreeSet;

/// A key rule broken on purpose, for the simulation's test that its key
/// checks catch a store that breaks one: never set otherwise.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFault {
    /// A freed slot goes to the key's latest queued delivery.
    LatestFirst,
    /// A delivery takes a slot whether or not one is free.
    NoCap,
}

/// One key's slots (`jadpo_core::key_rule`): how many of its deliveries
/// hold one, and the ones waiting for one, lowest id (emit order) first.
#[derive(Debug, Default)]
pub(super) struct Slots {
    taken: u32,
    /// The delivery that took a slot last: what the queued wait for.
    holder: Option<DeliveryId>,
    queued: BTreeSet<DeliveryId>,
}

impl MemoryStore {
    /// Breaks a key rule from now on (the simulation's own test of its
    /// checks).
    #[doc(hidden)]
    pub fn inject_key_fault(&mut self, fault: KeyFault) {
        self.key_fault = Some(fault);
    }

    /// What a queued delivery waits for: the delivery of its key that took
    /// a slot last (with one slot, the one holding it).
    pub fn waits_for(&self, id: DeliveryId) -> Option<DeliveryId> {
        let d = self.delivery(id).filter(|d| d.state == DeliveryState::Queued)?;
        self.slots.get(&(d.subscriber.clone(), d.key.clone()?))?.holder
    }

    /// A delivery about to be due takes a slot of its key, or, when its
    /// key has none free, waits queued for one.
    pub(super) fn take_slot(&mut self, d: &mut Delivery, now: Timestamp) {
        let (Some(rule), Some(key)) = (d.key_rule, &d.key) else {
            return;
        };
        let slots = self.slots.entry((d.subscriber.clone(), key.clone())).or_default();
        if rule.starts_due(slots.taken) || self.key_fault == Some(KeyFault::NoCap) {
            slots.taken += 1;
            slots.holder = Some(d.id);
        } else {
            d.queue(now);
            slots.queued.insert(d.id);
        }
    }

    /// `d` gave its key's slot up: the queued delivery with the lowest id
    /// takes it, else the key has one more free.
    pub(super) fn free_slot(&mut self, d: &Delivery, now: Timestamp) {
        let Some(key) = &d.key else { return };
        let k = (d.subscriber.clone(), key.clone());
        let slots = self
            .slots
            .get_mut(&k)
            .expect("a delivery that holds a slot has its key's");
        let next = match self.key_fault {
            Some(KeyFault::LatestFirst) => slots.queued.pop_last(),
            _ => slots.queued.pop_first(),
        };
        match next {
            Some(next) => {
                slots.holder = Some(next);
                let mut n = self.get(next).clone();
                n.promote(now);
                self.put(n);
            }
            None => {
                slots.taken = slots.taken.checked_sub(1).expect("a freed slot was taken");
                if slots.taken == 0 {
                    self.slots.remove(&k);
                }
            }
        }
    }
}
