//! The reads behind listing, the operator's views and the idle worker's
//! next due time.

use super::pool::Abort;
use super::rows::{self, delivery_columns};
use crate::types::*;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection, OptionalExtension};

pub(crate) fn delivery(c: &Connection, id: DeliveryId) -> Result<Option<Delivery>, Abort> {
    Ok(rows::get(c, id)?.map(|s| s.delivery))
}

/// Newest first. Only the filters given become conditions, so each query can
/// use the index its filter has (subscriber, event, key, held connection).
pub(crate) fn list(c: &Connection, filter: &DeliveryFilter) -> Result<Vec<Delivery>, Abort> {
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
    if let Some(k) = &filter.key {
        add("d.delivery_key =", Value::Text(k.clone()));
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

/// The attempts' rows, then the attempt that succeeded, kept on the
/// delivery's own row (docs/system-tables.md): nothing comes after it.
pub(crate) fn attempts(c: &Connection, id: DeliveryId) -> Result<Vec<AttemptRecord>, Abort> {
    Ok(c.prepare_cached(
        "SELECT delivery_id, attempt, started_at, ended_at, state, failure_code, failure_kind FROM ( \
           SELECT delivery_id, attempt, started_at, ended_at, state, failure_code, failure_kind, id AS k \
           FROM jadpo_attempts WHERE delivery_id = ?1 \
           UNION ALL \
           SELECT id, attempts, success_started_at, finished_at, 'succeeded', NULL, NULL, NULL \
           FROM jadpo_deliveries WHERE id = ?1 AND success_started_at IS NOT NULL) \
         ORDER BY k IS NULL, k",
    )?
    .query_map([id.0], rows::attempt)?
    .collect::<rusqlite::Result<_>>()?)
}

pub(crate) fn event(c: &Connection, id: EventId) -> Result<Option<EventRecord>, Abort> {
    Ok(c.prepare_cached(
        "SELECT id, name, payload, emitted_at, public_id, traceparent, tracestate \
             FROM jadpo_events WHERE id = ?1",
    )?
    .query_row([id.0], rows::event)
    .optional()?)
}

pub(crate) fn breakers(c: &Connection) -> Result<Vec<BreakerView>, Abort> {
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
pub(crate) fn counts(c: &Connection) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, Abort> {
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
pub(crate) fn next_due(c: &Connection) -> Result<Option<Timestamp>, Abort> {
    let (due, lost): (Option<i64>, Option<i64>) = c
        .prepare_cached(
            "SELECT (SELECT due_at FROM jadpo_deliveries WHERE state = 'due' ORDER BY due_at, id LIMIT 1), \
                    (SELECT lease_until FROM jadpo_deliveries WHERE state = 'running' \
                     ORDER BY lease_until, id LIMIT 1)",
        )?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(due.into_iter().chain(lost).min().map(Timestamp::from_millis))
}

/// Each state's count up to a cap, each through its index (see the
/// PostgreSQL store's `COUNTS_UP_TO`).
pub(crate) fn counts_up_to(
    c: &Connection,
    cap: u64,
) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, Abort> {
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

/// What `/metrics` shows (`Store::gauges`): one bounded probe per breaker,
/// per connection and per subscriber, each through a partial index
/// (`jadpo_deliveries_held`, `jadpo_deliveries_waiting`,
/// `jadpo_deliveries_due_subscriber`), so a scrape costs the same with a
/// million deliveries queued.
pub(crate) fn gauges(
    c: &Connection,
    subscribers: &[String],
    connections: &[String],
    now: Timestamp,
    cap: u64,
) -> Result<Gauges, Abort> {
    let cap = i64::try_from(cap).unwrap_or(i64::MAX);
    let breakers: Vec<jadpo_core::Breaker> = c
        .prepare_cached(concat!(
            "SELECT ",
            rows::breaker_columns!(),
            " FROM jadpo_circuit_breakers b ORDER BY b.connection"
        ))?
        .query_map([], rows::breaker)?
        .collect::<rusqlite::Result<_>>()?;
    let mut held = c.prepare_cached(
        "SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries \
         WHERE state = 'held' AND held_connection = ?1 LIMIT ?2)",
    )?;
    let mut found = Gauges::default();
    for breaker in breakers {
        let n: i64 = held.query_row(rusqlite::params![breaker.connection, cap], |r| r.get(0))?;
        found.breakers.push(BreakerView {
            breaker,
            held: n.max(0) as u64,
        });
    }
    // The index's condition named, so SQLite uses it.
    let mut waiting = c.prepare_cached(
        "SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries \
         WHERE waiting_on IS NOT NULL AND waiting_on = ?1 AND state = 'due' LIMIT ?2)",
    )?;
    for connection in connections {
        let n: i64 = waiting.query_row(rusqlite::params![connection, cap], |r| r.get(0))?;
        if n > 0 {
            found.waiting.insert(connection.clone(), n as u64);
        }
    }
    let mut oldest = c.prepare_cached(
        "SELECT due_at FROM jadpo_deliveries \
         WHERE state = 'due' AND subscriber = ?1 AND due_at <= ?2 ORDER BY due_at LIMIT 1",
    )?;
    for subscriber in subscribers {
        let at: Option<i64> = oldest
            .query_row(rusqlite::params![subscriber, now.as_millis()], |r| r.get(0))
            .optional()?;
        if let Some(at) = at {
            found.oldest_due.insert(subscriber.clone(), Timestamp::from_millis(at));
        }
    }
    Ok(found)
}
