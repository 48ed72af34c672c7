//! Alert messages (`jadpo_alerts`): written in the transaction that raises
//! or resolves them, listed, and claimed and ended by senders (see
//! [`crate::alerts`] for the rules). Writes run under `BEGIN IMMEDIATE`, so
//! a claim's read and its write see the same rows.

use super::pool::Abort;
use crate::alerts;
use crate::codec::at_ms;
use crate::types::{new_public_id, AlertRecord};
use jadpo_core::alert::{AlertKind, AlertMessage, SendDecision, Sends, SEND_WITHIN};
use jadpo_core::{FailureKind, FailureRecord, Timestamp};
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::time::Duration;

const COLUMNS: &str = "id, public_id, alert, kind, connection, schedule, since, held, failures, \
    last_failure_code, last_failure_kind, raised_at, ended_at, released, \
    send_attempts, send_due_at, sent_at, send_failed_at, send_error";

/// Writes messages, each with a public id of its own.
pub(crate) fn insert(c: &Connection, messages: &[AlertMessage]) -> Result<(), Abort> {
    let mut stmt = c.prepare_cached(
        "INSERT INTO jadpo_alerts (public_id, alert, kind, connection, schedule, since, held, failures, \
         last_failure_code, last_failure_kind, raised_at, ended_at, released) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    for m in messages {
        stmt.execute(params![
            new_public_id(),
            m.alert,
            m.kind.as_str(),
            m.connection,
            m.schedule,
            at_ms(m.since),
            m.held.map(|n| n as i64),
            m.failures,
            m.last_failure.as_ref().map(|f| f.code.as_str()),
            m.last_failure.as_ref().map(|f| f.kind.as_str()),
            at_ms(m.raised_at),
            m.ended_at.map(at_ms),
            m.released.map(|n| n as i64),
        ])?;
    }
    Ok(())
}

fn bad(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, Type::Text, what.into())
}

fn record(r: &Row<'_>) -> rusqlite::Result<AlertRecord> {
    let kind: String = r.get(3)?;
    let at = |i: usize| -> rusqlite::Result<Option<Timestamp>> {
        Ok(r.get::<_, Option<i64>>(i)?.map(Timestamp::from_millis))
    };
    let last_failure = match (r.get::<_, Option<String>>(9)?, r.get::<_, Option<String>>(10)?) {
        (Some(code), Some(kind)) => Some(FailureRecord {
            code,
            kind: FailureKind::parse(&kind).ok_or_else(|| bad(10, format!("unknown failure kind {kind:?}")))?,
        }),
        _ => None,
    };
    Ok(AlertRecord {
        id: r.get(0)?,
        public_id: r.get(1)?,
        message: AlertMessage {
            alert: r.get(2)?,
            kind: AlertKind::parse(&kind).ok_or_else(|| bad(3, format!("unknown alert kind {kind:?}")))?,
            connection: r.get(4)?,
            schedule: r.get(5)?,
            since: Timestamp::from_millis(r.get(6)?),
            held: r.get::<_, Option<i64>>(7)?.map(|n| n.max(0) as u64),
            failures: r.get::<_, Option<i64>>(8)?.map(|n| n.max(0) as u32),
            last_failure,
            raised_at: Timestamp::from_millis(r.get(11)?),
            ended_at: at(12)?,
            released: r.get::<_, Option<i64>>(13)?.map(|n| n.max(0) as u64),
        },
        sends: Sends {
            attempts: r.get::<_, i64>(14)?.max(0) as u32,
            due_at: at(15)?,
            sent_at: at(16)?,
            failed_at: at(17)?,
            last_error: r.get(18)?,
        },
    })
}

/// Newest first.
pub(crate) fn list(c: &Connection, limit: usize) -> Result<Vec<AlertRecord>, Abort> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLUMNS} FROM jadpo_alerts ORDER BY id DESC LIMIT ?1"))?
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], record)?
            .collect::<rusqlite::Result<_>>()?,
    )
}

/// Open messages due now, longest due first, through `jadpo_alerts_open`,
/// which holds only open ones; the rule is [`Sends::claimable`].
pub(crate) fn claim(c: &Connection, now: Timestamp, limit: usize, lease: Duration) -> Result<Vec<AlertRecord>, Abort> {
    let window = i64::try_from(SEND_WITHIN.as_millis()).unwrap_or(i64::MAX);
    let limit = limit.min(alerts::MAX_ALERT_CLAIM) as i64;
    let due: Vec<AlertRecord> = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM jadpo_alerts WHERE sent_at IS NULL AND send_failed_at IS NULL \
             AND coalesce(send_due_at, raised_at) <= ?1 AND (send_attempts > 0 OR raised_at > ?1 - ?2) \
             ORDER BY coalesce(send_due_at, raised_at), id LIMIT ?3"
        ))?
        .query_map(params![at_ms(now), window, limit], record)?
        .collect::<rusqlite::Result<_>>()?;
    let mut write = c.prepare_cached("UPDATE jadpo_alerts SET send_attempts = ?2, send_due_at = ?3 WHERE id = ?1")?;
    let mut claimed = Vec::new();
    for mut r in due {
        debug_assert!(r.sends.claimable(r.message.raised_at, now));
        alerts::claim(&mut r.sends, now, lease);
        write.execute(params![r.id, r.sends.attempts, r.sends.due_at.map(at_ms)])?;
        claimed.push(r);
    }
    Ok(claimed)
}

pub(crate) fn finish(c: &Connection, id: i64, attempt: u32, decision: &SendDecision) -> Result<bool, Abort> {
    let Some(mut r) = c
        .prepare_cached(&format!("SELECT {COLUMNS} FROM jadpo_alerts WHERE id = ?1"))?
        .query_row([id], record)
        .optional()?
    else {
        return Ok(false);
    };
    if !alerts::finish(&mut r.sends, attempt, decision) {
        return Ok(false);
    }
    let s = &r.sends;
    c.prepare_cached(
        "UPDATE jadpo_alerts SET send_due_at = ?2, sent_at = ?3, send_failed_at = ?4, send_error = ?5 WHERE id = ?1",
    )?
    .execute(params![
        id,
        s.due_at.map(at_ms),
        s.sent_at.map(at_ms),
        s.failed_at.map(at_ms),
        s.last_error
    ])?;
    Ok(true)
}
