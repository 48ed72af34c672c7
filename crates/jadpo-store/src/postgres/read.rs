//! Emit (in the store's own transaction or the caller's) and the listings.

use super::listen::NOTIFY;
use super::rows::{self, breaker_columns, delivery_columns};
use super::{reason, Abort};
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::{Delivery, DeliveryId, EventId, Timestamp};
use tokio_postgres::types::ToSql;
use tokio_postgres::ToStatement;

/// Ids taken up front, so each event's deliveries can name it and the
/// caller gets ids in the order of its events. One call's ids increase in
/// order, so the claim's `(due_at, id)` keeps emit order.
const NEXT_IDS: &str = "
SELECT ARRAY(SELECT nextval('jadpo_events_id_seq') FROM generate_series(1, $1::int)),
       ARRAY(SELECT nextval('jadpo_deliveries_id_seq') FROM generate_series(1, $2::int))";

/// Events and their deliveries in one statement: a delivery never names an
/// event that is not there (the store keeps this rule itself since migration
/// 4 dropped the foreign key, which cost every delivery a lookup and a lock).
const INSERT: &str = "
WITH events AS (
    INSERT INTO jadpo_events (id, name, payload, emitted_at, first_delivery, last_delivery, public_id,
        idempotency_key)
    SELECT u.id, u.name, u.payload, $4, u.first_delivery, u.last_delivery, u.public_id, u.idempotency_key
    FROM unnest($1::bigint[], $2::text[], $3::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[])
        AS u(id, name, payload, first_delivery, last_delivery, public_id, idempotency_key)
)
INSERT INTO jadpo_deliveries (id, event_id, subscriber, state, attempts, due_at, budget_from,
    held_for_ms, lease_token, created_at, updated_at)
SELECT u.id, u.event_id, u.subscriber, 'due', 0, $4, $4, 0, 0, $4, $4
FROM unnest($5::bigint[], $6::bigint[], $7::text[]) AS u(id, event_id, subscriber)";

/// Rows per statement: a bound on one statement's parameters.
const EMIT_CHUNK: usize = 10_000;

/// Emits `events` inside the caller's own transaction: they exist if and
/// only if that transaction commits. The transaction must see the store's
/// tables (same database, and `search_path` if the store uses a schema).
/// Many events take two statements per 10,000 rows, not one per event.
/// Idle workers in every process are woken when the transaction commits
/// (its notification is sent then, and never if it rolls back). An
/// idempotency key another transaction is writing at the same moment waits
/// for that one: if it commits, its event comes back as a duplicate (or
/// the key's conflict), and the caller's transaction goes on.
pub async fn emit_in(
    tx: &tokio_postgres::Transaction<'_>,
    events: &[NewEvent],
    now: Timestamp,
) -> Result<Vec<Emitted>, StoreError> {
    match emit_with(tx, [NEXT_IDS, INSERT, NOTIFY], events, now, Race::Savepoint).await {
        Ok(result) => result,
        Err(e) => Err(StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e)))),
    }
}

/// What an emit does when another transaction wrote the same new
/// idempotency key first (it waited for that one to commit).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Race {
    /// Fail: the store's own emit is redone from the start, and its lookup
    /// then finds the other's event.
    Fail,
    /// The caller's transaction can't be redone: each keyed write runs
    /// under a savepoint, rolled back to on the race, and the other's event
    /// is looked up and returned in the same transaction.
    Savepoint,
}

/// Two emits of one new idempotency key at once: the second waited for the
/// first and found the key taken.
fn is_key_race(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && db.constraint() == Some("jadpo_events_idempotency")
    })
}

/// The store's own emit, with its statements prepared once per connection.
pub(crate) async fn emit(tx: &Transaction<'_>, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, Abort> {
    let (next, insert, notify) = tokio::try_join!(
        tx.prepare_cached(NEXT_IDS),
        tx.prepare_cached(INSERT),
        tx.prepare_cached(NOTIFY)
    )?;
    match emit_with(tx, [&next, &insert, &notify], events, now, Race::Fail).await {
        Ok(result) => result.map_err(Abort::Store),
        // Redone from the start: the lookup then finds the other's event.
        Err(e) if is_key_race(&e) => Err(Abort::Conflict),
        Err(e) => Err(e.into()),
    }
}

/// An event emitted before under a name and idempotency key.
const KEYED: &str = "
SELECT id, payload, public_id, first_delivery, last_delivery FROM jadpo_events
WHERE name = $1 AND idempotency_key = $2";

const DELIVERIES_OF: &str = "
SELECT id FROM jadpo_deliveries WHERE id BETWEEN $2 AND $3 AND event_id = $1 ORDER BY id";

