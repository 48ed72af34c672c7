//! The in-memory store: every rule end to end, without a database.
//!
//! `MemoryStore` has one owner and `&mut self` methods: the simulation
//! drives it directly and deterministically. [`SharedMemoryStore`] wraps it
//! behind a mutex for the [`Store`](crate::Store) interface. Indexes keep a
//! claim, a sweep and a release proportional to what they touch, not to every
//! delivery ever made, so the simulation runs the 5,000-delivery outage
//! scenario quickly.

mod handled;
mod indexes;
mod read;
mod schedules;
mod shared;
mod slots;
pub use shared::SharedMemoryStore;
#[doc(hidden)]
pub use slots::KeyFault;

use crate::alerts::AlertBook;
use crate::limits::LimitStates;
use crate::plan::{self, Breakers, Candidate, HeldSummary};
use crate::types::*;
use indexes::Indexes;
use jadpo_core::alert::AlertMessage;
use jadpo_core::breaker::{Breaker, BreakerPolicy};
use jadpo_core::key::Key;
use jadpo_core::limit::LimitState;
use jadpo_core::schedule::ScheduleState;
use jadpo_core::{claim, Delivery, DeliveryId, DeliveryState, EventId, LeaseToken, Timestamp};
use slots::Slots;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

/// The in-memory store with one owner: every rule of the durable stores,
/// through `&mut self` methods the simulation drives directly.
/// [`SharedMemoryStore`] puts it behind the [`Store`](crate::Store) interface.
#[derive(Debug)]
pub struct MemoryStore {
    policy: BreakerPolicy,
    events: BTreeMap<EventId, EventRecord>,
    /// Emit depth of the events actions emitted; absent is 0.
    depths: BTreeMap<EventId, u32>,
    /// Boxed: a delivery is large, and the map moves its values as its
    /// nodes fill and empty (a third of a simulation's copying, measured).
    deliveries: BTreeMap<DeliveryId, Box<Delivery>>,
    last_event: i64,
    last_delivery: i64,
    indexes: Indexes,
    handled: handled::Handled,
    /// Events by (name, idempotency key), while the event is kept.
    keys: BTreeMap<(String, String), EventId>,
    breakers: BTreeMap<String, Breaker>,
    attempts: Vec<AttemptRecord>,
    alerts: AlertBook,
    minutes: BTreeMap<(Timestamp, String), u64>,
    /// Limited connections' tokens and slots.
    limits: BTreeMap<String, LimitState>,
    last_token: i64,
    schedules: BTreeMap<String, ScheduleState>,
    /// Console sign-ins: hash to expiry.
    pub(crate) sessions: BTreeMap<String, Timestamp>,
    /// The scaled clock a process kept, if any.
    pub(crate) clock_anchor: Option<jadpo_core::clock::Anchor>,
    /// The slots of each key whose subscriber has `order:` or
    /// `concurrency_per_key:`, by subscriber and key, while any is taken.
    slots: BTreeMap<(String, Key), Slots>,
    /// A broken key rule the simulation injects to show that its checks
    /// catch one (`slots::KeyFault`); `None` in every other use.
    key_fault: Option<slots::KeyFault>,
    /// Deliveries changed since the last `take_changed`, for a checker
    /// that looks only at what a step touched. A set of kept deliveries: a
    /// store nobody asks (behind the traits) must not grow without bound.
    changed: BTreeSet<DeliveryId>,
    /// Whether `changed` is kept: a caller that never asks (a simulation
    /// checked only in full) pays nothing for it.
    track_changed: bool,
}

impl MemoryStore {
    /// An empty store whose breakers open and pause by `policy`.
    pub fn new(policy: BreakerPolicy) -> MemoryStore {
        MemoryStore {
            policy,
            events: BTreeMap::new(),
            depths: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            last_event: 0,
            last_delivery: 0,
            indexes: Indexes::default(),
            handled: handled::Handled::default(),
            keys: BTreeMap::new(),
            breakers: BTreeMap::new(),
            attempts: Vec::new(),
            alerts: AlertBook::default(),
            minutes: BTreeMap::new(),
            limits: BTreeMap::new(),
            last_token: 0,
            changed: BTreeSet::new(),
            track_changed: true,
            schedules: BTreeMap::new(),
            clock_anchor: None,
            sessions: BTreeMap::new(),
            slots: BTreeMap::new(),
            key_fault: None,
        }
    }

