//! Alert messages (`jadpo_alerts`): written in the transaction that raises
//! or resolves them, listed, and claimed and ended by senders (see
//! [`crate::alerts`] for the rules).

use super::rows::{self};
use super::Abort;
use crate::alerts;
use crate::codec::at_ms;
use crate::types::{new_public_id, AlertRecord};
use deadpool_postgres::Transaction;
use jadpo_core::alert::{AlertKind, AlertMessage, SendDecision, Sends, SEND_WITHIN};
use jadpo_core::Timestamp;
use std::time::Duration;
use tokio_postgres::Row;

const COLUMNS: &str = "id, public_id, alert, kind, connection, schedule, since, held, failures, \
    last_failure_code, last_failure_kind, raised_at, ended_at, released, \
    send_attempts, send_due_at, sent_at, send_failed_at, send_error";

const INSERT: &str = "
INSERT INTO jadpo_alerts (public_id, alert, kind, connection, schedule, since, held, failures,
                          last_failure_code, last_failure_kind, raised_at, ended_at, released)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                     $7::bigint[], $8::int[], $9::text[], $10::text[], $11::bigint[], $12::bigint[],
                     $13::bigint[])";

/// Open messages due now, longest due first (`jadpo_alerts_open`). A message
/// never tried whose window has passed is left unsent; one already tried is
/// claimed so that its sender gives it up.
const CLAIM: &str = "
WITH due AS (
    SELECT id FROM jadpo_alerts
    WHERE sent_at IS NULL AND send_failed_at IS NULL
      AND coalesce(send_due_at, raised_at) <= $1
      AND (send_attempts > 0 OR raised_at > $1 - $4)
    ORDER BY coalesce(send_due_at, raised_at), id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE jadpo_alerts AS a SET send_attempts = a.send_attempts + 1, send_due_at = $3
FROM due WHERE a.id = due.id
RETURNING a.id";

/// Writes messages, each with a public id of its own.
pub(crate) async fn insert(tx: &Transaction<'_>, messages: &[AlertMessage]) -> Result<(), Abort> {
    if messages.is_empty() {
        return Ok(());
    }
    let m = messages;
    let public_id: Vec<String> = m.iter().map(|_| new_public_id()).collect();
    let alert: Vec<&str> = m.iter().map(|a| a.alert.as_str()).collect();
    let kind: Vec<&str> = m.iter().map(|a| a.kind.as_str()).collect();
    let connection: Vec<Option<&str>> = m.iter().map(|a| a.connection.as_deref()).collect();
    let schedule: Vec<Option<&str>> = m.iter().map(|a| a.schedule.as_deref()).collect();
    let since: Vec<i64> = m.iter().map(|a| at_ms(a.since)).collect();
    let held: Vec<Option<i64>> = m.iter().map(|a| a.held.map(|n| n as i64)).collect();
    let failures: Vec<Option<i32>> = m.iter().map(|a| a.failures.map(|n| n as i32)).collect();
    let code: Vec<Option<&str>> = m
        .iter()
        .map(|a| a.last_failure.as_ref().map(|f| f.code.as_str()))
        .collect();
    let fkind: Vec<Option<&str>> = m
        .iter()
        .map(|a| a.last_failure.as_ref().map(|f| f.kind.as_str()))
        .collect();
    let raised_at: Vec<i64> = m.iter().map(|a| at_ms(a.raised_at)).collect();
    let ended_at: Vec<Option<i64>> = m.iter().map(|a| a.ended_at.map(at_ms)).collect();
    let released: Vec<Option<i64>> = m.iter().map(|a| a.released.map(|n| n as i64)).collect();
    let stmt = tx.prepare_cached(INSERT).await?;
    tx.execute(
        &stmt,
        &[
            &public_id,
            &alert,
            &kind,
            &connection,
            &schedule,
            &since,
            &held,
            &failures,
            &code,
            &fkind,
            &raised_at,
            &ended_at,
            &released,
        ],
    )
    .await?;
    Ok(())
}

fn record(r: &Row) -> Result<AlertRecord, Abort> {
    let kind: String = r.try_get(3)?;
    let at = |i: usize| -> Result<Option<Timestamp>, Abort> {
        Ok(r.try_get::<_, Option<i64>>(i)?.map(Timestamp::from_millis))
    };
    Ok(AlertRecord {
        id: r.try_get(0)?,
        public_id: r.try_get(1)?,
        message: AlertMessage {
            alert: r.try_get(2)?,
            kind: AlertKind::parse(&kind).ok_or_else(|| rows::corrupt("alert kind", &kind))?,
            connection: r.try_get(4)?,
            schedule: r.try_get(5)?,
            since: Timestamp::from_millis(r.try_get(6)?),
            held: r.try_get::<_, Option<i64>>(7)?.map(|n| n.max(0) as u64),
            failures: r.try_get::<_, Option<i32>>(8)?.map(|n| n.max(0) as u32),
            last_failure: rows::failure(r.try_get(9)?, r.try_get(10)?)?,
            raised_at: Timestamp::from_millis(r.try_get(11)?),
            ended_at: at(12)?,
            released: r.try_get::<_, Option<i64>>(13)?.map(|n| n.max(0) as u64),
        },
        sends: Sends {
            attempts: r.try_get::<_, i32>(14)?.max(0) as u32,
            due_at: at(15)?,
            sent_at: at(16)?,
            failed_at: at(17)?,
            last_error: r.try_get(18)?,
        },
    })
}

/// Newest first.
pub(crate) async fn list(tx: &Transaction<'_>, limit: usize) -> Result<Vec<AlertRecord>, Abort> {
    let stmt = tx
        .prepare_cached(&format!("SELECT {COLUMNS} FROM jadpo_alerts ORDER BY id DESC LIMIT $1"))
        .await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    tx.query(&stmt, &[&limit]).await?.iter().map(record).collect()
}

pub(crate) async fn claim(
    tx: &Transaction<'_>,
    now: Timestamp,
    limit: usize,
    lease: Duration,
) -> Result<Vec<AlertRecord>, Abort> {
    let limit = limit.min(alerts::MAX_ALERT_CLAIM) as i64;
    let window = i64::try_from(SEND_WITHIN.as_millis()).unwrap_or(i64::MAX);
    let stmt = tx.prepare_cached(CLAIM).await?;
    let ids: Vec<i64> = tx
        .query(&stmt, &[&at_ms(now), &limit, &at_ms(now.plus(lease)), &window])
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let read = tx
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM jadpo_alerts WHERE id = ANY($1) ORDER BY coalesce(send_due_at, raised_at), id"
        ))
        .await?;
    tx.query(&read, &[&ids]).await?.iter().map(record).collect()
}

pub(crate) async fn finish(
    tx: &Transaction<'_>,
    id: i64,
    attempt: u32,
    decision: &SendDecision,
) -> Result<bool, Abort> {
    let read = tx
        .prepare_cached(&format!("SELECT {COLUMNS} FROM jadpo_alerts WHERE id = $1 FOR UPDATE"))
        .await?;
    let Some(row) = tx.query_opt(&read, &[&id]).await? else {
        return Ok(false);
    };
    let mut sends = record(&row)?.sends;
    if !alerts::finish(&mut sends, attempt, decision) {
        return Ok(false);
    }
    let write = tx
        .prepare_cached(
            "UPDATE jadpo_alerts SET send_due_at = $2, sent_at = $3, send_failed_at = $4, send_error = $5 \
             WHERE id = $1",
        )
        .await?;
    tx.execute(
        &write,
        &[
            &id,
            &sends.due_at.map(at_ms),
            &sends.sent_at.map(at_ms),
            &sends.failed_at.map(at_ms),
            &sends.last_error,
        ],
    )
    .await?;
    Ok(true)
}
