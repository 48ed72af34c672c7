//! Per-key order and caps in the simulation (docs/retries.md, "Order per
//! key"): which events get which key, and the invariants the deliveries of
//! one key keep after every step.
//!
//! - No key has more deliveries holding a slot than its rule gives it (one
//!   under `order:`, N under `concurrency_per_key:`).
//! - No delivery waits `queued` while its key has a slot free: the key's
//!   backlog waits only for the key itself, never for other keys.
//! - Under `order:`, a delivery starts for the first time only once every
//!   earlier delivery of its key has started or ended (an operator's
//!   retry puts one back in line among those waiting then).
//!
//! With every delivery finished at the end (the run's own check), no key
//! waited for ever.

use crate::config::SimConfig;
use jadpo_core::key::{Key, KeyValue, Keyed};
use jadpo_core::{DeliveryId, DeliveryState};
use jadpo_store::memory::MemoryStore;
use jadpo_store::Claimed;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

/// The keys of one event's deliveries: each keyed subscriber's key drawn
/// among its `count` keys.
pub(crate) fn keys_of_event(cfg: &SimConfig, rng: &mut ChaCha8Rng) -> BTreeMap<String, Keyed> {
    cfg.keyed
        .iter()
        .map(|(subscriber, k)| {
            let name = format!("k{}", rng.random_range(0..k.count));
            let key = Key::new(KeyValue::Str(&name)).expect("a short key");
            (
                subscriber.clone(),
                Keyed {
                    key,
                    rule: Some(k.rule),
                },
            )
        })
        .collect()
}

#[derive(Debug, Default)]
pub(crate) struct KeyChecker {
    /// Each (subscriber, key)'s deliveries, in id (emit) order.
    by_key: BTreeMap<(String, Key), Vec<DeliveryId>>,
    key_of: BTreeMap<DeliveryId, (String, Key)>,
    /// Deliveries claimed at least once.
    started: BTreeSet<DeliveryId>,
    /// Deliveries an operator retried: each takes its place again among
    /// those waiting then, not its place in emit order.
    retried: BTreeSet<DeliveryId>,
}

fn err<T>(what: impl Into<String>) -> Result<T, String> {
    Err(what.into())
}

impl KeyChecker {
    pub(crate) fn emitted(&mut self, store: &MemoryStore, ids: &[DeliveryId]) {
        for id in ids {
            let d = store.delivery(*id).expect("just emitted");
            if let (Some(key), Some(_)) = (&d.key, d.key_rule) {
                let k = (d.subscriber.clone(), key.clone());
                self.by_key.entry(k.clone()).or_default().push(*id);
                self.key_of.insert(*id, k);
            }
        }
    }

    /// Finished deliveries that leave the store.
    pub(crate) fn forget(&mut self, ids: &[DeliveryId]) {
        for id in ids {
            self.started.remove(id);
            self.retried.remove(id);
            if let Some(k) = self.key_of.remove(id) {
                if let Some(list) = self.by_key.get_mut(&k) {
                    list.retain(|d| d != id);
                    if list.is_empty() {
                        self.by_key.remove(&k);
                    }
                }
            }
        }
    }

    pub(crate) fn operator_retried(&mut self, id: DeliveryId) {
        self.retried.insert(id);
    }

    /// A claim's runs: under `order:`, none starts for the first time
    /// ahead of an earlier delivery of its key that has neither started
    /// nor ended (nor was put back by an operator's retry).
    pub(crate) fn claimed(&mut self, store: &MemoryStore, claimed: &[Claimed]) -> Result<(), String> {
        for c in claimed {
            let id = c.delivery.id;
            // Only a keyed delivery's start is ever looked for, by a later
            // one of its key.
            if c.delivery.key_rule.is_none() {
                continue;
            }
            let first = self.started.insert(id);
            let in_order = c.delivery.key_rule.is_some_and(|r| r.in_order());
            let Some(k) = self.key_of.get(&id).filter(|_| first && in_order) else {
                continue;
            };
            for earlier in self.by_key[k].iter().take_while(|e| **e < id) {
                let e = store.delivery(*earlier).ok_or("a keyed delivery missing")?;
                let passed = self.started.contains(earlier) || self.retried.contains(earlier);
                if !passed && !e.state.is_finished() {
                    return err(format!(
                        "delivery {id} of key {} started ahead of earlier delivery {earlier}, {}",
                        k.1, e.state
                    ));
                }
            }
        }
        Ok(())
    }

    /// The keys of the deliveries in `which` (every key when `None`): no
    /// key over its slots, none queued while a slot is free.
    pub(crate) fn check(&self, store: &MemoryStore, which: Option<&[DeliveryId]>) -> Result<(), String> {
        let keys: Box<dyn Iterator<Item = &(String, Key)>> = match which {
            Some(ids) => Box::new(
                ids.iter()
                    .filter_map(|id| self.key_of.get(id))
                    .collect::<BTreeSet<_>>()
                    .into_iter(),
            ),
            None => Box::new(self.by_key.keys()),
        };
        for k in keys {
            let mut holding = 0;
            let mut queued = 0;
            let mut rule = None;
            for id in &self.by_key[k] {
                let d = store.delivery(*id).ok_or("a keyed delivery missing")?;
                rule = d.key_rule;
                holding += u32::from(d.holds_slot());
                queued += u32::from(d.state == DeliveryState::Queued);
            }
            let slots = rule.map_or(0, |r| r.slots());
            if holding > slots {
                return err(format!(
                    "key {} of {}: {holding} deliveries hold its {slots} slot(s)",
                    k.1, k.0
                ));
            }
            if queued > 0 && holding < slots {
                return err(format!(
                    "key {} of {}: {queued} queued while {} of its {slots} slot(s) are free",
                    k.1,
                    k.0,
                    slots - holding
                ));
            }
        }
        Ok(())
    }

    /// Failed or parked deliveries of `strict` keys: the key's later
    /// deliveries wait for an operator to retry or skip them.
    pub(crate) fn blocking(store: &MemoryStore) -> Vec<DeliveryId> {
        store
            .deliveries()
            .filter(|d| d.skippable_by_operator() && d.holds_slot())
            .map(|d| d.id)
            .collect()
    }
}
