//! The reads behind listing, the operator's views and the idle worker's
//! next due time.

use super::rows::{self, breaker_columns, delivery_columns};
use super::Abort;
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};
use tokio_postgres::types::ToSql;

const DELIVERY: &str = concat!("SELECT ", delivery_columns!(), " FROM jadpo_deliveries WHERE id = $1");

pub(crate) async fn delivery(tx: &Transaction<'_>, id: DeliveryId) -> Result<Option<Delivery>, Abort> {
    let stmt = tx.prepare_cached(DELIVERY).await?;
    match tx.query_opt(&stmt, &[&id.0]).await? {
        Some(row) => Ok(Some(rows::delivery(&row)?.0)),
        None => Ok(None),
    }
}

/// Newest first. Only the filters given become conditions, so each shape of
/// filter gets a plan of its own: `jadpo_deliveries_held`, or the primary
/// key (between the event's first and last delivery for an event; newest
/// first, walked, for a subscriber alone: docs/system-tables.md), or
/// `jadpo_delivery_keys` for a key.
pub(crate) async fn list(tx: &Transaction<'_>, filter: &DeliveryFilter) -> Result<Vec<Delivery>, Abort> {
    let (sql, params) = list_query(filter);
    let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p as _).collect();
    let stmt = tx.prepare_cached(&sql).await?;
    let found = tx.query(&stmt, &params).await?;
    found.iter().map(|r| Ok(rows::delivery(r)?.0)).collect()
}

/// The statement `list` runs for `filter`, and its parameters.
pub(super) fn list_query(filter: &DeliveryFilter) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut sql = String::from(concat!("SELECT ", delivery_columns!(), " FROM jadpo_deliveries"));
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    // A key's deliveries drive the join, walked newest first down the key
    // table's primary key: the deliveries' `id` equals theirs, so the
    // order by `id` is that walk's, and it stops at the limit.
    if let Some(k) = &filter.key {
        params.push(Box::new(k.clone()));
        sql.push_str(
            " JOIN (SELECT delivery_id AS keyed FROM jadpo_delivery_keys WHERE delivery_key = $1) AS k \
             ON id = k.keyed",
        );
    }
    sql.push_str(" WHERE true");
    if let Some(b) = filter.before {
        params.push(Box::new(b.0));
        sql.push_str(&format!(" AND id < ${}", params.len()));
    }
    if let Some(s) = filter.state {
        params.push(Box::new(s.as_str()));
        sql.push_str(&format!(" AND state = ${}", params.len()));
    }
    if let Some(s) = &filter.subscriber {
        params.push(Box::new(s.clone()));
        sql.push_str(&format!(" AND subscriber = ${}", params.len()));
    }
    if let Some(e) = filter.event {
        params.push(Box::new(e.0));
        let n = params.len();
        sql.push_str(&format!(
            " AND event_id = ${n} AND id BETWEEN \
             (SELECT first_delivery FROM jadpo_events WHERE id = ${n}) AND \
             (SELECT last_delivery FROM jadpo_events WHERE id = ${n})"
        ));
    }
    if let Some(c) = &filter.connection {
        params.push(Box::new(c.clone()));
        sql.push_str(&format!(" AND state = 'held' AND held_connection = ${}", params.len()));
    }
    sql.push_str(" ORDER BY id DESC");
    if let Some(n) = filter.limit {
        params.push(Box::new(n as i64));
        sql.push_str(&format!(" LIMIT ${}", params.len()));
    }
    (sql, params)
}

/// The attempts' rows, then the attempt that succeeded, kept on the
/// delivery's own row (docs/system-tables.md): nothing comes after it.
const ATTEMPTS: &str = "
SELECT delivery_id, attempt, started_at, ended_at, state, failure_code, failure_kind, id AS k
FROM jadpo_attempts WHERE delivery_id = $1
UNION ALL
SELECT id, attempts, success_started_at, finished_at, 'succeeded', NULL, NULL, NULL
FROM jadpo_deliveries WHERE id = $1 AND success_started_at IS NOT NULL
ORDER BY k NULLS LAST";

