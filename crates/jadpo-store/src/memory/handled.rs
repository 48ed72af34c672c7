//! The in-memory store's handled records: per event, the subscribers
//! whose run committed its effects, so a run lost after that is never run
//! again.

use jadpo_core::EventId;
use std::collections::HashMap;

/// Looked up by `&str` with no key made for it: a claim asks of every
/// candidate.
#[derive(Debug, Default)]
pub(super) struct Handled(HashMap<EventId, Vec<String>>);

impl Handled {
    pub(super) fn contains(&self, subscriber: &str, event: EventId) -> bool {
        self.0.get(&event).is_some_and(|s| s.iter().any(|s| s == subscriber))
    }

    pub(super) fn insert(&mut self, subscriber: String, event: EventId) {
        let subscribers = self.0.entry(event).or_default();
        if !subscribers.contains(&subscriber) {
            subscribers.push(subscriber);
        }
    }

    pub(super) fn remove(&mut self, subscriber: &str, event: EventId) {
        if let Some(subscribers) = self.0.get_mut(&event) {
            subscribers.retain(|s| s != subscriber);
            if subscribers.is_empty() {
                self.0.remove(&event);
            }
        }
    }
}