    /// The policy its breakers open and pause by.
    pub fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    /// Emits `events`; one whose idempotency key was used before with the
    /// same payload comes back as the first event (`duplicate`), and one
    /// used with another payload refuses the whole call, making nothing.
    pub fn emit(&mut self, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, StoreError> {
        let mut first: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for e in events {
            let Some(key) = &e.idempotency_key else { continue };
            let payload = match self.keys.get(&(e.name.clone(), key.clone())) {
                Some(id) => self.events[id].payload.as_str(),
                None => *first
                    .entry((e.name.as_str(), key.as_str()))
                    .or_insert(e.payload.as_str()),
            };
            if payload != e.payload {
                return Err(StoreError::IdempotencyConflict(e.name.clone()));
            }
        }
        Ok(events.iter().map(|e| self.emit_one(e, now)).collect())
    }

    fn emit_one(&mut self, e: &NewEvent, now: Timestamp) -> Emitted {
        let key = e.idempotency_key.as_ref().map(|k| (e.name.clone(), k.clone()));
        if let Some(&event_id) = key.as_ref().and_then(|k| self.keys.get(k)) {
            return Emitted {
                event_id,
                public_id: self.events[&event_id].public_id.clone(),
                deliveries: self
                    .deliveries
                    .values()
                    .filter(|d| d.event_id == event_id)
                    .map(|d| d.id)
                    .collect(),
                duplicate: true,
            };
        }
        self.last_event += 1;
        let event_id = EventId(self.last_event);
        let public_id = crate::types::new_public_id();
        self.events.insert(
            event_id,
            EventRecord {
                id: event_id,
                public_id: public_id.clone(),
                name: e.name.clone(),
                payload: e.payload.clone(),
                emitted_at: now,
                trace: e.trace.clone(),
            },
        );
        if let Some(k) = key {
            self.keys.insert(k, event_id);
        }
        let deliveries = e
            .subscribers
            .iter()
            .map(|s| {
                self.last_delivery += 1;
                let id = DeliveryId(self.last_delivery);
                let mut d = Delivery::new(id, event_id, s.clone(), now);
                d.keyed(e.keys.get(s));
                self.take_slot(&mut d, now);
                self.indexes.add(&d);
                self.deliveries.insert(id, Box::new(d));
                if self.track_changed {
                    self.changed.insert(id);
                }
                id
            })
            .collect();
        Emitted {
            event_id,
            public_id,
            deliveries,
            duplicate: false,
        }
    }

    /// Claims up to `limit` due deliveries, oldest due first, applying the
    /// claim-time decisions to each.
    pub fn claim(&mut self, req: &ClaimRequest<'_>) -> ClaimReport {
        let now = req.now;
        let mut ids: Vec<DeliveryId> = Vec::with_capacity(req.limit);
        let mut due = self.indexes.due.range(..=(now, DeliveryId(i64::MAX))).peekable();
        let mut lost = self.indexes.running.range(..=(now, DeliveryId(i64::MAX))).peekable();
        while ids.len() < req.limit {
            // Merge the two queues by time so a lost run waits no longer than
            // a due one.
            let next = match (due.peek(), lost.peek()) {
                (Some(a), Some(b)) if b < a => lost.next(),
                (Some(_), _) => due.next(),
                (None, Some(_)) => lost.next(),
                (None, None) => None,
            };
            match next {
                Some(&(_, id)) => ids.push(id),
                None => break,
            }
        }
        if ids.is_empty() {
            // Nothing decided, so no breaker decided with (as PostgreSQL's
            // claim reports): a worker's look that finds nothing due is the
            // most common claim of all, and reads nothing else.
            return ClaimReport::default();
        }
        let candidates = ids
            .iter()
            .map(|&id| {
                let d = self.get(id).clone();
                let event = &self.events[&d.event_id];
                Candidate {
                    handled: self.handled.contains(id),
                    event_name: event.name.clone(),
                    payload: event.payload.clone(),
                    event_public_id: event.public_id.clone(),
                    event_depth: self.depths.get(&d.event_id).copied().unwrap_or(0),
                    event_trace: event.trace.clone(),
                    delivery: d,
                }
            })
            .collect();
        let mut breakers = Breakers::new(self.breakers.values().cloned());
        // Every row, limited or not: a 429's pause holds any connection.
        let mut limits = LimitStates::new(req.routes.limits(), self.limits.values().cloned());
        let mut last_token = self.last_token;
        let plan = plan::claim(candidates, &mut breakers, &mut limits, req, |_| {
            last_token += 1;
            LeaseToken(last_token)
        });
        self.last_token = last_token;
        for d in plan.deliveries {
            self.put(d);
        }
        self.write_breakers(plan.breakers);
        for w in plan.limits {
            self.limits.insert(w.state.connection.clone(), w.state);
        }
        plan.report
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
        let mut d = plan::check_lease(self.delivery(id), id, token)?.clone();
        claim::hold_claimed(&mut d, connection, now);
        self.unprobe(id);
        self.release_slots(id, now);
        self.put(d);
        Ok(())
    }

    /// Every slot `id` holds comes back at `now`: it will not call.
    fn release_slots(&mut self, id: DeliveryId, now: Timestamp) {
        for s in self.limits.values_mut() {
            s.release(id, now);
        }
    }

    /// The connections' limit states, for the operator's view.
    pub fn limit_states(&self) -> impl Iterator<Item = &LimitState> {
        self.limits.values()
    }

    /// How many due deliveries wait on each connection.
    pub fn waiting_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for d in self.deliveries.values().filter(|d| d.state == DeliveryState::Due) {
            if let Some(w) = &d.waiting {
                *counts.entry(w.connection.clone()).or_default() += 1;
            }
        }
        counts
    }

