//! The in-memory store: every rule end to end, without a database.
//!
//! One owner, `&mut self` methods: the simulation drives it directly and
//! deterministically. Indexes keep a claim, a sweep and a release
//! proportional to what they touch, not to every delivery ever made, so the
//! simulation can run the seed's 5,000-delivery outage quickly.

use crate::types::*;
use jadpo_core::breaker::{Breaker, BreakerPolicy, Gate, Transition};
use jadpo_core::claim::{self, ClaimDecision, ClaimInput};
use jadpo_core::{
    attempt, Alert, Delivery, DeliveryId, DeliveryState, EventId, Lease, LeaseToken, Outcome,
    Timestamp,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct EventRecord {
    pub id: EventId,
    pub name: String,
    pub payload: String,
    pub emitted_at: Timestamp,
}

type Index = BTreeSet<(Timestamp, DeliveryId)>;

#[derive(Debug)]
pub struct MemoryStore {
    policy: BreakerPolicy,
    routes: Routes,
    events: Vec<EventRecord>,
    /// `DeliveryId(n)` is at `deliveries[n - 1]`.
    deliveries: Vec<Delivery>,
    due: Index,
    /// Running deliveries by lease end.
    running: Index,
    /// Held deliveries by connection, then by the time they were held from.
    held: BTreeMap<String, Index>,
    handled: HashSet<(String, EventId)>,
    breakers: BTreeMap<String, Breaker>,
    attempts: Vec<AttemptRecord>,
    alerts: Vec<(Timestamp, Alert)>,
    last_token: i64,
    /// Deliveries changed since the last `take_changed`, for a checker
    /// that looks only at what a step touched.
    changed: Vec<DeliveryId>,
}

impl MemoryStore {
    pub fn new(routes: Routes, policy: BreakerPolicy) -> MemoryStore {
        MemoryStore {
            policy,
            routes,
            events: Vec::new(),
            deliveries: Vec::new(),
            due: Index::new(),
            running: Index::new(),
            held: BTreeMap::new(),
            handled: HashSet::new(),
            breakers: BTreeMap::new(),
            attempts: Vec::new(),
            alerts: Vec::new(),
            last_token: 0,
            changed: Vec::new(),
        }
    }

    pub fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    pub fn emit(&mut self, events: &[NewEvent], now: Timestamp) -> Vec<Emitted> {
        events
            .iter()
            .map(|e| {
                let event_id = EventId(self.events.len() as i64 + 1);
                self.events.push(EventRecord {
                    id: event_id,
                    name: e.name.clone(),
                    payload: e.payload.clone(),
                    emitted_at: now,
                });
                let deliveries = e
                    .subscribers
                    .iter()
                    .map(|s| {
                        let id = DeliveryId(self.deliveries.len() as i64 + 1);
                        self.deliveries
                            .push(Delivery::new(id, event_id, s.clone(), now));
                        self.index(id);
                        id
                    })
                    .collect();
                Emitted {
                    event_id,
                    deliveries,
                }
            })
            .collect()
    }

    /// Claims up to `limit` due deliveries, oldest due first, applying the
    /// claim-time decisions to each.
    pub fn claim(&mut self, req: &ClaimRequest<'_>) -> ClaimReport {
        let now = req.now;
        let mut candidates: Vec<(Timestamp, DeliveryId)> = Vec::with_capacity(req.limit);
        let mut due = self.due.range(..=(now, DeliveryId(i64::MAX))).peekable();
        let mut lost = self
            .running
            .range(..=(now, DeliveryId(i64::MAX)))
            .peekable();
        while candidates.len() < req.limit {
            // Merge the two queues by time so a lost run waits no longer than
            // a due one.
            let next = match (due.peek(), lost.peek()) {
                (Some(a), Some(b)) if b < a => lost.next(),
                (Some(_), _) => due.next(),
                (None, Some(_)) => lost.next(),
                (None, None) => None,
            };
            match next {
                Some(&c) => candidates.push(c),
                None => break,
            }
        }
        let mut report = ClaimReport::default();
        for (_, id) in candidates {
            self.claim_one(id, req, &mut report);
        }
        report
    }

    fn claim_one(&mut self, id: DeliveryId, req: &ClaimRequest<'_>, report: &mut ClaimReport) {
        let now = req.now;
        let d = self.get(id).clone();
        let Some(route) = self.routes.get(&d.subscriber).cloned() else {
            self.update(id, |d| {
                d.state = DeliveryState::Failed;
                d.lease = None;
                d.last_failure = Some(unknown_subscriber());
                d.finished_at = Some(now);
                d.updated_at = now;
            });
            report.gave_up.push(id);
            return;
        };
        let gates: Vec<(&str, Gate)> = route
            .connections
            .iter()
            .map(|c| {
                (
                    c.as_str(),
                    self.breakers.get(c).map_or(Gate::Pass, |b| b.gate(id, now)),
                )
            })
            .collect();
        let handled = self.handled.contains(&(d.subscriber.clone(), d.event_id));
        let decision = claim::decide(ClaimInput {
            delivery: &d,
            budget: route.budget,
            handled,
            gates: &gates,
            now,
        });
        self.last_token += 1;
        let lease = Lease {
            owner: req.worker.to_owned(),
            token: LeaseToken(self.last_token),
            until: now.plus(req.lease),
        };
        let until = lease.until;
        self.update(id, |d| claim::apply(d, &decision, lease, now));
        if decision.lease_expired {
            report.lease_expired.push(id);
        }
        match decision.decision {
            ClaimDecision::Run { probe_for } => {
                for c in &probe_for {
                    self.breaker_mut(c).take_probe(id, until, now);
                }
                report.claimed.push(Claimed {
                    delivery: self.get(id).clone(),
                    budget: route.budget,
                    connections: route.connections,
                    probe_for,
                });
            }
            other => {
                // A delivery woken to probe that does not run gives the
                // place back, so the next claim or sweep finds another.
                for c in &route.connections {
                    if let Some(b) = self.breakers.get_mut(c) {
                        b.give_back_probe(id);
                    }
                }
                match other {
                    ClaimDecision::Succeed => report.succeeded.push(id),
                    ClaimDecision::GiveUp(_) => report.gave_up.push(id),
                    ClaimDecision::Hold { .. } => report.held.push(id),
                    ClaimDecision::Run { .. } => unreachable!(),
                }
            }
        }
    }

    /// The breaker check repeated just before a claimed delivery runs: the
    /// connection whose breaker opened since the claim, if any.
    pub fn held_before_run(
        &self,
        id: DeliveryId,
        connections: &[String],
        now: Timestamp,
    ) -> Option<String> {
        connections
            .iter()
            .find(|c| self.breakers.get(*c).is_some_and(|b| !b.lets_run(id, now)))
            .cloned()
    }

    /// A claimed delivery found, just before its run, behind a breaker that
    /// opened after the claim: held, its attempt given back.
    pub fn hold_claimed(
        &mut self,
        id: DeliveryId,
        token: LeaseToken,
        connection: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.check_lease(id, token)?;
        for b in self.breakers.values_mut() {
            b.give_back_probe(id);
        }
        self.update(id, |d| claim::hold_claimed(d, connection, now));
        Ok(())
    }

    /// A claimed delivery given back unstarted, at shutdown.
    pub fn give_back(
        &mut self,
        id: DeliveryId,
        token: LeaseToken,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.check_lease(id, token)?;
        for b in self.breakers.values_mut() {
            b.give_back_probe(id);
        }
        self.update(id, |d| claim::give_back(d, now));
        Ok(())
    }

    /// The action's store effects committed: written with the run, so a
    /// delivery whose worker is lost after this is never run again.
    pub fn commit_handled(&mut self, id: DeliveryId, token: LeaseToken) -> Result<(), StoreError> {
        self.check_lease(id, token)?;
        let d = self.get(id);
        let key = (d.subscriber.clone(), d.event_id);
        self.handled.insert(key);
        Ok(())
    }

    pub fn finish(&mut self, f: &Finish) -> Result<FinishReport, StoreError> {
        self.check_lease(f.id, f.token)?;
        let now = f.now;
        let d = self.get(f.id);
        let (key, attempts) = ((d.subscriber.clone(), d.event_id), d.attempts);
        if f.outcome == Outcome::Succeeded {
            self.handled.insert(key);
        }
        self.attempts.push(AttemptRecord {
            delivery: f.id,
            attempt: attempts,
            started_at: f.started_at,
            ended_at: now,
            state: f.outcome.state(),
            failure: f.outcome.failure().cloned(),
        });
        self.update(f.id, |d| attempt::apply(d, &f.outcome, now));
        let mut report = FinishReport::default();
        for (connection, verdict) in &f.calls {
            let policy = self.policy;
            if let Some(t) = self
                .breaker_mut(connection)
                .record(*verdict, f.id, now, &policy)
            {
                if t == Transition::Closed {
                    report.released += self.release_all(connection, now);
                }
                report.transitions.push((connection.clone(), t));
            }
        }
        for connection in &f.probe_for {
            if !f.calls.iter().any(|(c, _)| c == connection) {
                self.breaker_mut(connection).give_back_probe(f.id);
            }
        }
        Ok(report)
    }

    /// The tick's sweep: wake a probe where a pause has passed, release what
    /// a closed breaker still holds, raise each outage's alert once.
    pub fn sweep(&mut self, now: Timestamp, wake_lease: Duration) -> SweepReport {
        let mut report = SweepReport::default();
        let connections: Vec<String> = self.breakers.keys().cloned().collect();
        for c in connections {
            let b = &self.breakers[&c];
            if b.is_closed() {
                report.released += self.release_all(&c, now);
                continue;
            }
            if b.wants_probe(now) {
                if let Some(&(_, id)) = self.held.get(&c).and_then(|h| h.first()) {
                    self.breaker_mut(&c)
                        .take_probe(id, now.plus(wake_lease), now);
                    self.update(id, |d| d.release(now));
                    report.woken.push(id);
                }
            }
            let held = self.held.get(&c).map_or(0, |h| h.len() as u64);
            if let Some(alert) = self.breaker_mut(&c).raise_alert(held) {
                self.alerts.push((now, alert.clone()));
                report.alerts.push(alert);
            }
        }
        // Held on a connection that has no breaker row at all: nothing will
        // ever close it, so release.
        let orphans: Vec<String> = self
            .held
            .keys()
            .filter(|c| !self.breakers.contains_key(*c))
            .cloned()
            .collect();
        for c in orphans {
            report.released += self.release_all(&c, now);
        }
        report
    }

    /// An operator's retry of failed and parked deliveries: a fresh budget
    /// from now, due at the time given for each. A handled record stays: a
    /// run that committed is never run again, even on an operator's word.
    pub fn retry(&mut self, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Vec<DeliveryId> {
        let mut retried = Vec::new();
        for &(id, due_at) in due {
            if self
                .deliveries
                .get(id.0 as usize - 1)
                .is_some_and(|d| d.retryable_by_operator())
            {
                self.update(id, |d| d.operator_retry(due_at, now));
                retried.push(id);
            }
        }
        retried
    }

    pub fn delivery(&self, id: DeliveryId) -> Option<&Delivery> {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.deliveries.get(i.checked_sub(1)?))
    }

    pub fn deliveries(&self) -> &[Delivery] {
        &self.deliveries
    }

    pub fn list(&self, filter: &DeliveryFilter) -> Vec<Delivery> {
        let it = self
            .deliveries
            .iter()
            .rev()
            .filter(|d| filter.matches(d))
            .cloned();
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

    pub fn alerts(&self) -> &[(Timestamp, Alert)] {
        &self.alerts
    }

    pub fn attempts(&self, id: DeliveryId) -> Vec<AttemptRecord> {
        self.attempts
            .iter()
            .filter(|a| a.delivery == id)
            .cloned()
            .collect()
    }

    pub fn events(&self) -> &[EventRecord] {
        &self.events
    }

    pub fn is_handled(&self, subscriber: &str, event: EventId) -> bool {
        self.handled.contains(&(subscriber.to_owned(), event))
    }

    /// The deliveries changed since the last call, each once.
    pub fn take_changed(&mut self) -> Vec<DeliveryId> {
        let mut changed = std::mem::take(&mut self.changed);
        changed.sort_unstable();
        changed.dedup();
        changed
    }

    /// The earliest time anything becomes claimable, for a simulation that
    /// jumps over idle time.
    pub fn next_due(&self) -> Option<Timestamp> {
        let due = self.due.first().map(|&(t, _)| t);
        let lost = self.running.first().map(|&(t, _)| t);
        due.into_iter().chain(lost).min()
    }

    fn check_lease(&self, id: DeliveryId, token: LeaseToken) -> Result<(), StoreError> {
        let d = self.delivery(id).ok_or(StoreError::NotFound(id))?;
        match &d.lease {
            Some(l) if l.token == token && d.state == DeliveryState::Running => Ok(()),
            _ => Err(StoreError::LeaseLost(id)),
        }
    }

    fn release_all(&mut self, connection: &str, now: Timestamp) -> usize {
        let ids: Vec<DeliveryId> = self
            .held
            .get(connection)
            .map(|h| h.iter().map(|&(_, id)| id).collect())
            .unwrap_or_default();
        for &id in &ids {
            self.update(id, |d| d.release(now));
        }
        ids.len()
    }

    fn breaker_mut(&mut self, connection: &str) -> &mut Breaker {
        self.breakers
            .entry(connection.to_owned())
            .or_insert_with(|| Breaker::new(connection))
    }

    fn get(&self, id: DeliveryId) -> &Delivery {
        self.delivery(id)
            .expect("delivery ids come from this store")
    }

    /// Every change to a delivery goes through here, so the indexes always
    /// agree with the rows.
    fn update(&mut self, id: DeliveryId, change: impl FnOnce(&mut Delivery)) {
        self.unindex(id);
        let d = &mut self.deliveries[id.0 as usize - 1];
        change(d);
        self.changed.push(id);
        debug_assert!(d.state != DeliveryState::Held || d.held.is_some());
        debug_assert!(d.state != DeliveryState::Running || d.lease.is_some());
        self.index(id);
    }

    fn index(&mut self, id: DeliveryId) {
        let d = &self.deliveries[id.0 as usize - 1];
        match d.state {
            DeliveryState::Due => {
                self.due.insert((d.due_at, id));
            }
            DeliveryState::Running => {
                self.running
                    .insert((d.lease.as_ref().map_or(Timestamp::MAX, |l| l.until), id));
            }
            DeliveryState::Held => {
                let h = d.held.as_ref().expect("held has a connection");
                self.held
                    .entry(h.connection.clone())
                    .or_default()
                    .insert((h.since, id));
            }
            _ => {}
        }
    }

    fn unindex(&mut self, id: DeliveryId) {
        let d = &self.deliveries[id.0 as usize - 1];
        match d.state {
            DeliveryState::Due => {
                self.due.remove(&(d.due_at, id));
            }
            DeliveryState::Running => {
                self.running
                    .remove(&(d.lease.as_ref().map_or(Timestamp::MAX, |l| l.until), id));
            }
            DeliveryState::Held => {
                if let Some(h) = &d.held {
                    if let Some(set) = self.held.get_mut(&h.connection) {
                        set.remove(&(h.since, id));
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
