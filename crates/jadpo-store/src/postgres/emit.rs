//! Events and their deliveries, written in the store's own transaction or
//! the caller's (`emit_in`).

use super::listen::NOTIFY;
use super::{reason, Abort};
use crate::codec::at_ms;
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::{DeliveryId, EventId, Timestamp};
use tokio_postgres::ToStatement;

/// Ids taken up front, so each event's deliveries can name it and the
/// caller gets ids in the order of its events. One call's ids increase in
/// order, so the claim's `(due_at, id)` keeps emit order.
const NEXT_IDS: &str = "
SELECT ARRAY(SELECT nextval('jadpo_events_id_seq') FROM generate_series(1, $1::int)),
       ARRAY(SELECT nextval('jadpo_deliveries_id_seq') FROM generate_series(1, $2::int))";

/// Events, their deliveries and the keyed ones' keys in one statement: a
/// delivery never names an event that is not there (the store keeps this rule itself since migration
/// 4 dropped the foreign key, which cost every delivery a lookup and a lock).
const INSERT: &str = "
WITH events AS (
    INSERT INTO jadpo_events (id, name, payload, emitted_at, first_delivery, last_delivery, public_id,
        idempotency_key, traceparent, tracestate)
    SELECT u.id, u.name, u.payload, $4, u.first_delivery, u.last_delivery, u.public_id, u.idempotency_key,
        u.traceparent, u.tracestate
    FROM unnest($1::bigint[], $2::text[], $3::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[],
                $12::text[], $13::text[])
        AS u(id, name, payload, first_delivery, last_delivery, public_id, idempotency_key, traceparent,
             tracestate)
), deliveries AS (
    INSERT INTO jadpo_deliveries (id, event_id, subscriber, state, attempts, due_at, budget_from,
        held_for_ms, lease_token, created_at, updated_at, delivery_key, key_rule)
    SELECT u.id, u.event_id, u.subscriber, u.state, 0, $4, $4, 0, 0, $4, $4, u.delivery_key, u.key_rule
    FROM unnest($5::bigint[], $6::bigint[], $7::text[], $14::text[], $15::text[], $16::text[])
        AS u(id, event_id, subscriber, delivery_key, state, key_rule)
), slots AS (
    UPDATE jadpo_keys AS k SET taken = u.taken
    FROM unnest($17::text[], $18::text[], $19::int[]) AS u(subscriber, delivery_key, taken)
    WHERE k.subscriber = u.subscriber AND k.delivery_key = u.delivery_key
)
INSERT INTO jadpo_delivery_keys (delivery_key, delivery_id)
SELECT u.delivery_key, u.id FROM unnest($5::bigint[], $14::text[]) AS u(id, delivery_key)
WHERE u.delivery_key IS NOT NULL";

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
    let found = match events_by_key(tx, events).await? {
        Ok(found) => found,
        Err(conflict) => return Ok(Err(conflict)),
    };
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
        match write_or_find(tx, [next_ids, insert], e, now).await? {
            Ok(written) => out.extend(written),
            Err(conflict) => return Ok(Err(conflict)),
        }
    }
    Ok(Ok(out))
}

/// Each event's row found by its idempotency key (`None` without a key or
/// a row). A key given again with another payload, stored or earlier in
/// `events`, is a conflict.
async fn events_by_key(
    tx: &tokio_postgres::Transaction<'_>,
    events: &[NewEvent],
) -> Result<Result<Vec<Option<tokio_postgres::Row>>, StoreError>, tokio_postgres::Error> {
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
    Ok(Ok(found))
}