    /// A claimed delivery given back unstarted, at shutdown.
    pub fn give_back(&mut self, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), StoreError> {
        let mut d = plan::check_lease(self.delivery(id), id, token)?.clone();
        claim::give_back(&mut d, now);
        self.unprobe(id);
        self.release_slots(id, now);
        self.put(d);
        Ok(())
    }

    /// The action's store effects committed: written with the run, so a
    /// delivery whose worker is lost after this is never run again.
    pub fn commit_handled(&mut self, id: DeliveryId, token: LeaseToken) -> Result<(), StoreError> {
        plan::check_lease(self.delivery(id), id, token)?;
        self.handled.insert(id);
        Ok(())
    }

    /// Writes an attempt's outcome, fenced on its lease, with its breaker
    /// verdicts, its slots, its 429s and its emits; a breaker it closes
    /// releases what it held ([`Store::finish`](crate::Store::finish)).
    pub fn finish(&mut self, f: &Finish) -> Result<FinishReport, StoreError> {
        plan::check_lease(self.delivery(f.id), f.id, f.token)?;
        let (releases, answers) = crate::limits::of_finish(f);
        if !releases.is_empty() || !answers.is_empty() {
            let rows = self.limits.values().cloned().collect();
            for w in crate::limits::settle(rows, &releases, &answers) {
                self.limits.insert(w.state.connection.clone(), w.state);
            }
        }
        let d = plan::check_lease(self.delivery(f.id), f.id, f.token)?;
        // Only the rows a finish can change, as PostgreSQL's finish reads
        // them: its calls' connections and those it probes.
        let named = |c: &String| f.calls.iter().any(|(n, _)| n == c) || f.probe_for.contains(c);
        let mut breakers = Breakers::new(self.breakers.values().filter(|b| named(&b.connection)).cloned());
        let plan = plan::finish(d, &mut breakers, f, &self.policy);
        let freed_slot = plan.delivery.gave_slot_up(d);
        let emitted = if plan.handled && !f.emits.events.is_empty() {
            self.emit(&f.emits.events, f.ended_at)?
        } else {
            Vec::new()
        };
        if plan.handled {
            self.handled.insert(plan.delivery.id);
        }
        for e in &emitted {
            self.depths.insert(e.event_id, f.emits.depth);
        }
        self.attempts.push(plan.attempt);
        self.put(plan.delivery);
        let changed = plan.breakers.iter().map(|w| w.breaker.clone()).collect();
        self.write_breakers(plan.breakers);
        let mut released = 0;
        for c in &plan.release {
            let n = self.release(c, f.ended_at);
            if let Some((_, since)) = plan.resolved.iter().find(|(r, _)| r == c) {
                self.alerts
                    .push(AlertMessage::resolved(c, *since, f.ended_at, n as u64));
            }
            released += n;
        }
        Ok(FinishReport {
            transitions: plan.transitions,
            released,
            breakers: changed,
            emitted,
            freed_slot,
        })
    }

