//! The tick's sweep, retention, and the reads behind listing.

use super::pool::Fault;
use super::rows::{self, delivery_columns};
use crate::plan::{self, Breakers, HeldSummary};
use crate::types::*;
use jadpo_core::alert::AlertMessage;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use std::collections::BTreeMap;
use std::time::Duration;

/// The connections holding deliveries, each with its count and the one held
/// longest. The distinct connections come from a skip scan of the held index
/// (one seek per connection), not a scan of every held row.
fn held_summaries(c: &Connection) -> Result<BTreeMap<String, HeldSummary>, Fault> {
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

pub(crate) fn sweep(c: &Connection, now: Timestamp, wake_lease: Duration) -> Result<SweepReport, Fault> {
    let mut breakers = Breakers::new(rows::all_breakers(c)?);
    let held = held_summaries(c)?;
    let plan = plan::sweep(&mut breakers, &held, now, wake_lease);
    rows::write_breakers(c, &plan.breakers)?;
    for &id in &plan.wake {
        let Some(stored) = rows::get(c, id)? else {
            return Err(Fault::Store(StoreError::NotFound(id)));
        };
        let mut d = stored.delivery;
        d.release(now);
        rows::update(c, &d, None, None)?;
    }
    let mut released = 0;
    for conn in &plan.release {
        released += rows::release_all(c, conn, now)?;
    }
    let messages: Vec<AlertMessage> = plan.alerts.iter().map(|a| AlertMessage::raised(a, now)).collect();
    super::alerts::insert(c, &messages)?;
    Ok(SweepReport {
        woken: plan.wake,
        released,
        alerts: plan.alerts,
    })
}

/// Deletes up to `batch` deliveries finished before `before` (through the
/// retention index, which holds only rows with a `finished_at`; the state is
/// checked too, so a row is pruned only if finished) and their attempts,
/// then their events if no delivery is left on them.
pub(crate) fn prune(c: &Connection, before: Timestamp, batch: usize) -> Result<usize, Fault> {
    let old: Vec<(i64, i64)> = c
        .prepare_cached(
            "SELECT id, event_id FROM jadpo_deliveries \
             WHERE state IN ('succeeded', 'failed', 'parked') AND finished_at < ?1 \
             ORDER BY finished_at LIMIT ?2",
        )?
        .query_map(params![before.as_millis(), batch as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut attempts = c.prepare_cached("DELETE FROM jadpo_attempts WHERE delivery_id = ?1")?;
    let mut delivery = c.prepare_cached("DELETE FROM jadpo_deliveries WHERE id = ?1")?;
    let mut event = c.prepare_cached(
        "DELETE FROM jadpo_events WHERE id = ?1 AND emitted_at < ?2 \
         AND NOT EXISTS (SELECT 1 FROM jadpo_deliveries WHERE event_id = ?1)",
    )?;
    for (id, _) in &old {
        attempts.execute([id])?;
        delivery.execute([id])?;
    }
    for (_, event_id) in &old {
        event.execute(params![event_id, before.as_millis()])?;
    }
    // Events no delivery refers to (emitted with no subscriber), oldest
    // first, as many as a batch.
    c.prepare_cached(
        "DELETE FROM jadpo_events WHERE id IN (SELECT e.id FROM jadpo_events e \
         WHERE e.emitted_at < ?1 AND NOT EXISTS (SELECT 1 FROM jadpo_deliveries d WHERE d.event_id = e.id) \
         ORDER BY e.emitted_at, e.id LIMIT ?2)",
    )?
    .execute(params![before.as_millis(), batch as i64])?;
    Ok(old.len())
}

pub(crate) fn delivery(c: &Connection, id: DeliveryId) -> Result<Option<Delivery>, Fault> {
    Ok(rows::get(c, id)?.map(|s| s.delivery))
}

/// Newest first. Only the filters given become conditions, so each query can
/// use the index its filter has (subscriber, event, held connection).
pub(crate) fn list(c: &Connection, filter: &DeliveryFilter) -> Result<Vec<Delivery>, Fault> {
    let mut conds: Vec<String> = Vec::new();
    let mut args: Vec<Value> = Vec::new();
    let mut add = |cond: &str, v: Value| {
        args.push(v);
        conds.push(format!(" AND {cond} ?{}", args.len()));
    };
    if let Some(b) = filter.before {
        add("d.id <", Value::Integer(b.0));
    }
    if let Some(s) = filter.state {
        add("d.state =", Value::Text(s.as_str().into()));
    }
    if let Some(s) = &filter.subscriber {
        add("d.subscriber =", Value::Text(s.clone()));
    }
    if let Some(e) = filter.event {
        add("d.event_id =", Value::Integer(e.0));
    }
    if let Some(conn) = &filter.connection {
        add("d.state = 'held' AND d.held_connection =", Value::Text(conn.clone()));
    }
    // A negative LIMIT is no limit in SQLite.
    let limit = filter.limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
    args.push(Value::Integer(limit));
    let sql = format!(
        "SELECT {} FROM jadpo_deliveries d WHERE 1 = 1{} ORDER BY d.id DESC LIMIT ?{}",
        delivery_columns!(),
        conds.concat(),
        args.len()
    );
    let rows = c
        .prepare_cached(&sql)?
        .query_map(params_from_iter(args), rows::delivery)?
        .map(|r| r.map(|s| s.delivery))
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(crate) fn attempts(c: &Connection, id: DeliveryId) -> Result<Vec<AttemptRecord>, Fault> {
    Ok(c.prepare_cached(
        "SELECT delivery_id, attempt, started_at, ended_at, state, failure_code, failure_kind \
         FROM jadpo_attempts WHERE delivery_id = ?1 ORDER BY id",
    )?
    .query_map([id.0], rows::attempt)?
    .collect::<rusqlite::Result<_>>()?)
}

pub(crate) fn event(c: &Connection, id: EventId) -> Result<Option<EventRecord>, Fault> {
    Ok(
        c.prepare_cached("SELECT id, name, payload, emitted_at, public_id FROM jadpo_events WHERE id = ?1")?
            .query_row([id.0], rows::event)
            .optional()?,
    )
}

pub(crate) fn breakers(c: &Connection) -> Result<Vec<BreakerView>, Fault> {
    let rows = c
        .prepare_cached(concat!(
            "SELECT ",
            rows::breaker_columns!(),
            ", (SELECT COUNT(*) FROM jadpo_deliveries d \
                WHERE d.state = 'held' AND d.held_connection = b.connection) \
             FROM jadpo_circuit_breakers b ORDER BY b.connection"
        ))?
        .query_map([], |r| {
            Ok(BreakerView {
                breaker: rows::breaker(r)?,
                held: r.get::<_, i64>(10)? as u64,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Deliveries by state. A full count: for metrics, not a hot path.
pub(crate) fn counts(c: &Connection) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, Fault> {
    let mut stmt = c.prepare_cached("SELECT state, COUNT(*) FROM jadpo_deliveries GROUP BY state")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut counts = std::collections::BTreeMap::new();
    for row in rows {
        let (state, n) = row?;
        if let Some(state) = jadpo_core::DeliveryState::parse(&state) {
            counts.insert(state, n as u64);
        }
    }
    Ok(counts)
}

/// The first row of each claim queue, each read from the front of its
/// partial index (`jadpo_deliveries_due`, `jadpo_deliveries_lost`).
pub(crate) fn next_due(c: &Connection) -> Result<Option<Timestamp>, Fault> {
    let (due, lost): (Option<i64>, Option<i64>) = c
        .prepare_cached(
            "SELECT (SELECT due_at FROM jadpo_deliveries WHERE state = 'due' ORDER BY due_at, id LIMIT 1), \
                    (SELECT lease_until FROM jadpo_deliveries WHERE state = 'running' \
                     ORDER BY lease_until, id LIMIT 1)",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(due.into_iter().chain(lost).min().map(Timestamp::from_millis))
}

/// Adds to the per-minute summary, and forgets minutes before
/// `forget_before`.
pub(crate) fn add_minutes(c: &Connection, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), Fault> {
    let mut add = c.prepare_cached(
        "INSERT INTO jadpo_minutes (minute, series, n) VALUES (?1, ?2, ?3) \
         ON CONFLICT (minute, series) DO UPDATE SET n = n + excluded.n",
    )?;
    for m in counts {
        add.execute(params![minute_of(m.minute).as_millis(), m.series, m.n as i64])?;
    }
    c.prepare_cached("DELETE FROM jadpo_minutes WHERE minute < ?1")?
        .execute([minute_of(forget_before).as_millis()])?;
    Ok(())
}

pub(crate) fn minutes(c: &Connection, since: Timestamp) -> Result<Vec<MinuteCount>, Fault> {
    Ok(
        c.prepare_cached("SELECT minute, series, n FROM jadpo_minutes WHERE minute >= ?1 ORDER BY minute, series")?
            .query_map([minute_of(since).as_millis()], |r| {
                Ok(MinuteCount {
                    minute: Timestamp::from_millis(r.get(0)?),
                    series: r.get(1)?,
                    n: r.get::<_, i64>(2)?.max(0) as u64,
                })
            })?
            .collect::<rusqlite::Result<_>>()?,
    )
}

/// Each state's count up to a cap, each through its index (see the
/// PostgreSQL store's `COUNTS_UP_TO`).
pub(crate) fn counts_up_to(
    c: &Connection,
    cap: u64,
) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, Fault> {
    use jadpo_core::DeliveryState::*;
    let cap = i64::try_from(cap).unwrap_or(i64::MAX);
    let mut stmt = c.prepare_cached(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'due' LIMIT ?1)),
                (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'running' LIMIT ?1)),
                (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'held' LIMIT ?1)),
                (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries
                     WHERE finished_at IS NOT NULL AND state = 'succeeded' LIMIT ?1)),
                (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'failed' LIMIT ?1)),
                (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'parked' LIMIT ?1))",
    )?;
    let found: [i64; 6] = stmt.query_row([cap], |r| {
        Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?])
    })?;
    let mut counts = std::collections::BTreeMap::new();
    for (state, n) in [Due, Running, Held, Succeeded, Failed, Parked].into_iter().zip(found) {
        if n > 0 {
            counts.insert(state, n as u64);
        }
    }
    Ok(counts)
}
