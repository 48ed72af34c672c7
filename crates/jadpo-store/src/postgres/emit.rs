//! Events and their deliveries, written in the store's own transaction or
//! the caller's (`emit_in`).

use super::emit_tx::{EmitTx, KeyedRow, Rows, Started, Tokio, INSERT, NEXT_IDS};
use super::listen::NOTIFY;
use super::{reason, Abort};
use crate::codec::at_ms;
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::{DeliveryId, EventId, Timestamp};

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
    let mut tx = Tokio {
        tx,
        next_ids: NEXT_IDS,
        insert: INSERT,
        notify: NOTIFY,
    };
    in_callers(&mut tx, events, now).await
}

/// An emit in a caller's transaction, of any driver: a store error it
/// can act on, or why the server failed it.
pub(super) async fn in_callers<D: EmitTx>(
    tx: &mut D,
    events: &[NewEvent],
    now: Timestamp,
) -> Result<Vec<Emitted>, StoreError> {
    match emit_with(tx, events, now, Race::Savepoint).await {
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

/// The store's own emit, with its statements prepared once per connection.
pub(crate) async fn emit(tx: &Transaction<'_>, events: &[NewEvent], now: Timestamp) -> Result<Vec<Emitted>, Abort> {
    let (next_ids, insert, notify) = tokio::try_join!(
        tx.prepare_cached(NEXT_IDS),
        tx.prepare_cached(INSERT),
        tx.prepare_cached(NOTIFY)
    )?;
    let mut prepared = Tokio {
        tx,
        next_ids: &next_ids,
        insert: &insert,
        notify: &notify,
    };
    match emit_with(&mut prepared, events, now, Race::Fail).await {
        Ok(result) => result.map_err(Abort::Store),
        // Redone from the start: the lookup then finds the other's event.
        Err(e) if Tokio::<tokio_postgres::Statement>::is_key_race(&e) => Err(Abort::Conflict),
        Err(e) => Err(e.into()),
    }
}

/// An idempotency key used with another payload refuses the whole call
/// before anything is written (the inner `Err`).
async fn emit_with<D: EmitTx>(
    tx: &mut D,
    events: &[NewEvent],
    now: Timestamp,
    race: Race,
) -> Result<Result<Vec<Emitted>, StoreError>, D::Error> {
    if events.iter().any(|e| e.idempotency_key.is_some()) {
        return emit_keyed(tx, events, now, race).await;
    }
    // One notification for the whole emit, sent with the first statement.
    let notify = events.iter().any(|e| !e.subscribers.is_empty());
    Ok(Ok(write_events(tx, events, now, notify).await?))
}

/// Events of which some carry an idempotency key: the keys are looked up
/// first, then each event is written alone (or found).
async fn emit_keyed<D: EmitTx>(
    tx: &mut D,
    events: &[NewEvent],
    now: Timestamp,
    race: Race,
) -> Result<Result<Vec<Emitted>, StoreError>, D::Error> {
    let found = match events_by_key(tx, events).await? {
        Ok(found) => found,
        Err(conflict) => return Ok(Err(conflict)),
    };
    if events.iter().any(|e| !e.subscribers.is_empty()) {
        tx.notify().await?;
    }
    let mut out: Vec<Emitted> = Vec::with_capacity(events.len());
    for (i, (e, row)) in events.iter().zip(found).enumerate() {
        if let Some(r) = row {
            out.push(emitted_before(tx, r).await?);
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
            out.extend(write_events(tx, one, now, false).await?);
            continue;
        }
        match write_or_find(tx, e, now).await? {
            Ok(written) => out.extend(written),
            Err(conflict) => return Ok(Err(conflict)),
        }
    }
    Ok(Ok(out))
}

/// Each event's row found by its idempotency key (`None` without a key or
/// a row). A key given again with another payload, stored or earlier in
/// `events`, is a conflict.
async fn events_by_key<D: EmitTx>(
    tx: &mut D,
    events: &[NewEvent],
) -> Result<Result<Vec<Option<KeyedRow>>, StoreError>, D::Error> {
    let mut found = Vec::with_capacity(events.len());
    let mut first: std::collections::HashMap<(&str, &str), &str> = std::collections::HashMap::new();
    for e in events {
        let Some(key) = &e.idempotency_key else {
            found.push(None);
            continue;
        };
        let row = tx.keyed(&e.name, key).await?;
        let payload: &str = match &row {
            Some(r) => r.payload.as_str(),
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
async fn write_or_find<D: EmitTx>(
    tx: &mut D,
    e: &NewEvent,
    now: Timestamp,
) -> Result<Result<Vec<Emitted>, StoreError>, D::Error> {
    tx.execute("SAVEPOINT jadpo_idempotency").await?;
    match write_events(tx, std::slice::from_ref(e), now, false).await {
        Ok(written) => {
            tx.execute("RELEASE SAVEPOINT jadpo_idempotency").await?;
            Ok(Ok(written))
        }
        Err(err) if D::is_key_race(&err) => {
            tx.execute("ROLLBACK TO SAVEPOINT jadpo_idempotency").await?;
            // The other transaction committed: this statement sees it.
            let key = e.idempotency_key.as_deref().unwrap_or_default();
            let Some(r) = tx.keyed(&e.name, key).await? else {
                return Err(err);
            };
            if r.payload != e.payload {
                return Ok(Err(StoreError::IdempotencyConflict(e.name.clone())));
            }
            Ok(Ok(vec![emitted_before(tx, r).await?]))
        }
        Err(err) => Err(err),
    }
}

/// An event found by its idempotency key, as a duplicate.
async fn emitted_before<D: EmitTx>(tx: &mut D, r: KeyedRow) -> Result<Emitted, D::Error> {
    let deliveries = tx.deliveries_of(r.id, r.first_delivery, r.last_delivery).await?;
    Ok(Emitted {
        event_id: EventId(r.id),
        public_id: r.public_id,
        deliveries: deliveries.into_iter().map(DeliveryId).collect(),
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
/// taken from the sequences first; `notify` sends the wake-up with the
/// first chunk's ids.
async fn write_events<D: EmitTx>(
    tx: &mut D,
    events: &[NewEvent],
    now: Timestamp,
    mut notify: bool,
) -> Result<Vec<Emitted>, D::Error> {
    let now = at_ms(now);
    let mut emitted = Vec::with_capacity(events.len());
    let mut rest = events;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(chunk_len(rest));
        rest = tail;
        let n_deliveries: usize = chunk.iter().map(|e| e.subscribers.len()).sum();
        // Each ordered key's row, locked, and its slots taken so far: each
        // delivery of it in emit order takes one, or waits queued.
        let ordered: std::collections::BTreeSet<(&str, &str)> = chunk
            .iter()
            .flat_map(|e| e.keys.iter())
            .filter(|(_, k)| k.rule.is_some())
            .map(|(s, k)| (s.as_str(), k.key.as_str()))
            .collect();
        let started = tx
            .start(chunk.len() as i32, n_deliveries as i32, &ordered, notify)
            .await?;
        notify = false;
        let Started {
            event_ids,
            delivery_ids,
            slots: mut taken,
        } = started;
        let (rows, written) = rows(chunk, now, &event_ids, &delivery_ids, &mut taken);
        let (slot_subscribers, slot_keys, slot_taken) = super::keys::columns(&taken);
        let rows = Rows {
            slot_subscribers,
            slot_keys,
            slot_taken,
            ..rows
        };
        tx.insert(&rows).await?;
        emitted.extend(written);
    }
    Ok(emitted)
}

/// A chunk's rows with their ids, each ordered key's delivery taking a
/// slot of `taken` in emit order or waiting queued; the slots' columns are
/// left empty for the caller, which owns `taken`.
fn rows<'a>(
    chunk: &'a [NewEvent],
    now: i64,
    event_ids: &'a [i64],
    delivery_ids: &'a [i64],
    taken: &mut std::collections::BTreeMap<(String, String), super::keys::Slots>,
) -> (Rows<'a>, Vec<Emitted>) {
    let n_deliveries = delivery_ids.len();
    let mut r = Rows {
        event_ids,
        names: chunk.iter().map(|e| e.name.as_str()).collect(),
        payloads: chunk.iter().map(|e| e.payload.as_str()).collect(),
        now,
        delivery_ids,
        of_event: Vec::with_capacity(n_deliveries),
        subscribers: Vec::with_capacity(n_deliveries),
        first: Vec::with_capacity(chunk.len()),
        last: Vec::with_capacity(chunk.len()),
        public_ids: Vec::with_capacity(chunk.len()),
        idempotency_keys: chunk.iter().map(|e| e.idempotency_key.as_deref()).collect(),
        traceparents: chunk
            .iter()
            .map(|e| e.trace.as_ref().map(|t| t.traceparent()))
            .collect(),
        tracestates: chunk
            .iter()
            .map(|e| e.trace.as_ref().and_then(|t| t.tracestate()))
            .collect(),
        delivery_keys: Vec::with_capacity(n_deliveries),
        states: Vec::with_capacity(n_deliveries),
        rules: Vec::with_capacity(n_deliveries),
        slot_subscribers: Vec::new(),
        slot_keys: Vec::new(),
        slot_taken: Vec::new(),
    };
    let mut emitted = Vec::with_capacity(chunk.len());
    let mut next = delivery_ids.iter();
    for (e, &event_id) in chunk.iter().zip(event_ids) {
        let mut deliveries = Vec::with_capacity(e.subscribers.len());
        for s in &e.subscribers {
            let id = *next.next().expect("one id per delivery");
            deliveries.push(DeliveryId(id));
            r.of_event.push(event_id);
            r.subscribers.push(s.as_str());
            let keyed = e.keys.get(s);
            r.delivery_keys.push(keyed.map(|k| k.key.as_str()));
            r.rules
                .push(keyed.and_then(|k| k.rule).map(jadpo_core::key_rule::KeyRule::stored));
            r.states
                .push(match keyed.and_then(|k| k.rule.map(|rule| (rule, &k.key))) {
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
        // The ids of one call increase: the range holds every delivery of
        // the event (and perhaps another emit's, told apart by `event_id`).
        debug_assert!(deliveries.windows(2).all(|w| w[0] < w[1]));
        r.first.push(deliveries.first().map(|d| d.0));
        r.last.push(deliveries.last().map(|d| d.0));
        let public_id = crate::types::new_public_id();
        r.public_ids.push(public_id.clone());
        emitted.push(Emitted {
            event_id: EventId(event_id),
            public_id,
            duplicate: false,
            deliveries,
        });
    }
    (r, emitted)
}
