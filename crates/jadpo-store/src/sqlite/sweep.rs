//! The tick's sweep: probes woken, closed breakers' deliveries released,
//! each outage's alert raised once.

use super::pool::Abort;
use super::rows::{self};
use crate::plan::{self, Breakers, HeldSummary};
use crate::types::*;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{DeliveryId, Timestamp};
use rusqlite::{Connection, OptionalExtension};
use std::collections::BTreeMap;
use std::time::Duration;

/// The connections holding deliveries, each with its count and the one held
/// longest. The distinct connections come from a skip scan of the held index
/// (one seek per connection), not a scan of every held row.
fn held_summaries(c: &Connection) -> Result<BTreeMap<String, HeldSummary>, Abort> {
    let connections: Vec<String> = c
        .prepare_cached(
            "WITH RECURSIVE held (connection) AS ( \
               SELECT (SELECT MIN(held_connection) FROM jadpo_deliveries WHERE state = 'held') \
               UNION ALL \
               SELECT (SELECT MIN(held_connection) FROM jadpo_deliveries \
                       WHERE state = 'held' AND held_connection > held.connection) \
               FROM held WHERE held.connection IS NOT NULL \
             ) SELECT connection FROM held WHERE connection IS NOT NULL",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut count =
        c.prepare_cached("SELECT COUNT(*) FROM jadpo_deliveries WHERE state = 'held' AND held_connection = ?1")?;
    let mut longest = c.prepare_cached(
        "SELECT id FROM jadpo_deliveries WHERE state = 'held' AND held_connection = ?1 \
         ORDER BY held_since, id LIMIT 1",
    )?;
    let mut out = BTreeMap::new();
    for conn in connections {
        let n: i64 = count.query_row([&conn], |r| r.get(0))?;
        let first: Option<i64> = longest.query_row([&conn], |r| r.get(0)).optional()?;
        out.insert(
            conn,
            HeldSummary {
                count: n as u64,
                longest: first.map(DeliveryId),
            },
        );
    }
    Ok(out)
}

pub(crate) fn sweep(c: &Connection, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, Abort> {
    let mut breakers = Breakers::new(rows::all_breakers(c)?);
    let held = held_summaries(c)?;
    let plan = plan::sweep(&mut breakers, &held, now, wake_lease);
    super::writes::write_breakers(c, &plan.breakers)?;
    for &id in &plan.wake {
        let Some(stored) = rows::get(c, id)? else {
            return Err(Abort::Store(StoreError::NotFound(id)));
        };
        let mut d = stored.delivery;
        d.release(now);
        super::writes::update(c, &d, None, None, None)?;
    }
    let mut released = 0;
    for conn in &plan.release {
        released += super::writes::release(c, conn, now)?;
    }
    let messages: Vec<AlertMessage> = plan.alerts.iter().map(|a| AlertMessage::raised(a, now)).collect();
    super::alerts::insert(c, &messages)?;
    Ok(SweepReport {
        woken: plan.wake,
        released,
        alerts: plan.alerts,
    })
}