    /// The tick's sweep: wake a probe where a pause has passed, release what
    /// a closed breaker still holds, raise each outage's alert once.
    pub fn sweep(&mut self, now: Timestamp, wake_lease: Duration) -> SweepReport {
        let held = self
            .indexes
            .held
            .iter()
            .map(|(c, set)| {
                let summary = HeldSummary {
                    count: set.len() as u64,
                    longest: set.first().map(|&(_, id)| id),
                };
                (c.clone(), summary)
            })
            .collect();
        let mut breakers = Breakers::new(self.breakers.values().cloned());
        let plan = plan::sweep(&mut breakers, &held, now, wake_lease);
        self.write_breakers(plan.breakers);
        for &id in &plan.wake {
            let mut d = self.get(id).clone();
            d.release(now);
            self.put(d);
        }
        let released = plan.release.iter().map(|c| self.release(c, now)).sum();
        for a in &plan.alerts {
            self.alerts.push(AlertMessage::raised(a, now));
        }
        SweepReport {
            woken: plan.wake,
            released,
            alerts: plan.alerts,
        }
    }

    /// An operator's retry of failed and parked deliveries: a fresh budget
    /// from now, due at the time given for each. A handled record stays: a
    /// run that committed is never run again, even on an operator's word.
    pub fn retry(&mut self, due: &[(DeliveryId, Timestamp)], now: Timestamp) -> Vec<DeliveryId> {
        let mut retried = Vec::new();
        // In id order, so that the earliest of a key takes its slot and the
        // rest queue behind it in emit order, however they were named.
        let mut in_order = due.to_vec();
        in_order.sort_by_key(|(id, _)| *id);
        for (id, due_at) in in_order {
            if let Some(d) = self.delivery(id).filter(|d| d.retryable_by_operator()) {
                let mut d = d.clone();
                let before = d.clone();
                d.operator_retry(due_at, now);
                if d.takes_slot(&before) {
                    self.take_slot(&mut d, now);
                }
                self.put(d);
                retried.push(id);
            }
        }
        retried
    }

    /// An operator's skip of failed and parked deliveries not skipped yet
    /// (`Delivery::skip`); a `strict` key's slot it held is handed on.
    pub fn skip(&mut self, ids: &[DeliveryId], by: &str, now: Timestamp) -> Vec<DeliveryId> {
        let mut skipped = Vec::new();
        for &id in ids {
            if let Some(d) = self.delivery(id).filter(|d| d.skippable_by_operator()) {
                let mut d = d.clone();
                d.skip(by, now);
                self.put(d);
                skipped.push(id);
            }
        }
        skipped
    }

    /// The deliveries changed since the last call, each once.
    pub fn take_changed(&mut self) -> Vec<DeliveryId> {
        std::mem::take(&mut self.changed).into_iter().collect()
    }

    /// Forgets which deliveries changed, for a caller that will not ask.
    pub fn clear_changed(&mut self) {
        self.changed.clear();
    }

    /// Whether the deliveries changed are kept for [`take_changed`]
    /// (they are unless told otherwise); off, forgets them and keeps none.
    ///
    /// [`take_changed`]: MemoryStore::take_changed
    pub fn track_changed(&mut self, on: bool) {
        self.track_changed = on;
        if !on {
            self.changed.clear();
        }
    }

    /// The earliest time anything becomes claimable, for a simulation that
    /// jumps over idle time, and for an idle worker's wait.
    pub fn next_due(&self) -> Option<Timestamp> {
        let due = self.indexes.due.first().map(|&(t, _)| t);
        let lost = self.indexes.running.first().map(|&(t, _)| t);
        due.into_iter().chain(lost).min()
    }

    /// Deletes up to `batch` finished deliveries that finished before
    /// `before`, with their attempts and handled records, then the events
    /// left with no delivery. Never a delivery that is not finished.
    pub fn prune(&mut self, before: Timestamp, batch: usize) -> usize {
        let old: Vec<DeliveryId> = self
            .deliveries
            .values()
            .filter(|d| d.state.is_finished() && d.finished_at.is_some_and(|t| t < before))
            .take(batch)
            .map(|d| d.id)
            .collect();
        self.remove_finished(&old, before);
        self.alerts.prune(before, batch);
        old.len()
    }

