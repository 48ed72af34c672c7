//! The invariants a simulation checks after its steps.

use crate::config::{Behaviour, SimConfig};
use jadpo_core::backoff::Backoff;
use jadpo_core::{
    Alert, DeliveryId, DeliveryState, Disposition, FailureKind, FailureRecord, Outcome, Timestamp, Transition,
};
use jadpo_core::{Budget, Delivery};
use jadpo_store::memory::MemoryStore;
use jadpo_store::{ClaimReport, Claimed, Emitted, FinishReport};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the simulation knows a delivery went through, kept beside the store
/// to check the store against.
#[derive(Clone, Debug, Default)]
struct Shadow {
    runs_started: u32,
    committed: bool,
    last: Option<FailureRecord>,
    /// When its current hold began, as the simulation saw it held.
    held_since: Option<Timestamp>,
    /// The time it spent held, counted here from the holds and releases
    /// seen, never read from the store: the store's own `held_for` is
    /// checked against it.
    held_for: Duration,
}

#[derive(Clone, Debug)]
struct ProbeRun {
    delivery: DeliveryId,
    connection: String,
    until: Timestamp,
    worker: usize,
    generation: u32,
}

#[derive(Clone, Debug, Default)]
struct Outage {
    open: bool,
    alerted: bool,
    since: Option<Timestamp>,
    count: u32,
}

/// Every delivery's shadow, by id (ids are dense, from 1): the forgotten
/// ones at the front are dropped, so a long simulation keeps about its
/// backlog's worth, not one per delivery it ever made.
#[derive(Debug, Default)]
struct Shadows {
    /// The shadow of id `first + i` at `i`; `None` once forgotten.
    live: std::collections::VecDeque<Option<Shadow>>,
    /// The id of `live[0]`, less one.
    first: usize,
}

impl Shadows {
    /// How many deliveries were ever made.
    fn made(&self) -> usize {
        self.first + self.live.len()
    }

    fn get(&self, id: DeliveryId) -> &Shadow {
        self.live[id.0 as usize - 1 - self.first]
            .as_ref()
            .expect("a delivery in the store is not forgotten")
    }

    fn get_mut(&mut self, id: DeliveryId) -> &mut Shadow {
        self.live[id.0 as usize - 1 - self.first]
            .as_mut()
            .expect("a delivery in the store is not forgotten")
    }

