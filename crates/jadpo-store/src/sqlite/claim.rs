//! The claim, in one `BEGIN IMMEDIATE` transaction: read the due and
//! lost rows, let [`plan`](crate::plan) decide, write what it returned.

use super::pool::Abort;
use super::rows::{self, delivery_columns, Stored, DELIVERY_COLUMNS};
use crate::limits::LimitStates;
use crate::plan::{self, Breakers, Candidate};
use crate::types::*;
use jadpo_core::{Delivery, DeliveryId, LeaseToken, Timestamp};
use rusqlite::{params, Connection};
use std::collections::HashMap;

/// Due rows, oldest due first, with what the claim decides from: the event
/// (for the action) and whether the row has its handled record.
const DUE: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    ", e.name, e.payload, d.handled_at IS NOT NULL, e.public_id, e.depth, \
     e.traceparent, e.tracestate \
     FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id \
     WHERE d.state = 'due' AND d.due_at <= ?1 ORDER BY d.due_at, d.id LIMIT ?2"
);

/// Running rows whose lease ended, the longest lost first.
const LOST: &str = concat!(
    "SELECT ",
    delivery_columns!(),
    ", e.name, e.payload, d.handled_at IS NOT NULL, e.public_id, e.depth, \
     e.traceparent, e.tracestate \
     FROM jadpo_deliveries d JOIN jadpo_events e ON e.id = d.event_id \
     WHERE d.state = 'running' AND d.lease_until <= ?1 ORDER BY d.lease_until, d.id LIMIT ?2"
);

struct Row {
    stored: Stored,
    event: Event,
}

/// What a candidate takes from its event and handled record. Apart from the
/// row, which the claim keeps a copy of as read: a row is cloned once.
struct Event {
    name: String,
    payload: String,
    handled: bool,
    public_id: String,
    depth: u32,
    trace: Option<jadpo_core::TraceContext>,
}

impl Row {
    fn candidate(self) -> Candidate {
        Candidate {
            delivery: self.stored.delivery,
            handled: self.event.handled,
            event_name: self.event.name,
            payload: self.event.payload,
            event_public_id: self.event.public_id,
            event_depth: self.event.depth,
            event_trace: self.event.trace,
        }
    }
}

fn candidates(c: &Connection, sql: &str, now: Timestamp, limit: usize) -> Result<Vec<Row>, Abort> {
    let rows = c
        .prepare_cached(sql)?
        .query_map(params![now.as_millis(), limit as i64], |r| {
            let depth: i64 = r.get(DELIVERY_COLUMNS + 4)?;
            Ok(Row {
                stored: rows::delivery(r)?,
                event: Event {
                    name: r.get(DELIVERY_COLUMNS)?,
                    payload: r.get(DELIVERY_COLUMNS + 1)?,
                    handled: r.get(DELIVERY_COLUMNS + 2)?,
                    public_id: r.get(DELIVERY_COLUMNS + 3)?,
                    depth: u32::try_from(depth).unwrap_or(0),
                    trace: crate::codec::trace(r.get(DELIVERY_COLUMNS + 5)?, r.get(DELIVERY_COLUMNS + 6)?),
                },
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Claims up to `req.limit` rows: due ones and lost ones merged by time, so a
/// lost run waits no longer than a due one (as the in-memory store does).
pub(crate) fn claim(c: &Connection, req: &ClaimRequest<'_>) -> Result<ClaimReport, Abort> {
    let due = candidates(c, DUE, req.now, req.limit)?;
    let lost = candidates(c, LOST, req.now, req.limit)?;
    let key = |r: &Row, lost: bool| {
        let d = &r.stored.delivery;
        let at = match (&d.lease, lost) {
            (Some(l), true) => l.until,
            _ => d.due_at,
        };
        (at, d.id)
    };
    let mut due = due.into_iter().peekable();
    let mut lost = lost.into_iter().peekable();
    let mut picked = Vec::with_capacity(req.limit);
    while picked.len() < req.limit {
        let take_lost = match (due.peek(), lost.peek()) {
            (Some(a), Some(b)) => key(b, true) < key(a, false),
            (None, Some(_)) => true,
            (_, None) => false,
        };
        match if take_lost { lost.next() } else { due.next() } {
            Some(r) => picked.push(r),
            None => break,
        }
    }
    // Each row as read, with its stored token: the write compares the
    // plan with it (`writes::claimed`).
    let read: HashMap<DeliveryId, (Delivery, i64)> = picked
        .iter()
        .map(|r| (r.stored.delivery.id, (r.stored.delivery.clone(), r.stored.token)))
        .collect();
    let candidates = picked.into_iter().map(Row::candidate).collect();
    let mut breakers = Breakers::new(rows::all_breakers(c)?);
    // Every row, limited or not: a 429's pause holds any connection.
    let limit_rows = super::limits::all(c)?;
    let mut limits = LimitStates::new(req.routes.limits(), limit_rows);
    let plan = plan::claim(candidates, &mut breakers, &mut limits, req, |d| {
        LeaseToken(read[&d.id].1 + 1)
    });
    let mut writes = super::writes::Writes::new(c);
    for d in &plan.deliveries {
        writes.claimed(&read[&d.id].0, d)?;
    }
    // A delivery the claim ended (its budget spent, its run committed
    // already, its subscriber gone) hands its key's slot on, as a finish's
    // end does.
    let mut hand_on = super::keys::HandOn::new(c);
    for d in &plan.deliveries {
        hand_on.settle(&read[&d.id].0, d)?;
    }
    super::writes::write_breakers(c, &plan.breakers)?;
    super::limits::write(c, &plan.limits)?;
    Ok(plan.report)
}
