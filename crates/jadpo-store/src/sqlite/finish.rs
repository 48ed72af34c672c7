//! A claimed delivery's end: its finish (outcome, attempt, breakers,
//! limits, emits), a hold just before its run, or its give-back; each
//! fenced on the lease it was claimed under.

use super::pool::Abort;
use super::rows::{self};
use super::writes::Writes;
use crate::plan::{self, Breakers};
use crate::types::*;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{BreakerPolicy, Delivery, DeliveryId, DeliveryState, LeaseToken, Timestamp};
use rusqlite::{params, Connection};

/// Reads a delivery and checks it is still running under `token`.
fn fenced(c: &Connection, id: DeliveryId, token: LeaseToken) -> Result<Delivery, Abort> {
    let stored = rows::get(c, id)?;
    let d = plan::check_lease(stored.as_ref().map(|s| &s.delivery), id, token)?;
    Ok(d.clone())
}

/// Writes `d` only if it is still running under `token`; `handled` as
/// [`super::writes::update`].
fn write_fenced(c: &Connection, d: &Delivery, token: LeaseToken, handled: Option<Timestamp>) -> Result<(), Abort> {
    match super::writes::update(c, d, Some(token), handled, None)? {
        1 => Ok(()),
        _ => Err(Abort::Store(StoreError::LeaseLost(d.id))),
    }
}

/// Gives back the probe places `id` holds: only rows naming it can change.
fn unprobe(c: &Connection, id: DeliveryId) -> Result<(), Abort> {
    let rows = c
        .prepare_cached(concat!(
            "SELECT ",
            rows::breaker_columns!(),
            " FROM jadpo_circuit_breakers WHERE probe_delivery = ?1"
        ))?
        .query_map([id.0], rows::breaker)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut breakers = Breakers::new(rows);
    super::writes::write_breakers(c, &plan::unprobe(&mut breakers, id))
}

/// A claimed delivery that will not run after all (held just before its
/// run, or given back at shutdown): fenced on its lease, changed by
/// `apply`, and any probe place it held given back.
pub(crate) fn set_aside(
    c: &Connection,
    id: DeliveryId,
    token: LeaseToken,
    now: Timestamp,
    apply: impl FnOnce(&mut Delivery),
) -> Result<(), Abort> {
    let mut d = fenced(c, id, token)?;
    apply(&mut d);
    write_fenced(c, &d, token, None)?;
    // It will not call: its slots come back.
    super::limits::settle(c, &[(id, None, now)], &[])?;
    unprobe(c, id)
}

/// The run committed before its finish: the handled record alone, on the
/// row still running under `token` (one kept already is kept).
pub(crate) fn commit_handled(c: &Connection, id: DeliveryId, token: LeaseToken, now: Timestamp) -> Result<(), Abort> {
    let d = fenced(c, id, token)?;
    write_fenced(c, &d, token, Some(now))
}

/// Each finish fenced on its own lease: a lost one is `Err` in its place and
/// writes nothing; the others are written. An `Err(Abort)` means the whole
/// transaction must not commit.
pub(crate) fn finish_batch(
    c: &Connection,
    batch: &[Finish],
    policy: &BreakerPolicy,
) -> Result<Vec<Result<FinishReport, StoreError>>, Abort> {
    let mut out = Vec::with_capacity(batch.len());
    let mut writes = Writes::new(c);
    let mut hand_on = super::keys::HandOn::new(c);
    for f in batch {
        out.push(match finish(c, &mut writes, &mut hand_on, f, policy) {
            Ok(r) => Ok(r),
            Err(Abort::Store(e @ (StoreError::LeaseLost(_) | StoreError::NotFound(_)))) => Err(e),
            Err(fault) => return Err(fault),
        });
    }
    Ok(out)
}

/// Planned from the claim's own row when the finish carries it
/// (`Finish::claimed_row`), without reading the row: a tenth of the drain's
/// time, measured. A write the fence refuses has changed nothing yet; the
/// row is then read, which reports the lost lease.
fn finish(
    c: &Connection,
    writes: &mut Writes<'_>,
    hand_on: &mut super::keys::HandOn<'_>,
    f: &Finish,
    policy: &BreakerPolicy,
) -> Result<FinishReport, Abort> {
    if let Some(d) = f.claimed_row() {
        if let Some(report) = finish_from(c, writes, hand_on, f, d, policy)? {
            return Ok(report);
        }
    }
    let d = fenced(c, f.id, f.token)?;
    finish_from(c, writes, hand_on, f, &d, policy)?.ok_or(Abort::Store(StoreError::LeaseLost(f.id)))
}

/// The finish planned from `d`, the row as it ran; `None`, having written
/// nothing, when the row is no longer running under the finish's lease.
fn finish_from(
    c: &Connection,
    writes: &mut Writes<'_>,
    hand_on: &mut super::keys::HandOn<'_>,
    f: &Finish,
    d: &Delivery,
    policy: &BreakerPolicy,
) -> Result<Option<FinishReport>, Abort> {
    // Most finishes touch no breaker: read only the rows this one may move.
    let touched: Vec<&str> = f
        .calls
        .iter()
        .map(|(conn, _)| conn.as_str())
        .chain(f.probe_for.iter().map(String::as_str))
        .collect();
    let rows = if touched.is_empty() {
        Vec::new()
    } else {
        rows::breakers_of(c, touched)?
    };
    let mut breakers = Breakers::new(rows);
    let plan = plan::finish(d, &mut breakers, f, policy);
    let succeeded_from = (plan.attempt.state == DeliveryState::Succeeded).then_some(plan.attempt.started_at);
    let handled = plan.handled.then_some(f.ended_at);
    if writes.finished(d, &plan.delivery, f.token, handled, succeeded_from)? != 1 {
        return Ok(None);
    }
    let freed_slot = plan.delivery.gave_slot_up(d);
    hand_on.settle(d, &plan.delivery)?;
    let (releases, answers) = crate::limits::of_finish(f);
    super::limits::settle(c, &releases, &answers)?;
    let emitted = if plan.handled && !f.emits.events.is_empty() {
        emit_at_depth(c, &f.emits, f.ended_at)?
    } else {
        Vec::new()
    };
    if succeeded_from.is_none() {
        super::writes::insert_attempt(c, &plan.attempt)?;
    }
    super::writes::write_breakers(c, &plan.breakers)?;
    let mut released = 0;
    for conn in &plan.release {
        let n = super::writes::release(c, conn, f.ended_at)?;
        if let Some((_, since)) = plan.resolved.iter().find(|(r, _)| r == conn) {
            super::alerts::insert(c, &[AlertMessage::resolved(conn, *since, f.ended_at, n as u64)])?;
        }
        released += n;
    }
    Ok(Some(FinishReport {
        transitions: plan.transitions,
        released,
        breakers: plan.breakers.into_iter().map(|w| w.breaker).collect(),
        emitted,
        freed_slot,
    }))
}

/// A run's emits, in its finish's transaction, marked with their depth.
fn emit_at_depth(c: &Connection, emits: &Emits, now: Timestamp) -> Result<Vec<Emitted>, Abort> {
    let emitted = super::emit::emit(c, &emits.events, now)?;
    let mut mark = c.prepare_cached("UPDATE jadpo_events SET depth = ?2 WHERE id = ?1")?;
    for e in emitted.iter().filter(|e| !e.duplicate) {
        mark.execute(params![e.event_id.0, emits.depth])?;
    }
    Ok(emitted)
}
