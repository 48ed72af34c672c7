//! Reading the in-memory store: deliveries, breakers, alerts, the
//! per-minute counts, attempts and events, as the drivers' `read.rs` do.

use super::MemoryStore;
use crate::alerts::AlertBook;
use crate::types::*;
use jadpo_core::breaker::Breaker;
use jadpo_core::{Delivery, DeliveryId, DeliveryState, EventId, Timestamp};

impl MemoryStore {
    /// The delivery with this id, if it is kept.
    pub fn delivery(&self, id: DeliveryId) -> Option<&Delivery> {
        self.deliveries.get(&id).map(|d| &**d)
    }

    /// Every delivery, oldest first.
    pub fn deliveries(&self) -> impl DoubleEndedIterator<Item = &Delivery> {
        self.deliveries.values().map(|d| &**d)
    }

    /// How many deliveries it keeps.
    pub fn delivery_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Newest first, as `jadpo deliveries` lists them.
    pub fn list(&self, filter: &DeliveryFilter) -> Vec<Delivery> {
        let older = match filter.before {
            Some(b) => self.deliveries.range(..b),
            None => self.deliveries.range(..),
        };
        let it = older.rev().map(|(_, d)| &**d).filter(|d| filter.matches(d)).cloned();
        match filter.limit {
            Some(n) => it.take(n).collect(),
            None => it.collect(),
        }
    }

    /// Every breaker row, by connection.
    pub fn breakers(&self) -> impl Iterator<Item = &Breaker> {
        self.breakers.values()
    }

    /// The breaker of `connection`; `None` when it has no row (closed).
    pub fn breaker(&self, connection: &str) -> Option<&Breaker> {
        self.breakers.get(connection)
    }

    /// How many deliveries are held behind `connection`'s breaker.
    pub fn held_count(&self, connection: &str) -> usize {
        self.indexes.held.get(connection).map_or(0, |h| h.len())
    }

    /// What `/metrics` shows of the store (`Store::gauges`), counts capped
    /// as the drivers cap them.
    pub fn gauges(&self, q: &GaugeQuery<'_>) -> Gauges {
        let breakers = self
            .breakers()
            .map(|b| BreakerView {
                breaker: b.clone(),
                held: (self.held_count(&b.connection) as u64).min(q.cap),
            })
            .collect();
        let waiting = self
            .waiting_counts()
            .into_iter()
            .filter(|(c, n)| *n > 0 && q.connections.contains(c))
            .map(|(c, n)| (c, n.min(q.cap)))
            .collect();
        let mut oldest_due = std::collections::BTreeMap::new();
        let due = self
            .deliveries
            .values()
            .filter(|d| d.state == DeliveryState::Due && d.due_at <= q.now);
        for d in due.filter(|d| q.subscribers.contains(&d.subscriber)) {
            let at = oldest_due.entry(d.subscriber.clone()).or_insert(d.due_at);
            *at = (*at).min(d.due_at);
        }
        Gauges {
            breakers,
            waiting,
            oldest_due,
        }
    }

    /// The alert messages.
    pub fn alerts(&self) -> &AlertBook {
        &self.alerts
    }

    /// Adds `counts` to the per-minute summary, each to the minute it is in,
    /// and forgets the minutes before the one `forget_before` is in.
    pub fn add_minutes(&mut self, counts: &[MinuteCount], forget_before: Timestamp) {
        for c in counts {
            *self.minutes.entry((minute_of(c.minute), c.series.clone())).or_default() += c.n;
        }
        self.minutes.retain(|(m, _), _| *m >= minute_of(forget_before));
    }

    /// The per-minute summary from the minute `since` is in, by minute then
    /// series.
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

    /// The alert messages, to claim and finish their sends.
    pub fn alerts_mut(&mut self) -> &mut AlertBook {
        &mut self.alerts
    }

    /// The attempts of delivery `id`, oldest first.
    pub fn attempts(&self, id: DeliveryId) -> Vec<AttemptRecord> {
        self.attempts.iter().filter(|a| a.delivery == id).cloned().collect()
    }

    /// The event with this id, if it is kept.
    pub fn event(&self, id: EventId) -> Option<&EventRecord> {
        self.events.get(&id)
    }

    /// Whether a handled record exists for delivery `id`: a run of it
    /// committed.
    pub fn is_handled(&self, id: DeliveryId) -> bool {
        self.handled.contains(id)
    }
}
