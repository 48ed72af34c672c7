//! Each ordered key's slots in memory (docs/decisions.md, "Per-key
//! order"): the count taken, the holder, and who waits, by id.

use super::MemoryStore;
use jadpo_core::{Delivery, DeliveryId, DeliveryState, Timestamp};
use std::collections::BTreeSet;

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
        if rule.starts_due(slots.taken) {
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
        match slots.queued.pop_first() {
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
