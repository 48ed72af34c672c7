//! The round trips an emit makes, behind one trait, so the same emit
//! (`emit.rs`) writes in the store's own transactions and in a caller's
//! transaction of either PostgreSQL driver: `tokio-postgres` here, `sqlx`
//! in `emit_sqlx.rs`. The statements are the same in every driver; only
//! how they are sent differs (`tokio-postgres` sends a step's statements
//! in one round trip).

use super::keys::Slots;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use tokio_postgres::ToStatement;

/// Ids taken up front, so each event's deliveries can name it and the
/// caller gets ids in the order of its events. One call's ids increase in
/// order, so the claim's `(due_at, id)` keeps emit order.
pub(super) const NEXT_IDS: &str = "
SELECT ARRAY(SELECT nextval('jadpo_events_id_seq') FROM generate_series(1, $1::int)),
       ARRAY(SELECT nextval('jadpo_deliveries_id_seq') FROM generate_series(1, $2::int))";

/// Events, their deliveries and the keyed ones' keys in one statement: a
/// delivery never names an event that is not there (the store keeps this rule itself since migration
/// 4 dropped the foreign key, which cost every delivery a lookup and a lock).
pub(super) const INSERT: &str = "
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

/// An event emitted before under a name and idempotency key.
pub(super) const KEYED: &str = "
SELECT id, payload, public_id, first_delivery, last_delivery FROM jadpo_events
WHERE name = $1 AND idempotency_key = $2";

pub(super) const DELIVERIES_OF: &str = "
SELECT id FROM jadpo_deliveries WHERE id BETWEEN $2 AND $3 AND event_id = $1 ORDER BY id";

/// What the first step of a chunk's write reads: the ids for its events
/// and deliveries, and the slots taken of each ordered key, locked.
pub(super) struct Started {
    pub event_ids: Vec<i64>,
    pub delivery_ids: Vec<i64>,
    pub slots: BTreeMap<(String, String), Slots>,
}

/// An event found by its idempotency key ([`KEYED`]'s row).
pub(super) struct KeyedRow {
    pub id: i64,
    pub payload: String,
    pub public_id: String,
    pub first_delivery: Option<i64>,
    pub last_delivery: Option<i64>,
}

/// [`INSERT`]'s parameters, in its order: one entry per event, then one per
/// delivery, then one per ordered key.
pub(super) struct Rows<'a> {
    pub event_ids: &'a [i64],
    pub names: Vec<&'a str>,
    pub payloads: Vec<&'a str>,
    pub now: i64,
    pub delivery_ids: &'a [i64],
    pub of_event: Vec<i64>,
    pub subscribers: Vec<&'a str>,
    pub first: Vec<Option<i64>>,
    pub last: Vec<Option<i64>>,
    pub public_ids: Vec<String>,
    pub idempotency_keys: Vec<Option<&'a str>>,
    pub traceparents: Vec<Option<&'a str>>,
    pub tracestates: Vec<Option<&'a str>>,
    pub delivery_keys: Vec<Option<&'a str>>,
    pub states: Vec<&'static str>,
    pub rules: Vec<Option<String>>,
    pub slot_subscribers: Vec<&'a str>,
    pub slot_keys: Vec<&'a str>,
    pub slot_taken: Vec<i32>,
}

/// A transaction an emit writes in, as its driver sends statements.
pub(super) trait EmitTx: Send {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Sends the wake-up (when `notify`), takes `events` and `deliveries`
    /// ids and locks each of `ordered`'s keys, reading its slots.
    fn start<'a>(
        &'a mut self,
        events: i32,
        deliveries: i32,
        ordered: &'a BTreeSet<(&'a str, &'a str)>,
        notify: bool,
    ) -> impl Future<Output = Result<Started, Self::Error>> + Send + 'a;

    /// Writes a chunk's events, deliveries and keys ([`INSERT`]).
    fn insert<'a>(&'a mut self, rows: &'a Rows<'a>) -> impl Future<Output = Result<(), Self::Error>> + Send + 'a;

    /// Wakes idle workers in every process once the transaction commits.
    fn notify(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send + '_;

    /// The event written before under `name` and `key` ([`KEYED`]).
    fn keyed<'a>(
        &'a mut self,
        name: &'a str,
        key: &'a str,
    ) -> impl Future<Output = Result<Option<KeyedRow>, Self::Error>> + Send + 'a;

    /// The ids of `event`'s deliveries, `first` to `last` ([`DELIVERIES_OF`]).
    fn deliveries_of(
        &mut self,
        event: i64,
        first: Option<i64>,
        last: Option<i64>,
    ) -> impl Future<Output = Result<Vec<i64>, Self::Error>> + Send + '_;

    /// Runs a statement without parameters (a savepoint's).
    fn execute(&mut self, sql: &'static str) -> impl Future<Output = Result<(), Self::Error>> + Send + '_;

    /// Two emits of one new idempotency key at once: this one waited for
    /// the other and found the key taken.
    fn is_key_race(e: &Self::Error) -> bool;
}