/// The statements are the ids, the insert and the notification. An
/// idempotency key used with another payload refuses the whole call before
/// anything is written (the inner `Err`).
async fn emit_with<S: ?Sized + ToStatement + Sync>(
    tx: &tokio_postgres::Transaction<'_>,
    [next_ids, insert, notify]: [&S; 3],
    events: &[NewEvent],
    now: Timestamp,
    race: Race,
) -> Result<Result<Vec<Emitted>, StoreError>, tokio_postgres::Error> {
    if events.iter().any(|e| e.idempotency_key.is_some()) {
        return emit_keyed(tx, [next_ids, insert, notify], events, now, race).await;
    }
    if events.iter().all(|e| e.subscribers.is_empty()) {
        return Ok(Ok(write_events(tx, next_ids, insert, events, now).await?));
    }
    // One notification for the whole emit, sent in the same round trip as
    // the first statement.
    let (_, emitted) = tokio::try_join!(tx.execute(notify, &[]), write_events(tx, next_ids, insert, events, now))?;
    Ok(Ok(emitted))
}

/// Events of which some carry an idempotency key: the keys are looked up
/// first, then each event is written alone (or found).
async fn emit_keyed<S: ?Sized + ToStatement + Sync>(
    tx: &tokio_postgres::Transaction<'_>,
    [next_ids, insert, notify]: [&S; 3],
    events: &[NewEvent],
    now: Timestamp,
    race: Race,
) -> Result<Result<Vec<Emitted>, StoreError>, tokio_postgres::Error> {
    let mut found = Vec::with_capacity(events.len());
    let mut first: std::collections::HashMap<(&str, &str), &str> = std::collections::HashMap::new();
    for e in events {
        let Some(key) = &e.idempotency_key else {
            found.push(None);
            continue;
        };
        let row = tx.query_opt(KEYED, &[&e.name, key]).await?;
        let payload: &str = match &row {
            Some(r) => r.try_get(1)?,
            None => first
                .entry((e.name.as_str(), key.as_str()))
                .or_insert(e.payload.as_str()),
        };
        if payload != e.payload {
            return Ok(Err(StoreError::IdempotencyConflict(e.name.clone())));
        }
        found.push(row);
    }
    if events.iter().any(|e| !e.subscribers.is_empty()) {
        tx.execute(notify, &[]).await?;
    }
    let mut out: Vec<Emitted> = Vec::with_capacity(events.len());
    for (i, (e, row)) in events.iter().zip(found).enumerate() {
        if let Some(r) = row {
            out.push(emitted_before(tx, &r).await?);
            continue;
        }
        // The same key earlier in this call: that event.
        let earlier = e.idempotency_key.as_ref().and_then(|key| {
            events[..i]
                .iter()
                .position(|o| o.name == e.name && o.idempotency_key.as_ref() == Some(key))
        });
        if let Some(j) = earlier {
            let again = Emitted {
                duplicate: true,
                ..out[j].clone()
            };
            out.push(again);
            continue;
        }
        let one = std::slice::from_ref(e);
        if race == Race::Fail || e.idempotency_key.is_none() {
            out.extend(write_events(tx, next_ids, insert, one, now).await?);
            continue;
        }
        tx.batch_execute("SAVEPOINT jadpo_idempotency").await?;
        match write_events(tx, next_ids, insert, one, now).await {
            Ok(written) => {
                tx.batch_execute("RELEASE SAVEPOINT jadpo_idempotency").await?;
                out.extend(written);
            }
            Err(err) if is_key_race(&err) => {
                tx.batch_execute("ROLLBACK TO SAVEPOINT jadpo_idempotency").await?;
                // The other transaction committed: this statement sees it.
                let key = e.idempotency_key.as_deref().unwrap_or_default();
                let Some(r) = tx.query_opt(KEYED, &[&e.name, &key]).await? else {
                    return Err(err);
                };
                if r.try_get::<_, &str>(1)? != e.payload {
                    return Ok(Err(StoreError::IdempotencyConflict(e.name.clone())));
                }
                out.push(emitted_before(tx, &r).await?);
            }
            Err(err) => return Err(err),
        }
    }
    Ok(Ok(out))
}

/// An event found by its idempotency key ([`KEYED`]'s row), as a duplicate.
async fn emitted_before(
    tx: &tokio_postgres::Transaction<'_>,
    r: &tokio_postgres::Row,
) -> Result<Emitted, tokio_postgres::Error> {
    let event_id: i64 = r.try_get(0)?;
    let (first, last): (Option<i64>, Option<i64>) = (r.try_get(3)?, r.try_get(4)?);
    let deliveries = tx
        .query(DELIVERIES_OF, &[&event_id, &first, &last])
        .await?
        .iter()
        .map(|d| d.try_get(0).map(DeliveryId))
        .collect::<Result<_, _>>()?;
    Ok(Emitted {
        event_id: EventId(event_id),
        public_id: r.try_get(2)?,
        deliveries,
        duplicate: true,
    })
}