pub(crate) async fn attempts(tx: &Transaction<'_>, id: DeliveryId) -> Result<Vec<AttemptRecord>, Abort> {
    let stmt = tx.prepare_cached(ATTEMPTS).await?;
    let found = tx.query(&stmt, &[&id.0]).await?;
    found
        .iter()
        .map(|r| {
            Ok(AttemptRecord {
                delivery: DeliveryId(r.try_get(0)?),
                attempt: u32::try_from(r.try_get::<_, i32>(1)?).unwrap_or(0),
                started_at: Timestamp::from_millis(r.try_get(2)?),
                ended_at: Timestamp::from_millis(r.try_get(3)?),
                state: rows::state(r.try_get(4)?)?,
                failure: rows::failure(r.try_get(5)?, r.try_get(6)?)?,
            })
        })
        .collect()
}

const EVENT: &str =
    "SELECT id, name, payload, emitted_at, public_id, traceparent, tracestate FROM jadpo_events WHERE id = $1";

pub(crate) async fn event(tx: &Transaction<'_>, id: EventId) -> Result<Option<EventRecord>, Abort> {
    let stmt = tx.prepare_cached(EVENT).await?;
    let Some(r) = tx.query_opt(&stmt, &[&id.0]).await? else {
        return Ok(None);
    };
    Ok(Some(EventRecord {
        id: EventId(r.try_get(0)?),
        name: r.try_get(1)?,
        payload: r.try_get(2)?,
        emitted_at: Timestamp::from_millis(r.try_get(3)?),
        public_id: r.try_get(4)?,
        trace: crate::codec::trace(r.try_get(5)?, r.try_get(6)?),
    }))
}

/// In byte order of the name, as the in-memory store lists them, whatever
/// the database's collation.
const BREAKERS: &str = concat!(
    "SELECT ",
    breaker_columns!(),
    ", (SELECT count(*) FROM jadpo_deliveries AS d
        WHERE d.state = 'held' AND d.held_connection = b.connection)
    FROM jadpo_circuit_breakers AS b ORDER BY connection COLLATE \"C\""
);

pub(crate) async fn breakers(tx: &Transaction<'_>) -> Result<Vec<BreakerView>, Abort> {
    let stmt = tx.prepare_cached(BREAKERS).await?;
    let found = tx.query(&stmt, &[]).await?;
    found
        .iter()
        .map(|r| {
            Ok(BreakerView {
                breaker: rows::breaker(r)?,
                held: r.try_get::<_, i64>(10)? as u64,
            })
        })
        .collect()
}

/// Deliveries by state. A full count: for metrics, not a hot path.
pub(crate) async fn counts(
    tx: &Transaction<'_>,
) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, Abort> {
    let found = tx
        .query("SELECT state, COUNT(*) FROM jadpo_deliveries GROUP BY state", &[])
        .await?;
    let mut counts = std::collections::BTreeMap::new();
    for r in found {
        let state: String = r.try_get(0)?;
        counts.insert(rows::state(&state)?, r.try_get::<_, i64>(1)? as u64);
    }
    Ok(counts)
}

/// Each state's count up to a cap, each through its index: the claim's
/// partial indexes for `due` and `running`, the hold's for `held`,
/// `jadpo_deliveries_attention` for `failed` and `parked`, and for
/// `succeeded` the retention index, read only until the cap.
const COUNTS_UP_TO: &str = "
SELECT (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'due' LIMIT $1) AS t),
       (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'running' LIMIT $1) AS t),
       (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'held' LIMIT $1) AS t),
       (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries
            WHERE finished_at IS NOT NULL AND state = 'succeeded' LIMIT $1) AS t),
       (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'failed' LIMIT $1) AS t),
       (SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries WHERE state = 'parked' LIMIT $1) AS t)";

