//! What a claim, a finish and a sweep change, decided from the rows they read.
//!
//! Every store does the same three things: read rows, decide, write rows.
//! The deciding is here, once, as pure functions over the rows read; each
//! store only reads and writes in its own way (memory, SQLite, PostgreSQL).
//! A breaker write carries the version it was read at, so a store can make
//! it one statement conditional on that version.

use crate::types::*;
use jadpo_core::breaker::{Breaker, BreakerPolicy, Gate, Transition};
use jadpo_core::claim::{self, ClaimDecision, ClaimInput};
use jadpo_core::{attempt, Alert, Delivery, DeliveryId, DeliveryState, Lease, LeaseToken, Outcome, Timestamp};
use std::collections::BTreeMap;
use std::time::Duration;

/// A breaker's new state, to be written only if its row is still at
/// `read_version` (0 and absent for a connection that has no row yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerWrite {
    /// The breaker as the plan left it.
    pub breaker: Breaker,
    /// The version its row had when read; 0 when it had no row.
    pub read_version: i64,
}

/// The breakers a plan reads, by connection; a connection with no row is
/// closed. Tracks which ones the plan changed.
#[derive(Clone, Debug, Default)]
pub struct Breakers {
    /// Each row as the plan has it now, with the version it was read at
    /// (0 for a row the plan made).
    rows: BTreeMap<String, (Breaker, i64)>,
}

impl Breakers {
    /// The rows a store read. A row that breaks a breaker's invariants was
    /// written by a bug, never by a rule: stop rather than decide from it.
    pub fn new(rows: impl IntoIterator<Item = Breaker>) -> Breakers {
        // Inserted one by one: collecting a map sorts a buffer first, which
        // costs a claim's few rows several times over (docs/performance.md).
        let mut map = BTreeMap::new();
        for b in rows {
            b.check_shape().unwrap_or_else(|e| panic!("read: {e}"));
            let version = b.version;
            map.insert(b.connection.clone(), (b, version));
        }
        Breakers { rows: map }
    }

    /// The breaker of `connection` as the plan has it now; `None` when it has
    /// no row (closed).
    pub fn get(&self, connection: &str) -> Option<&Breaker> {
        self.rows.get(connection).map(|(b, _)| b)
    }

    /// Whether delivery `id` may run through `connection` at `now`: pass, hold,
    /// or probe. A connection with no row passes.
    pub fn gate(&self, connection: &str, id: DeliveryId, now: Timestamp) -> Gate {
        self.rows.get(connection).map_or(Gate::Pass, |(b, _)| b.gate(id, now))
    }

    fn get_mut(&mut self, connection: &str) -> &mut Breaker {
        &mut self
            .rows
            .entry(connection.to_owned())
            .or_insert_with(|| (Breaker::new(connection), 0))
            .0
    }

    /// Gives back every probe place `id` holds.
    fn give_back_probes(&mut self, id: DeliveryId) {
        for (b, _) in self.rows.values_mut() {
            b.give_back_probe(id);
        }
    }

    /// The rows this plan changed, with the versions they were read at,
    /// each asserted sound before any store writes it.
    pub fn writes(&self) -> Vec<BreakerWrite> {
        self.rows
            .values()
            .filter_map(|(b, read_version)| {
                let read_version = *read_version;
                (b.version != read_version).then(|| {
                    b.check_shape().unwrap_or_else(|e| panic!("write: {e}"));
                    BreakerWrite {
                        breaker: b.clone(),
                        read_version,
                    }
                })
            })
            .collect()
    }
}

/// What a claim writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimPlan {
    /// The new value of every candidate row.
    pub deliveries: Vec<Delivery>,
    /// The breakers it changed (probes taken or given back), each to be written
    /// only if still at the version read.
    pub breakers: Vec<BreakerWrite>,
    /// The connections' limit states it changed (tokens, slots).
    pub limits: Vec<crate::limits::LimitWrite>,
    /// What the claim hands back to the worker.
    pub report: ClaimReport,
}

