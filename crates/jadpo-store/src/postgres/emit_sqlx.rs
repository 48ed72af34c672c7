//! The emit in a caller's `sqlx` transaction: the same statements as the
//! store's own emit, sent one after another (sqlx does not pipeline).

use super::emit_tx::{EmitTx, KeyedRow, Rows, Started, DELIVERIES_OF, INSERT, KEYED, NEXT_IDS};
use super::keys::{Slots, LOCK};
use super::listen::NOTIFY;
use crate::types::*;
use jadpo_core::Timestamp;
use sqlx::{PgConnection, Row};
use std::collections::{BTreeMap, BTreeSet};

/// Emits `events` inside a caller's `sqlx` transaction (pass `&mut *tx`):
/// they exist if and only if it commits, with everything
/// [`emit_in`](super::emit_in) says of the `tokio-postgres` one.
pub async fn emit_in_sqlx(
    conn: &mut PgConnection,
    events: &[NewEvent],
    now: Timestamp,
) -> Result<Vec<Emitted>, StoreError> {
    super::emit::in_callers(&mut Sqlx(conn), events, now).await
}

struct Sqlx<'c>(&'c mut PgConnection);

impl EmitTx for Sqlx<'_> {
    type Error = sqlx::Error;

    async fn start<'a>(
        &'a mut self,
        events: i32,
        deliveries: i32,
        ordered: &'a BTreeSet<(&'a str, &'a str)>,
        notify: bool,
    ) -> Result<Started, Self::Error> {
        if notify {
            self.notify().await?;
        }
        let ids = sqlx::query(NEXT_IDS)
            .bind(events)
            .bind(deliveries)
            .fetch_one(&mut *self.0)
            .await?;
        let mut slots = BTreeMap::new();
        if !ordered.is_empty() {
            let (subscribers, keys): (Vec<&str>, Vec<&str>) = ordered.iter().copied().unzip();
            let rows = sqlx::query(LOCK)
                .bind(subscribers)
                .bind(keys)
                .fetch_all(&mut *self.0)
                .await?;
            for r in rows {
                slots.insert((r.try_get(0)?, r.try_get(1)?), Slots { taken: r.try_get(2)? });
            }
        }
        Ok(Started {
            event_ids: ids.try_get(0)?,
            delivery_ids: ids.try_get(1)?,
            slots,
        })
    }

    async fn insert<'a>(&'a mut self, r: &'a Rows<'a>) -> Result<(), Self::Error> {
        sqlx::query(INSERT)
            .bind(r.event_ids)
            .bind(&r.names)
            .bind(&r.payloads)
            .bind(r.now)
            .bind(r.delivery_ids)
            .bind(&r.of_event)
            .bind(&r.subscribers)
            .bind(&r.first)
            .bind(&r.last)
            .bind(&r.public_ids)
            .bind(&r.idempotency_keys)
            .bind(&r.traceparents)
            .bind(&r.tracestates)
            .bind(&r.delivery_keys)
            .bind(&r.states)
            .bind(&r.rules)
            .bind(&r.slot_subscribers)
            .bind(&r.slot_keys)
            .bind(&r.slot_taken)
            .execute(&mut *self.0)
            .await
            .map(drop)
    }

    async fn notify(&mut self) -> Result<(), Self::Error> {
        sqlx::query(NOTIFY).execute(&mut *self.0).await.map(drop)
    }

    async fn keyed<'a>(&'a mut self, name: &'a str, key: &'a str) -> Result<Option<KeyedRow>, Self::Error> {
        let Some(r) = sqlx::query(KEYED)
            .bind(name)
            .bind(key)
            .fetch_optional(&mut *self.0)
            .await?
        else {
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
        sqlx::query_scalar(DELIVERIES_OF)
            .bind(event)
            .bind(first)
            .bind(last)
            .fetch_all(&mut *self.0)
            .await
    }

    async fn execute(&mut self, sql: &'static str) -> Result<(), Self::Error> {
        sqlx::raw_sql(sql).execute(&mut *self.0).await.map(drop)
    }

    fn is_key_race(e: &Self::Error) -> bool {
        e.as_database_error().is_some_and(|db| {
            db.code().as_deref() == Some("23505") && db.constraint() == Some("jadpo_events_idempotency")
        })
    }
}