async fn write_events<S: ?Sized + ToStatement + Sync>(
    tx: &tokio_postgres::Transaction<'_>,
    next_ids: &S,
    insert: &S,
    events: &[NewEvent],
    now: Timestamp,
) -> Result<Vec<Emitted>, tokio_postgres::Error> {
    let now = rows::ms(now);
    let mut emitted = Vec::with_capacity(events.len());
    let mut rest = events;
    while !rest.is_empty() {
        // At least one event per chunk, however many subscribers it has.
        let mut take = 0;
        let mut rows_in_chunk = 0;
        while take < rest.len() && (take == 0 || rows_in_chunk + rest[take].subscribers.len() < EMIT_CHUNK) {
            rows_in_chunk += rest[take].subscribers.len() + 1;
            take += 1;
        }
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        let n_deliveries: usize = chunk.iter().map(|e| e.subscribers.len()).sum();
        let ids = tx
            .query_one(next_ids, &[&(chunk.len() as i32), &(n_deliveries as i32)])
            .await?;
        let event_ids: Vec<i64> = ids.try_get(0)?;
        let delivery_ids: Vec<i64> = ids.try_get(1)?;
        let names: Vec<&str> = chunk.iter().map(|e| e.name.as_str()).collect();
        let payloads: Vec<&str> = chunk.iter().map(|e| e.payload.as_str()).collect();
        let keys: Vec<Option<&str>> = chunk.iter().map(|e| e.idempotency_key.as_deref()).collect();
        let mut of_event = Vec::with_capacity(n_deliveries);
        let mut subscribers = Vec::with_capacity(n_deliveries);
        let mut first = Vec::with_capacity(chunk.len());
        let mut public_ids = Vec::with_capacity(chunk.len());
        let mut last = Vec::with_capacity(chunk.len());
        let mut next = delivery_ids.iter();
        for (e, &event_id) in chunk.iter().zip(&event_ids) {
            let mut deliveries = Vec::with_capacity(e.subscribers.len());
            for s in &e.subscribers {
                let id = *next.next().expect("one id per delivery");
                deliveries.push(DeliveryId(id));
                of_event.push(event_id);
                subscribers.push(s.as_str());
            }
            // The ids of one call increase: the range holds every delivery
            // of the event (and perhaps another emit's, told apart by
            // `event_id`).
            debug_assert!(deliveries.windows(2).all(|w| w[0] < w[1]));
            first.push(deliveries.first().map(|d| d.0));
            last.push(deliveries.last().map(|d| d.0));
            let public_id = crate::types::new_public_id();
            public_ids.push(public_id.clone());
            emitted.push(Emitted {
                event_id: EventId(event_id),
                public_id,
                duplicate: false,
                deliveries,
            });
        }
        tx.execute(
            insert,
            &[
                &event_ids,
                &names,
                &payloads,
                &now,
                &delivery_ids,
                &of_event,
                &subscribers,
                &first,
                &last,
                &public_ids,
                &keys,
            ],
        )
        .await?;
    }
    Ok(emitted)
}

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
/// first, walked, for a subscriber alone: docs/system-tables.md).
pub(crate) async fn list(tx: &Transaction<'_>, filter: &DeliveryFilter) -> Result<Vec<Delivery>, Abort> {
    let mut sql = String::from(concat!(
        "SELECT ",
        delivery_columns!(),
        " FROM jadpo_deliveries WHERE true"
    ));
    let state = filter.state.map(|s| s.as_str());
    let event = filter.event.map(|e| e.0);
    let limit = filter.limit.map(|n| n as i64);
    let before = filter.before.map(|d| d.0);
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
    if let Some(b) = &before {
        params.push(b);
        sql.push_str(&format!(" AND id < ${}", params.len()));
    }
    if let Some(s) = &state {
        params.push(s);
        sql.push_str(&format!(" AND state = ${}", params.len()));
    }
    if let Some(s) = &filter.subscriber {
        params.push(s);
        sql.push_str(&format!(" AND subscriber = ${}", params.len()));
    }
    if let Some(e) = &event {
        params.push(e);
        let n = params.len();
        sql.push_str(&format!(
            " AND event_id = ${n} AND id BETWEEN \
             (SELECT first_delivery FROM jadpo_events WHERE id = ${n}) AND \
             (SELECT last_delivery FROM jadpo_events WHERE id = ${n})"
        ));
    }
    if let Some(c) = &filter.connection {
        params.push(c);
        sql.push_str(&format!(" AND state = 'held' AND held_connection = ${}", params.len()));
    }
    sql.push_str(" ORDER BY id DESC");
    if let Some(n) = &limit {
        params.push(n);
        sql.push_str(&format!(" LIMIT ${}", params.len()));
    }
    let stmt = tx.prepare_cached(&sql).await?;
    let found = tx.query(&stmt, &params).await?;
    found.iter().map(|r| Ok(rows::delivery(r)?.0)).collect()
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

const EVENT: &str = "SELECT id, name, payload, emitted_at, public_id FROM jadpo_events WHERE id = $1";

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