    fn forget(&mut self, id: DeliveryId) {
        self.live[id.0 as usize - 1 - self.first] = None;
        while matches!(self.live.front(), Some(None)) {
            self.live.pop_front();
            self.first += 1;
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Checker {
    shadows: Shadows,
    /// Finished deliveries that left the store (an app's, counted).
    forgotten: usize,
    /// The deliveries held now, as the simulation saw them.
    held: std::collections::BTreeSet<DeliveryId>,
    probes: Vec<ProbeRun>,
    outages: BTreeMap<String, Outage>,
    /// When each run through a limited connection was claimed, over the
    /// last second.
    limited_starts: BTreeMap<String, std::collections::VecDeque<Timestamp>>,
    /// The deliveries of each key, and what order and caps they keep.
    pub(crate) keys: crate::keys::KeyChecker,
}

fn err<T>(what: impl Into<String>) -> Result<T, String> {
    Err(what.into())
}

impl Checker {
    pub(crate) fn emitted(&mut self, e: &Emitted) {
        for id in &e.deliveries {
            assert_eq!(id.0 as usize, self.shadows.made() + 1, "ids are dense");
            self.shadows.live.push_back(Some(Shadow::default()));
        }
    }

    /// These finished deliveries leave the store: nothing more is checked
    /// of them.
    pub(crate) fn forget(&mut self, ids: &[DeliveryId]) {
        self.forgotten += ids.len();
        self.keys.forget(ids);
        for id in ids {
            self.held.remove(id);
            self.shadows.forget(*id);
        }
    }

    fn shadow(&mut self, id: DeliveryId) -> &mut Shadow {
        self.shadows.get_mut(id)
    }

    fn hold(&mut self, id: DeliveryId, now: Timestamp) -> Result<(), String> {
        let s = self.shadow(id);
        if let Some(since) = s.held_since {
            return err(format!("delivery {id} held at {now} while held since {since}"));
        }
        s.held_since = Some(now);
        self.held.insert(id);
        Ok(())
    }

    /// After a step that may release held deliveries (a finish that closed a
    /// breaker, a sweep): each held one the store no longer holds was
    /// released now, and its hold counts from its start to now.
    pub(crate) fn released(&mut self, store: &MemoryStore, now: Timestamp) -> Result<(), String> {
        let mut released = Vec::new();
        for id in &self.held {
            let d = store.delivery(*id).ok_or("held delivery missing")?;
            if d.state != DeliveryState::Held {
                released.push(*id);
            }
        }
        for id in released {
            self.held.remove(&id);
            let s = self.shadow(id);
            let since = s.held_since.take().expect("a held shadow has its start");
            // A hold counts at least a millisecond, however soon it ended.
            s.held_for = s
                .held_for
                .saturating_add(now.since(since).max(jadpo_core::Held::SHORTEST));
        }
        Ok(())
    }

    pub(crate) fn claimed(
        &mut self,
        r: &ClaimReport,
        cfg: &SimConfig,
        worker: usize,
        generation: u32,
        now: Timestamp,
    ) -> Result<(), String> {
        // Runs are claimed at most at the rate and a tenth (one more below
        // 10/s) in any second. A rate's tokens are taken at the claim:
        // counted here, not at the run's start a moment later, which would
        // let a second of starts hold the claims of a second and a little
        // more.
        for c in &r.claimed {
            for connection in &c.connections {
                let Some(rate) = cfg.limits.get(connection).and_then(|l| l.rate) else {
                    continue;
                };
                let starts = self.limited_starts.entry(connection.clone()).or_default();
                starts.push_back(now);
                while starts.front().is_some_and(|t| t.plus(Duration::from_secs(1)) <= now) {
                    starts.pop_front();
                }
                let allowed = rate.n as usize + (rate.n as usize / 10).max(1);
                if starts.len() > allowed {
                    return err(format!(
                        "{} runs on {connection} within a second at {}/s",
                        starts.len(),
                        rate.n
                    ));
                }
            }
        }
        for id in &r.held {
            self.hold(*id, now)?;
        }
        for id in &r.lease_expired {
            self.shadow(*id).last = Some(FailureRecord::lease_expired());
            self.probes.retain(|p| p.delivery != *id);
        }
        for id in &r.succeeded {
            if !self.shadow(*id).committed {
                return err(format!("delivery {id} succeeded at its claim without a committed run"));
            }
        }
        for c in &r.claimed {
            let id = c.delivery.id;
            self.shadow(id).runs_started += 1;
            let until = c.delivery.lease.as_ref().map(|l| l.until).unwrap_or(Timestamp::EPOCH);
            for connection in &c.probe_for {
                self.probes.push(ProbeRun {
                    delivery: id,
                    connection: connection.clone(),
                    until,
                    worker,
                    generation,
                });
            }
        }
        Ok(())
    }

    pub(crate) fn held_before_run(&mut self, id: DeliveryId, now: Timestamp) -> Result<(), String> {
        self.shadow(id).runs_started -= 1;
        self.probes.retain(|p| p.delivery != id);
        self.hold(id, now)
    }

    pub(crate) fn starting(&mut self, store: &MemoryStore, c: &Claimed) -> Result<(), String> {
        let id = c.delivery.id;
        if self.shadow(id).committed || store.is_handled(id) {
            return err(format!("delivery {id} runs again after a run of it committed"));
        }
        Ok(())
    }

    /// An operator's retry: a fresh budget, so its attempts start again.
    pub(crate) fn operator_retried(&mut self, id: DeliveryId) {
        self.keys.operator_retried(id);
        let s = self.shadow(id);
        s.runs_started = 0;
        s.held_for = Duration::ZERO;
    }

    pub(crate) fn committed(&mut self, id: DeliveryId) {
        self.shadow(id).committed = true;
    }

    pub(crate) fn finished(
        &mut self,
        c: &Claimed,
        outcome: &Outcome,
        report: &FinishReport,
        now: Timestamp,
        tick: Duration,
    ) -> Result<(), String> {
        let id = c.delivery.id;
        let s = self.shadow(id);
        if let Some(f) = outcome.failure() {
            s.last = Some(f.clone());
        }
        if *outcome == Outcome::Succeeded {
            s.committed = true;
        }
        self.probes.retain(|p| p.delivery != id);
        for (connection, t) in &report.transitions {
            let o = self.outages.entry(connection.clone()).or_default();
            match t {
                Transition::Opened => {
                    if o.open {
                        return err(format!("breaker {connection} opened while open"));
                    }
                    *o = Outage {
                        open: true,
                        alerted: false,
                        since: Some(now),
                        count: o.count + 1,
                    };
                }
                Transition::Reopened => {
                    if !o.open {
                        return err(format!("breaker {connection} reopened while closed"));
                    }
                }
                Transition::Closed => {
                    if !o.open {
                        return err(format!("breaker {connection} closed while closed"));
                    }
                    let lasted = now.since(o.since.unwrap_or(now));
                    if lasted > tick && !o.alerted {
                        return err(format!("an outage of {connection} lasting {lasted:?} raised no alert"));
                    }
                    o.open = false;
                }
            }
        }
        Ok(())
    }

    /// A finish refused for a lost lease. Only a late worker's may be.
    pub(crate) fn fenced(&mut self, store: &MemoryStore, c: &Claimed) -> Result<(), String> {
        let id = c.delivery.id;
        self.probes.retain(|p| p.delivery != id);
        let d = store.delivery(id).ok_or("fenced delivery missing")?;
        let until = c.delivery.lease.as_ref().map(|l| l.until).unwrap_or(Timestamp::MAX);
        if d.lease.as_ref().is_some_and(|l| l.token == c.token()) && d.state == DeliveryState::Running {
            return err(format!("delivery {id}: a write under the current lease was refused"));
        }
        if d.updated_at < until {
            return err(format!("delivery {id}: taken over before its lease ended"));
        }
        Ok(())
    }

    pub(crate) fn alert(&mut self, a: &Alert) -> Result<(), String> {
        let o = self.outages.entry(a.connection.clone()).or_default();
        if !o.open {
            return err(format!("alert for {} while its breaker is closed", a.connection));
        }
        if o.alerted {
            return err(format!("a second alert in one outage of {}", a.connection));
        }
        if Some(a.since) != o.since {
            return err(format!(
                "alert for {} says since {} but the outage began at {:?}",
                a.connection, a.since, o.since
            ));
        }
        o.alerted = true;
        Ok(())
    }

    /// Checks the deliveries in `which` (every one when `None`), the probes
    /// and the breakers.
    pub(crate) fn check(
        &self,
        store: &MemoryStore,
        cfg: &SimConfig,
        which: Option<&[DeliveryId]>,
        workers_alive: &[u32],
        now: Timestamp,
    ) -> Result<(), String> {
        if store.delivery_count() + self.forgotten != self.shadows.made() {
            return err(format!(
                "{} deliveries emitted, {} in the store and {} finished and forgotten",
                self.shadows.made(),
                store.delivery_count(),
                self.forgotten
            ));
        }
        let max_retry_after = longest_retry_after(cfg);
        let selected: Box<dyn Iterator<Item = &Delivery>> = match which {
            Some(ids) => Box::new(ids.iter().filter_map(|id| store.delivery(*id))),
            None => Box::new(store.deliveries()),
        };
        for d in selected {
            self.check_delivery(store, cfg, d, max_retry_after)?;
        }
        self.keys.check(store, which)?;
        self.one_probe_per_connection(workers_alive, now)?;
        for b in store.breakers() {
            b.check_invariants(store.policy())?;
        }
        check_limits(store, cfg, now)
    }

    /// A delivery's record against what the simulation saw happen to it:
    /// its attempts, its holds, its budget and its state.
    fn check_delivery(
        &self,
        store: &MemoryStore,
        cfg: &SimConfig,
        d: &Delivery,
        max_retry_after: Duration,
    ) -> Result<(), String> {
        let id = d.id;
        let s = self.shadows.get(id);
        let sub = cfg
            .subscribers
            .iter()
            .find(|x| x.name == d.subscriber)
            .ok_or("unknown subscriber")?;
        let budget = sub.budget;
        if d.attempts != s.runs_started {
            return err(format!(
                "delivery {id}: {} attempts recorded, {} runs started (a hold spent one?)",
                d.attempts, s.runs_started
            ));
        }
        if d.held_for != s.held_for {
            return err(format!(
                "delivery {id}: the store counts {:?} held, the holds seen add up to {:?}",
                d.held_for, s.held_for
            ));
        }
        if d.held.as_ref().map(|h| h.since) != s.held_since {
            return err(format!(
                "delivery {id}: held {:?} in the store, {:?} as seen",
                d.held, s.held_since
            ));
        }
        if d.attempts > budget.attempts() {
            return err(format!(
                "delivery {id}: {} attempts, budget {}",
                d.attempts,
                budget.attempts()
            ));
        }
        check_state(store, d, s, budget, max_retry_after)
    }

    /// At most one live probe per connection: a probe is live while its
    /// lease lasts and its worker has not been restarted since.
    fn one_probe_per_connection(&self, workers_alive: &[u32], now: Timestamp) -> Result<(), String> {
        let mut live: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &self.probes {
            if workers_alive.get(p.worker) == Some(&p.generation) && p.until > now {
                *live.entry(&p.connection).or_default() += 1;
            }
        }
        if let Some((c, n)) = live.iter().find(|(_, n)| **n > 1) {
            return err(format!("{n} probes out at once for {c}"));
        }
        Ok(())
    }

    /// At the end, when `all_finish`: nothing left unfinished.
    pub(crate) fn check_end(&self, store: &MemoryStore, all_finish: bool) -> Result<(), String> {
        if let Some(d) = store.deliveries().find(|d| all_finish && !d.state.is_finished()) {
            let waits = store
                .waits_for(d.id)
                .and_then(|w| store.delivery(w))
                .map_or(String::new(), |w| {
                    format!(", waiting for {} {} (skipped: {:?})", w.id, w.state, w.skipped)
                });
            return err(format!(
                "delivery {} is stuck {} at the end (due at {}){waits}",
                d.id, d.state, d.due_at
            ));
        }
        Ok(())
    }
}

/// The longest `Retry-After` any scripted provider answers with: a retry
/// may wait that long, past the backoff's ceiling.
fn longest_retry_after(cfg: &SimConfig) -> Duration {
    cfg.providers
        .values()
        .flat_map(|s| s.0.iter())
        .filter_map(|(_, b)| match b {
            Behaviour::RateLimiting { retry_after } => Some(*retry_after),
            _ => None,
        })
        .max()
        .unwrap_or_default()
        .max(cfg.longest_retry_after)
}

/// What a delivery's state says of it holds: a running one has a lease, a
/// held one its connection, a finished one the record of how it ended.
fn check_state(
    store: &MemoryStore,
    d: &Delivery,
    s: &Shadow,
    budget: Budget,
    max_retry_after: Duration,
) -> Result<(), String> {
    let id = d.id;
    match d.state {
        DeliveryState::Queued if d.key_rule.is_none() => {
            return err(format!("delivery {id} queued without a key's order or cap"))
        }
        DeliveryState::Queued | DeliveryState::Due => {}
        DeliveryState::Running if d.lease.is_none() => return err(format!("delivery {id} running without a lease")),
        DeliveryState::Running => {}
        DeliveryState::Held if d.held.is_none() => return err(format!("delivery {id} held without a connection")),
        DeliveryState::Held => {}
        DeliveryState::Succeeded => {
            if !s.committed || !store.is_handled(d.id) {
                return err(format!("delivery {id} succeeded without a handled record"));
            }
        }
        DeliveryState::Parked => {
            let f = d.last_failure.as_ref().ok_or("parked without a record")?;
            if f.kind != FailureKind::OutcomeUnknown || Some(f) != s.last.as_ref() {
                return err(format!("delivery {id} parked with {f:?}, last run ended {:?}", s.last));
            }
        }
        DeliveryState::Failed => return check_failed(d, s, budget, max_retry_after),
    }
    Ok(())
}

/// A failed delivery recorded how its last attempt ended, and failed only
/// when that failure does not retry or its budget was spent.
fn check_failed(d: &Delivery, s: &Shadow, budget: Budget, max_retry_after: Duration) -> Result<(), String> {
    let id = d.id;
    let f = d.last_failure.as_ref().ok_or("failed without a record")?;
    let expected = s.last.clone().unwrap_or_else(FailureRecord::deadline_exceeded);
    if *f != expected {
        return err(format!(
            "delivery {id} failed recording {f:?}, but its last attempt ended {expected:?}"
        ));
    }
    match f.kind.disposition() {
        Disposition::Fail | Disposition::Defect => {}
        Disposition::Park => return err(format!("delivery {id} failed with {f:?}, which parks")),
        Disposition::Retry => {
            let deadline = budget.deadline(d.budget_from, s.held_for);
            let finished = d.finished_at.ok_or("failed without a finish time")?;
            let longest_wait = Backoff::DELIVERY.ceiling(d.attempts).max(max_retry_after);
            let spent =
                budget.attempts_used(d.attempts) || finished > deadline || finished.plus(longest_wait) > deadline;
            if !spent {
                return err(format!("delivery {id} failed with {f:?} while its budget lasted"));
            }
        }
    }
    Ok(())
}

/// No connection has more runs in flight than its `concurrency:`, nor a
/// bucket below empty.
fn check_limits(store: &MemoryStore, cfg: &SimConfig, now: Timestamp) -> Result<(), String> {
    for state in store.limit_states() {
        let limits = cfg.limits.get(&state.connection).copied().unwrap_or_default();
        if let Some(max) = limits.concurrency {
            if state.slots_in_use(now) > max as usize {
                return err(format!(
                    "{} slots in use on {}, at most {max}",
                    state.slots_in_use(now),
                    state.connection
                ));
            }
        }
        if state.tokens_milli < 0 {
            return err(format!("a negative bucket on {}", state.connection));
        }
    }
    Ok(())
}