/// One candidate row of a claim, with what the store read alongside it.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The row: due, or running under a lease that ended.
    pub delivery: Delivery,
    /// A handled record exists for its subscriber and event.
    pub handled: bool,
    /// Its event's name.
    pub event_name: String,
    /// Its event's JSON.
    pub payload: String,
    /// Its event's public id ([`Emitted::public_id`]).
    pub event_public_id: String,
    /// How many emits deep its event is ([`Claimed::event_depth`]).
    pub event_depth: u32,
    /// The trace its event was emitted in ([`Claimed::event_trace`]).
    pub event_trace: Option<jadpo_core::TraceContext>,
}

/// Decides a claim over its candidate rows, in order. `token` issues each
/// run's lease token. Two candidates of one batch cannot both take a probe:
/// the plan applies each decision to its copy of the breakers before the next.
pub fn claim(
    candidates: Vec<Candidate>,
    breakers: &mut Breakers,
    limits: &mut crate::limits::LimitStates,
    req: &ClaimRequest<'_>,
    mut token: impl FnMut(&Delivery) -> LeaseToken,
) -> ClaimPlan {
    let now = req.now;
    let mut plan = ClaimPlan::default();
    for c in candidates {
        let mut d = c.delivery;
        let id = d.id;
        let released = d.released_since_run();
        let Some(route) = req.routes.get(&d.subscriber) else {
            give_up_unknown(&mut plan, d, breakers, req, &mut token);
            continue;
        };
        let gates: Vec<(&str, Gate)> = route
            .connections
            .iter()
            .map(|conn| (conn.as_str(), breakers.gate(conn, id, now)))
            .collect();
        let mut decision = claim::decide(ClaimInput {
            delivery: &d,
            budget: route.budget,
            handled: c.handled,
            gates: &gates,
            now,
        });
        let until = now.plus(req.lease);
        // Room on a limited connection is taken only for a delivery that
        // would run; the core decides what no room means.
        if decision.runs() {
            let waited = d.waiting.as_ref().map(|w| (w.connection.as_str(), d.due_at));
            decision = decision.with_room(limits.take_all(&route.connections, id, waited, now, until));
        }
        let lease = Lease {
            owner: req.worker.to_owned(),
            token: token(&d),
            until,
        };
        claim::apply(&mut d, &decision, lease, now);
        if decision.lease_expired {
            plan.report.lease_expired.push(id);
        }
        match decision.decision {
            ClaimDecision::Run { probe_for } => {
                for conn in &probe_for {
                    breakers.get_mut(conn).take_probe(id, until, now);
                }
                plan.report.claimed.push(Claimed {
                    delivery: d.clone(),
                    budget: route.budget,
                    connections: route.connections.clone(),
                    probe_for,
                    event_name: c.event_name,
                    payload: c.payload,
                    event_public_id: c.event_public_id,
                    event_depth: c.event_depth,
                    event_trace: c.event_trace,
                    released,
                });
            }
            ClaimDecision::Hold { connection } => {
                if let Some(event_trace) = c.event_trace {
                    plan.report.held_in_trace.push(crate::types::HeldInTrace {
                        delivery: id,
                        connection: connection.clone(),
                        event_name: c.event_name,
                        event_trace,
                    });
                }
                not_run(&mut plan.report, breakers, id, ClaimDecision::Hold { connection });
            }
            other => not_run(&mut plan.report, breakers, id, other),
        }
        plan.deliveries.push(d);
    }
    plan.breakers = breakers.writes();
    plan.limits = limits.writes();
    plan.report.breakers = breakers.rows.values().map(|(b, _)| b.clone()).collect();
    plan
}