pub(crate) async fn counts_up_to(
    tx: &Transaction<'_>,
    cap: u64,
) -> Result<std::collections::BTreeMap<jadpo_core::DeliveryState, u64>, Abort> {
    use jadpo_core::DeliveryState::*;
    let stmt = tx.prepare_cached(COUNTS_UP_TO).await?;
    let cap = i64::try_from(cap).unwrap_or(i64::MAX);
    let row = tx.query_one(&stmt, &[&cap]).await?;
    let mut counts = std::collections::BTreeMap::new();
    for (i, state) in [Due, Running, Held, Succeeded, Failed, Parked].into_iter().enumerate() {
        let n: i64 = row.try_get(i)?;
        if n > 0 {
            counts.insert(state, n as u64);
        }
    }
    Ok(counts)
}

/// The first row of each claim queue, each from the front of its partial
/// index (`jadpo_deliveries_due`, `jadpo_deliveries_lost`), in the order
/// the claim reads them.
const NEXT_DUE: &str = "
SELECT (SELECT due_at FROM jadpo_deliveries WHERE state = 'due' ORDER BY due_at, id LIMIT 1),
       (SELECT lease_until FROM jadpo_deliveries WHERE state = 'running' ORDER BY lease_until, id LIMIT 1)";

/// The earlier of the first due row and the first lost lease.
pub(crate) async fn next_due(tx: &Transaction<'_>) -> Result<Option<Timestamp>, Abort> {
    let stmt = tx.prepare_cached(NEXT_DUE).await?;
    let row = tx.query_one(&stmt, &[]).await?;
    let (due, lost): (Option<i64>, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
    Ok(due.into_iter().chain(lost).min().map(Timestamp::from_millis))
}

const BREAKER_ROWS: &str = concat!(
    "SELECT ",
    breaker_columns!(),
    " FROM jadpo_circuit_breakers AS b ORDER BY connection COLLATE \"C\""
);
const HELD_UP_TO: &str = "SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries
    WHERE state = 'held' AND held_connection = $1 LIMIT $2) AS t";
const WAITING_UP_TO: &str = "SELECT count(*) FROM (SELECT 1 FROM jadpo_deliveries
    WHERE waiting_on = $1 AND state = 'due' LIMIT $2) AS t";
const OLDEST_DUE: &str = "SELECT due_at FROM jadpo_deliveries
    WHERE state = 'due' AND subscriber = $1 AND due_at <= $2 ORDER BY due_at LIMIT 1";

/// What `/metrics` shows (`Store::gauges`): one bounded probe per breaker,
/// per connection and per subscriber, each through a partial index
/// (`jadpo_deliveries_held`, `jadpo_deliveries_waiting`,
/// `jadpo_deliveries_due_subscriber`), so a scrape costs the same with a
/// million deliveries queued.
pub(crate) async fn gauges(tx: &Transaction<'_>, q: &GaugeQuery<'_>) -> Result<Gauges, Abort> {
    let cap = i64::try_from(q.cap).unwrap_or(i64::MAX);
    let stmt = tx.prepare_cached(BREAKER_ROWS).await?;
    let breakers = rows::breakers(&tx.query(&stmt, &[]).await?)?;
    let mut found = Gauges::default();
    let held = tx.prepare_cached(HELD_UP_TO).await?;
    for breaker in breakers {
        let n: i64 = tx.query_one(&held, &[&breaker.connection, &cap]).await?.try_get(0)?;
        found.breakers.push(BreakerView {
            breaker,
            held: n.max(0) as u64,
        });
    }
    let waiting = tx.prepare_cached(WAITING_UP_TO).await?;
    for connection in q.connections {
        let n: i64 = tx.query_one(&waiting, &[connection, &cap]).await?.try_get(0)?;
        if n > 0 {
            found.waiting.insert(connection.clone(), n as u64);
        }
    }
    let oldest = tx.prepare_cached(OLDEST_DUE).await?;
    let now = q.now.as_millis();
    for subscriber in q.subscribers {
        if let Some(r) = tx.query_opt(&oldest, &[subscriber, &now]).await? {
            found
                .oldest_due
                .insert(subscriber.clone(), Timestamp::from_millis(r.try_get(0)?));
        }
    }
    Ok(found)
}