    /// Deletes these finished deliveries now, whenever they finished, with
    /// their attempts, handled records and the events left with no
    /// delivery; never one that holds its key's slot (a `strict` key's
    /// failed delivery, which blocks the key until an operator acts) or is
    /// not finished. For a long simulation, which reports each delivery as
    /// it finishes and need not keep it. Returns those it deleted.
    pub fn forget(&mut self, ids: &[DeliveryId], now: Timestamp) -> Vec<DeliveryId> {
        let finished: Vec<DeliveryId> = ids
            .iter()
            .copied()
            .filter(|id| {
                self.deliveries
                    .get(id)
                    .is_some_and(|d| d.state.is_finished() && !d.holds_slot())
            })
            .collect();
        self.remove_finished(&finished, now);
        finished
    }

    fn remove_finished(&mut self, old: &[DeliveryId], before: Timestamp) {
        for id in old {
            let d = self.deliveries.remove(id).expect("listed above");
            // A `strict` key's failed delivery, gone unretried and unskipped,
            // no longer blocks its key.
            if d.holds_slot() {
                self.free_slot(&d, before);
            }
            self.handled.remove(d.id);
        }
        let gone: HashSet<DeliveryId> = old.iter().copied().collect();
        self.attempts.retain(|a| !gone.contains(&a.delivery));
        self.changed.retain(|id| !gone.contains(id));
        let live: HashSet<EventId> = self.deliveries.values().map(|d| d.event_id).collect();
        self.events.retain(|id, e| live.contains(id) || e.emitted_at >= before);
        let events = &self.events;
        self.depths.retain(|id, _| events.contains_key(id));
        let events = &self.events;
        self.keys.retain(|_, id| events.contains_key(id));
    }

    /// Closes a breaker behind the store's back, as a release racing a hold
    /// in another process can leave it. For tests of the sweep.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn close_breaker_for_test(&mut self, connection: &str) {
        if let Some(b) = self.breakers.get_mut(connection) {
            let version = b.version + 1;
            *b = Breaker {
                version,
                ..Breaker::new(connection)
            };
        }
    }

    fn unprobe(&mut self, id: DeliveryId) {
        let mut breakers = Breakers::new(self.breakers.values().cloned());
        let writes = plan::unprobe(&mut breakers, id);
        self.write_breakers(writes);
    }

    fn write_breakers(&mut self, writes: Vec<plan::BreakerWrite>) {
        for w in writes {
            let current = self.breakers.get(&w.breaker.connection).map_or(0, |b| b.version);
            assert_eq!(current, w.read_version, "one owner: no other writer can have moved it");
            w.breaker
                .check_invariants(&self.policy)
                .unwrap_or_else(|e| panic!("{e}"));
            self.breakers.insert(w.breaker.connection.clone(), w.breaker);
        }
    }

    fn release(&mut self, connection: &str, now: Timestamp) -> usize {
        let ids: Vec<DeliveryId> = self
            .indexes
            .held
            .get(connection)
            .map(|h| h.iter().map(|&(_, id)| id).collect())
            .unwrap_or_default();
        for &id in &ids {
            let mut d = self.get(id).clone();
            d.release(now);
            self.put(d);
        }
        ids.len()
    }

    fn get(&self, id: DeliveryId) -> &Delivery {
        self.delivery(id).expect("delivery ids come from this store")
    }

    /// Every change to a delivery goes through here, so the indexes always
    /// agree with the rows.
    fn put(&mut self, d: Delivery) {
        let id = d.id;
        debug_assert!(d.state != DeliveryState::Held || d.held.is_some());
        debug_assert!(d.state != DeliveryState::Running || d.lease.is_some());
        let now = d.updated_at;
        let row = self.deliveries.get_mut(&id).expect("a put changes a kept delivery");
        let before = std::mem::replace(&mut **row, d);
        self.indexes.remove(&before);
        self.indexes.add(row);
        if self.track_changed {
            self.changed.insert(id);
        }
        if row.gave_slot_up(&before) {
            let d = (**row).clone();
            self.free_slot(&d, now);
        }
    }
}