/// A delivery whose subscriber the app no longer has: failed at the claim,
/// as the core says (`claim::unknown_subscriber`).
fn give_up_unknown(
    plan: &mut ClaimPlan,
    mut d: Delivery,
    breakers: &mut Breakers,
    req: &ClaimRequest<'_>,
    token: &mut impl FnMut(&Delivery) -> LeaseToken,
) {
    let (id, now) = (d.id, req.now);
    let decision = claim::unknown_subscriber(&d, now);
    // Not run, so the lease `apply` takes is never written.
    let unused = Lease {
        owner: req.worker.to_owned(),
        token: token(&d),
        until: now,
    };
    claim::apply(&mut d, &decision, unused, now);
    if decision.lease_expired {
        plan.report.lease_expired.push(id);
    }
    breakers.give_back_probes(id);
    plan.report.gave_up.push(id);
    plan.deliveries.push(d);
}

/// Reports a claimed delivery that will not run now. A delivery woken to
/// probe that does not run gives the place back, so the next claim or sweep
/// finds another.
fn not_run(report: &mut ClaimReport, breakers: &mut Breakers, id: DeliveryId, decision: ClaimDecision) {
    breakers.give_back_probes(id);
    match decision {
        ClaimDecision::Succeed => report.succeeded.push(id),
        ClaimDecision::GiveUp(_) => report.gave_up.push(id),
        ClaimDecision::Hold { .. } => report.held.push(id),
        ClaimDecision::Wait { until, .. } => report.waiting.push((id, until)),
        ClaimDecision::Run { .. } => unreachable!("a run is reported as claimed"),
    }
}

/// Checks that `d` is still held under `token`: the fence every write after
/// a claim passes.
pub fn check_lease(d: Option<&Delivery>, id: DeliveryId, token: LeaseToken) -> Result<&Delivery, StoreError> {
    let d = d.ok_or(StoreError::NotFound(id))?;
    match &d.lease {
        Some(l) if l.token == token && d.state == DeliveryState::Running => Ok(d),
        _ => Err(StoreError::LeaseLost(id)),
    }
}

/// What a finish writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishPlan {
    /// The delivery as the attempt left it.
    pub delivery: Delivery,
    /// The attempt's record, added to the delivery's history.
    pub attempt: AttemptRecord,
    /// Write the handled record: the run committed.
    pub handled: bool,
    /// The breakers the attempt's calls and probe changed, each to be written
    /// only if still at the version read.
    pub breakers: Vec<BreakerWrite>,
    /// Connections whose breaker closed: release everything they hold, due
    /// now, in the same transaction.
    pub release: Vec<String>,
    /// Of those, the ones whose outage had raised its alert, with when the
    /// outage began: each gets its `resolved` message, in the same
    /// transaction, so of many processes exactly the one that closed the
    /// breaker writes it.
    pub resolved: Vec<(String, Timestamp)>,
    /// Each breaker that opened, reopened or closed, by connection: the
    /// finish's report.
    pub transitions: Vec<(String, Transition)>,
}

/// Decides a finish. `d` is the row as read, its lease already checked.
pub fn finish(d: &Delivery, breakers: &mut Breakers, f: &Finish, policy: &BreakerPolicy) -> FinishPlan {
    let now = f.ended_at;
    let mut delivery = d.clone();
    attempt::apply(&mut delivery, &f.outcome, now);
    let mut release = Vec::new();
    let mut resolved = Vec::new();
    let mut transitions = Vec::new();
    for (connection, verdict) in &f.calls {
        let b = breakers.get_mut(connection);
        let alerted = b.alert_raised.then(|| b.outage_since.or(b.opened_at)).flatten();
        if let Some(t) = b.record(*verdict, f.id, now, policy) {
            if t == Transition::Closed {
                release.push(connection.clone());
                resolved.extend(alerted.map(|since| (connection.clone(), since)));
            }
            transitions.push((connection.clone(), t));
        }
    }
    for connection in &f.probe_for {
        if !f.calls.iter().any(|(c, _)| c == connection) {
            breakers.get_mut(connection).give_back_probe(f.id);
        }
    }
    FinishPlan {
        attempt: AttemptRecord {
            delivery: f.id,
            attempt: d.attempts,
            started_at: f.started_at,
            ended_at: now,
            state: f.outcome.state(),
            failure: f.outcome.failure().cloned(),
        },
        handled: f.outcome == Outcome::Succeeded,
        delivery,
        breakers: breakers
            .writes()
            .into_iter()
            .inspect(|w| {
                w.breaker
                    .check_invariants(policy)
                    .unwrap_or_else(|e| panic!("write: {e}"))
            })
            .collect(),
        release,
        resolved,
        transitions,
    }
}