/// Writes one keyed event under a savepoint; if another transaction wrote
/// its key first (and committed), that event, as a duplicate.
async fn write_or_find<S: ?Sized + ToStatement + Sync>(
    tx: &tokio_postgres::Transaction<'_>,
    [next_ids, insert]: [&S; 2],
    e: &NewEvent,
    now: Timestamp,
) -> Result<Result<Vec<Emitted>, StoreError>, tokio_postgres::Error> {
    tx.batch_execute("SAVEPOINT jadpo_idempotency").await?;
    match write_events(tx, next_ids, insert, std::slice::from_ref(e), now).await {
        Ok(written) => {
            tx.batch_execute("RELEASE SAVEPOINT jadpo_idempotency").await?;
            Ok(Ok(written))
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
            Ok(Ok(vec![emitted_before(tx, &r).await?]))
        }
        Err(err) => Err(err),
    }
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

/// How many of `events` the next statement writes: under [`EMIT_CHUNK`]
/// rows, and at least one event however many subscribers it has.
fn chunk_len(events: &[NewEvent]) -> usize {
    let mut take = 0;
    let mut rows_in_chunk = 0;
    while take < events.len() && (take == 0 || rows_in_chunk + events[take].subscribers.len() < EMIT_CHUNK) {
        rows_in_chunk += events[take].subscribers.len() + 1;
        take += 1;
    }
    take
}

/// Writes `events` and their deliveries, a chunk per statement, with ids
/// taken from the sequences first.
async fn write_events<S: ?Sized + ToStatement + Sync>(
    tx: &tokio_postgres::Transaction<'_>,
    next_ids: &S,
    insert: &S,
    events: &[NewEvent],
    now: Timestamp,
) -> Result<Vec<Emitted>, tokio_postgres::Error> {
    let now = at_ms(now);
    let mut emitted = Vec::with_capacity(events.len());
    let mut rest = events;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunk_len(rest));
        rest = tail;
        let n_deliveries: usize = chunk.iter().map(|e| e.subscribers.len()).sum();
        // Each ordered key's row, locked, and its slots taken so far: each
        // delivery of it in emit order takes one, or waits queued. Sent with
        // the ids' statement, in one round trip.
        let ordered: std::collections::BTreeSet<(&str, &str)> = chunk
            .iter()
            .flat_map(|e| e.keys.iter())
            .filter(|(_, k)| k.rule.is_some())
            .map(|(s, k)| (s.as_str(), k.key.as_str()))
            .collect();
        let lock_keys = async {
            if ordered.is_empty() {
                Ok(Default::default())
            } else {
                super::keys::lock(tx, &ordered).await
            }
        };
        let (n_events, n_rows) = (chunk.len() as i32, n_deliveries as i32);
        let counts: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&n_events, &n_rows];
        let (ids, mut taken) = tokio::try_join!(tx.query_one(next_ids, &counts), lock_keys)?;
        let event_ids: Vec<i64> = ids.try_get(0)?;
        let delivery_ids: Vec<i64> = ids.try_get(1)?;
        let names: Vec<&str> = chunk.iter().map(|e| e.name.as_str()).collect();
        let payloads: Vec<&str> = chunk.iter().map(|e| e.payload.as_str()).collect();
        let keys: Vec<Option<&str>> = chunk.iter().map(|e| e.idempotency_key.as_deref()).collect();
        let traceparents: Vec<Option<&str>> = chunk
            .iter()
            .map(|e| e.trace.as_ref().map(|t| t.traceparent()))
            .collect();
        let tracestates: Vec<Option<&str>> = chunk
            .iter()
            .map(|e| e.trace.as_ref().and_then(|t| t.tracestate()))
            .collect();
        let mut of_event = Vec::with_capacity(n_deliveries);
        let mut subscribers = Vec::with_capacity(n_deliveries);
        let mut delivery_keys: Vec<Option<&str>> = Vec::with_capacity(n_deliveries);
        let mut states: Vec<&str> = Vec::with_capacity(n_deliveries);
        let mut rules: Vec<Option<String>> = Vec::with_capacity(n_deliveries);

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
                let keyed = e.keys.get(s);
                delivery_keys.push(keyed.map(|k| k.key.as_str()));
                rules.push(keyed.and_then(|k| k.rule).map(jadpo_core::key_rule::KeyRule::stored));
                states.push(match keyed.and_then(|k| k.rule.map(|r| (r, &k.key))) {
                    Some((rule, key)) => {
                        let slots = taken
                            .get_mut(&(s.clone(), key.as_str().to_owned()))
                            .expect("every ordered key was locked");
                        if slots.take(rule) {
                            "due"
                        } else {
                            "queued"
                        }
                    }
                    None => "due",
                });
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
        let (slot_subscribers, slot_keys, slot_taken) = super::keys::columns(&taken);
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
                &traceparents,
                &tracestates,
                &delivery_keys,
                &states,
                &rules,
                &slot_subscribers,
                &slot_keys,
                &slot_taken,
            ],
        )
        .await?;
    }
    Ok(emitted)
}
