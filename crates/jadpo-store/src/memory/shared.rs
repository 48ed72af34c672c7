//! [`MemoryStore`] behind a mutex and the store traits, shared by tasks:
//! the in-memory store the simulation and tests run the engine on.

use super::MemoryStore;
use crate::store::{ScheduleStore, Store};
use crate::types::*;
use jadpo_core::alert::SendDecision;
use jadpo_core::clock::Anchor;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::DeliveryState;
use jadpo_core::{BreakerPolicy, Delivery, DeliveryId, EventId, FailureRecord, LeaseToken, Timestamp};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The in-memory store behind a mutex, shared by tasks.
#[derive(Clone, Debug)]
pub struct SharedMemoryStore(Arc<Mutex<MemoryStore>>);

impl SharedMemoryStore {
    /// An empty store whose breakers open and pause by `policy`.
    pub fn new(policy: BreakerPolicy) -> SharedMemoryStore {
        SharedMemoryStore(Arc::new(Mutex::new(MemoryStore::new(policy))))
    }

    /// Runs `f` on the store. No lock is held across an await.
    pub fn with<T>(&self, f: impl FnOnce(&mut MemoryStore) -> T) -> T {
        let mut guard = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    }
}

impl Store for SharedMemoryStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Memory has no migrations: always the build's own.
    async fn schema_standing(&self) -> Result<crate::upgrade::Standing, StoreError> {
        Ok(crate::upgrade::Standing {
            store: 0,
            build: 0,
            needs: 0,
        })
    }

    async fn emit(&self, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, StoreError> {
        self.with(|s| s.emit(events, now))
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimReport, StoreError> {
        Ok(self.with(|s| s.claim(req)))
    }

    async fn hold_claimed(
        &self,
        id: DeliveryId,
        token: LeaseToken,
        connection: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.with(|s| s.hold_claimed(id, token, connection, now))
    }

    async fn give_back(&self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        self.with(|s| s.give_back(id, token, now))
    }

    async fn commit_handled(&self, id: DeliveryId, token: LeaseToken, _now: Timestamp) -> Result<(), StoreError> {
        self.with(|s| s.commit_handled(id, token))
    }

    async fn finish_batch(&self, batch: &[Finish]) -> Result<Vec<Result<FinishReport, StoreError>>, StoreError> {
        Ok(self.with(|s| batch.iter().map(|f| s.finish(f)).collect()))
    }

    async fn sweep(&self, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, StoreError> {
        Ok(self.with(|s| s.sweep(now, wake_lease)))
    }

    async fn retry(&self, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        Ok(self.with(|s| s.retry(due, now)))
    }

    async fn skip(&self, ids: &[DeliveryId], by: &str, now: Timestamp) -> Result<Vec<DeliveryId>, StoreError> {
        Ok(self.with(|s| s.skip(ids, by, now)))
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>, StoreError> {
        Ok(self.with(|s| s.delivery(id).cloned()))
    }

    async fn waits_for(&self, id: DeliveryId) -> Result<Option<DeliveryId>, StoreError> {
        Ok(self.with(|s| s.waits_for(id)))
    }

    async fn list(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        Ok(self.with(|s| s.list(filter)))
    }

    async fn attempts(&self, id: DeliveryId) -> Result<Vec<AttemptRecord>, StoreError> {
        Ok(self.with(|s| s.attempts(id)))
    }

    async fn event(&self, id: EventId) -> Result<Option<EventRecord>, StoreError> {
        Ok(self.with(|s| s.event(id).cloned()))
    }

    async fn alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        Ok(self.with(|s| s.alerts().list(limit)))
    }

    async fn claim_alert_sends(
        &self,
        now: Timestamp,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<AlertRecord>, StoreError> {
        Ok(self.with(|s| s.alerts_mut().claim(now, limit, lease)))
    }

    async fn finish_alert_send(&self, id: i64, attempt: u32, decision: &SendDecision) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.alerts_mut().finish(id, attempt, decision)))
    }

    async fn limit_states(&self) -> Result<Vec<jadpo_core::limit::LimitState>, StoreError> {
        Ok(self.with(|s| s.limit_states().cloned().collect()))
    }

    async fn waiting_counts(&self) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        Ok(self.with(|s| s.waiting_counts()))
    }

    async fn add_minutes(&self, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), StoreError> {
        self.with(|s| s.add_minutes(counts, forget_before));
        Ok(())
    }

    async fn minutes(&self, since: Timestamp) -> Result<Vec<MinuteCount>, StoreError> {
        Ok(self.with(|s| s.minutes(since)))
    }

    async fn breakers(&self) -> Result<Vec<BreakerView>, StoreError> {
        Ok(self.with(|s| {
            s.breakers()
                .map(|b| BreakerView {
                    breaker: b.clone(),
                    held: s.held_count(&b.connection) as u64,
                })
                .collect()
        }))
    }

    async fn prune(&self, before: Timestamp, batch: usize) -> Result<usize, StoreError> {
        Ok(self.with(|s| s.prune(before, batch)))
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.with(|s| s.next_due()))
    }

    async fn start_session(&self, hash: &str, expires_at: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        self.with(|s| {
            s.sessions.retain(|_, until| *until > now);
            s.sessions.insert(hash.to_owned(), expires_at);
        });
        Ok(())
    }

    async fn session_alive(&self, hash: &str, now: Timestamp) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.sessions.get(hash).is_some_and(|until| *until > now)))
    }

    async fn end_session(&self, hash: &str) -> Result<(), StoreError> {
        self.with(|s| s.sessions.remove(hash));
        Ok(())
    }

    async fn clock_anchor(&self) -> Result<Option<Anchor>, StoreError> {
        Ok(self.with(|s| s.clock_anchor))
    }

    async fn keep_clock_anchor(&self, anchor: Anchor) -> Result<Anchor, StoreError> {
        Ok(self.with(|s| *s.clock_anchor.get_or_insert(anchor)))
    }

    async fn counts(&self) -> Result<BTreeMap<DeliveryState, u64>, StoreError> {
        Ok(self.with(|s| {
            let mut counts = BTreeMap::new();
            for d in s.deliveries() {
                *counts.entry(d.state).or_default() += 1;
            }
            counts
        }))
    }

    async fn gauges(&self, q: &GaugeQuery<'_>) -> Result<Gauges, StoreError> {
        Ok(self.with(|s| s.gauges(q)))
    }

    async fn counts_up_to(&self, cap: u64) -> Result<BTreeMap<DeliveryState, u64>, StoreError> {
        let mut counts = self.counts().await?;
        for n in counts.values_mut() {
            *n = (*n).min(cap);
        }
        Ok(counts)
    }
}

impl ScheduleStore for SharedMemoryStore {
    async fn claim_schedules(
        &self,
        schedules: &[(String, Timestamp)],
        worker: &str,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<ScheduleClaim>, StoreError> {
        Ok(self.with(|s| s.claim_schedules(schedules, worker, now, lease)))
    }

    async fn finish_schedule(
        &self,
        name: &str,
        token: LeaseToken,
        failure: Option<FailureRecord>,
        next_due: Timestamp,
        now: Timestamp,
    ) -> Result<Option<ScheduleAlert>, StoreError> {
        self.with(|s| s.finish_schedule(name, token, failure, next_due, now))
    }

    async fn schedules(&self) -> Result<Vec<ScheduleState>, StoreError> {
        Ok(self.with(|s| s.schedules().cloned().collect()))
    }
}