/// Gives back the probe places of a claimed delivery that will not run
/// (held just before its run, or given back at shutdown).
pub fn unprobe(breakers: &mut Breakers, id: DeliveryId) -> Vec<BreakerWrite> {
    breakers.give_back_probes(id);
    breakers.writes()
}

/// What the sweep knows of the deliveries a connection holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldSummary {
    /// How many deliveries it holds.
    pub count: u64,
    /// The one held longest, the next probe.
    pub longest: Option<DeliveryId>,
}

/// What a sweep writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepPlan {
    /// The breakers it changed (probes taken, alerts raised), each to be
    /// written only if still at the version read.
    pub breakers: Vec<BreakerWrite>,
    /// Held deliveries to make due now, each the probe of its connection.
    pub wake: Vec<DeliveryId>,
    /// Connections whose held deliveries are all released: their breaker is
    /// closed, or they have no breaker row at all.
    pub release: Vec<String>,
    /// The outage alerts it raises: one per outage, by the first sweep that
    /// finds its breaker open.
    pub alerts: Vec<Alert>,
}

/// Decides a sweep from the breakers and a summary of what each connection
/// holds: each open breaker whose pause has passed takes its longest held
/// delivery as the probe, until `now + wake_lease`; every connection whose
/// breaker is closed, or that has none, releases all it holds; each outage
/// raises its alert once.
pub fn sweep(
    breakers: &mut Breakers,
    held: &BTreeMap<String, HeldSummary>,
    now: Timestamp,
    wake_lease: Duration,
) -> SweepPlan {
    let mut plan = SweepPlan::default();
    let connections: Vec<String> = breakers.rows.keys().cloned().collect();
    for c in connections {
        let summary = held.get(&c).cloned().unwrap_or_default();
        let b = breakers.get_mut(&c);
        if b.is_closed() {
            if summary.count > 0 {
                plan.release.push(c);
            }
            continue;
        }
        if b.wants_probe(now) {
            if let Some(id) = summary.longest {
                b.take_probe(id, now.plus(wake_lease), now);
                plan.wake.push(id);
            }
        }
        if let Some(alert) = b.raise_alert(summary.count) {
            plan.alerts.push(alert);
        }
    }
    // Held on a connection with no breaker row: nothing will ever close it.
    for (c, s) in held {
        if s.count > 0 && breakers.get(c).is_none() {
            plan.release.push(c.clone());
        }
    }
    plan.breakers = breakers.writes();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::BreakerState;

    /// A row no rule could have written (open, with no opening time) stops
    /// the plan instead of deciding from it.
    #[test]
    #[should_panic(expected = "read: breaker pay: open without an opening time")]
    fn a_breaker_row_that_breaks_its_invariants_is_refused_when_read() {
        let mut b = Breaker::new("pay");
        b.state = BreakerState::Open;
        Breakers::new([b]);
    }

    #[test]
    #[should_panic(expected = "write: breaker pay: closed with outage state left over")]
    fn a_breaker_changed_into_an_unsound_state_is_never_written() {
        let mut breakers = Breakers::new([Breaker::new("pay")]);
        let b = breakers.get_mut("pay");
        b.alert_raised = true;
        b.version += 1;
        breakers.writes();
    }
}
