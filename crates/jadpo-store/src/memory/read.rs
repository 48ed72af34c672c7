//! Reading the in-memory store: deliveries, breakers, alerts, the
//! per-minute counts, attempts and events, as the drivers' `read.rs` do.

use super::MemoryStore;
use crate::alerts::AlertBook;
use crate::types::*;
use jadpo_core::breaker::Breaker;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};

impl MemoryStore {
    pub fn delivery(&self, id: DeliveryId) -> Option<&Delivery> {
        self.deliveries.get(&id)
    }

    /// Every delivery, oldest first.
    pub fn deliveries(&self) -> impl DoubleEndedIterator<Item = &Delivery> {
        self.deliveries.values()
    }

    pub fn delivery_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Newest first, as `jadpo deliveries` lists them.
    pub fn list(&self, filter: &DeliveryFilter) -> Vec<Delivery> {
        let older = match filter.before {
            Some(b) => self.deliveries.range(..b),
            None => self.deliveries.range(..),
        };
        let it = older.rev().map(|(_, d)| d).filter(|d| filter.matches(d)).cloned();
        match filter.limit {
            Some(n) => it.take(n).collect(),
            None => it.collect(),
        }
    }

    pub fn breakers(&self) -> impl Iterator<Item = &Breaker> {
        self.breakers.values()
    }

    pub fn breaker(&self, connection: &str) -> Option<&Breaker> {
        self.breakers.get(connection)
    }

    pub fn held_count(&self, connection: &str) -> usize {
        self.held.get(connection).map_or(0, |h| h.len())
    }

    pub fn alerts(&self) -> &AlertBook {
        &self.alerts
    }

    pub fn add_minutes(&mut self, counts: &[MinuteCount], forget_before: Timestamp) {
        for c in counts {
            *self.minutes.entry((minute_of(c.minute), c.series.clone())).or_default() += c.n;
        }
        self.minutes.retain(|(m, _), _| *m >= minute_of(forget_before));
    }

    pub fn minutes(&self, since: Timestamp) -> Vec<MinuteCount> {
        self.minutes
            .range((minute_of(since), String::new())..)
            .map(|((minute, series), n)| MinuteCount {
                minute: *minute,
                series: series.clone(),
                n: *n,
            })
            .collect()
    }

    pub fn alerts_mut(&mut self) -> &mut AlertBook {
        &mut self.alerts
    }

    pub fn attempts(&self, id: DeliveryId) -> Vec<AttemptRecord> {
        self.attempts.iter().filter(|a| a.delivery == id).cloned().collect()
    }

    pub fn event(&self, id: EventId) -> Option<&EventRecord> {
        self.events.get(&id)
    }

    pub fn is_handled(&self, subscriber: &str, event: EventId) -> bool {
        self.handled.contains(&(subscriber.to_owned(), event))
    }
}