/// `tokio-postgres`, with the ids', insert's and notification's statements
/// as given: prepared once per connection for the store's own emits, as
/// text for a caller's transaction.
pub(super) struct Tokio<'t, 'c, S: ?Sized> {
    pub tx: &'t tokio_postgres::Transaction<'c>,
    pub next_ids: &'t S,
    pub insert: &'t S,
    pub notify: &'t S,
}

impl<S: ?Sized + ToStatement + Sync> EmitTx for Tokio<'_, '_, S> {
    type Error = tokio_postgres::Error;

    async fn start<'a>(
        &'a mut self,
        events: i32,
        deliveries: i32,
        ordered: &'a BTreeSet<(&'a str, &'a str)>,
        notify: bool,
    ) -> Result<Started, Self::Error> {
        let tx = self.tx;
        let wake = async {
            if notify {
                tx.execute(self.notify, &[]).await?;
            }
            Ok(())
        };
        let lock = async {
            if ordered.is_empty() {
                Ok(BTreeMap::new())
            } else {
                super::keys::lock(tx, ordered).await
            }
        };
        let counts: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&events, &deliveries];
        // One round trip: the driver pipelines statements sent together.
        let ((), ids, slots) = tokio::try_join!(wake, tx.query_one(self.next_ids, &counts), lock)?;
        Ok(Started {
            event_ids: ids.try_get(0)?,
            delivery_ids: ids.try_get(1)?,
            slots,
        })
    }

    async fn insert<'a>(&'a mut self, r: &'a Rows<'a>) -> Result<(), Self::Error> {
        self.tx
            .execute(
                self.insert,
                &[
                    &r.event_ids,
                    &r.names,
                    &r.payloads,
                    &r.now,
                    &r.delivery_ids,
                    &r.of_event,
                    &r.subscribers,
                    &r.first,
                    &r.last,
                    &r.public_ids,
                    &r.idempotency_keys,
                    &r.traceparents,
                    &r.tracestates,
                    &r.delivery_keys,
                    &r.states,
                    &r.rules,
                    &r.slot_subscribers,
                    &r.slot_keys,
                    &r.slot_taken,
                ],
            )
            .await
            .map(drop)
    }

    async fn notify(&mut self) -> Result<(), Self::Error> {
        self.tx.execute(self.notify, &[]).await.map(drop)
    }

    async fn keyed<'a>(&'a mut self, name: &'a str, key: &'a str) -> Result<Option<KeyedRow>, Self::Error> {
        let Some(r) = self.tx.query_opt(KEYED, &[&name, &key]).await? else {
            return Ok(None);
        };
        Ok(Some(KeyedRow {
            id: r.try_get(0)?,
            payload: r.try_get(1)?,
            public_id: r.try_get(2)?,
            first_delivery: r.try_get(3)?,
            last_delivery: r.try_get(4)?,
        }))
    }

    async fn deliveries_of(
        &mut self,
        event: i64,
        first: Option<i64>,
        last: Option<i64>,
    ) -> Result<Vec<i64>, Self::Error> {
        self.tx
            .query(DELIVERIES_OF, &[&event, &first, &last])
            .await?
            .iter()
            .map(|d| d.try_get(0))
            .collect()
    }

    async fn execute(&mut self, sql: &'static str) -> Result<(), Self::Error> {
        self.tx.batch_execute(sql).await
    }

    fn is_key_race(e: &Self::Error) -> bool {
        e.as_db_error().is_some_and(|db| {
            *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                && db.constraint() == Some("jadpo_events_idempotency")
        })
    }
}
