//! Schedules' state in `jadpo_schedules`: claimed by one worker at a time
//! across processes, each run's end fenced on its lease token. The deciding
//! is `jadpo_core::schedule`'s; here rows are locked, read and written.

use super::rows::failure;
use super::Abort;
use crate::codec::at_ms;
use crate::types::*;
use deadpool_postgres::Transaction;
use jadpo_core::alert::AlertMessage;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::{FailureRecord, Lease, LeaseToken, Timestamp};
use std::time::Duration;
use tokio_postgres::Row;

const COLUMNS: &str = "name, next_due, lease_owner, lease_token, lease_until, consecutive_failures, \
                       last_failure_code, last_failure_kind, alert_raised, version";

/// A schedule seen for the first time gets its row, due at its first time.
/// One that exists is left as it is.
const INSERT_NEW: &str = "
INSERT INTO jadpo_schedules (name, next_due, lease_token, consecutive_failures, alert_raised, version)
SELECT name, first_due, 0, 0, false, 0 FROM unnest($1::text[], $2::bigint[]) AS u(name, first_due)
ON CONFLICT (name) DO NOTHING";

/// Rows another process is claiming or finishing right now are skipped:
/// that process holds the run, or the next tick looks again.
fn lock_some() -> String {
    format!("SELECT {COLUMNS} FROM jadpo_schedules WHERE name = ANY($1) ORDER BY name FOR UPDATE SKIP LOCKED")
}

fn lock_one() -> String {
    format!("SELECT {COLUMNS} FROM jadpo_schedules WHERE name = $1 FOR UPDATE")
}

fn list() -> String {
    format!("SELECT {COLUMNS} FROM jadpo_schedules ORDER BY name COLLATE \"C\"")
}

/// Conditional on the version read, like a breaker's write; the row is
/// locked too, so this only guards against a bug.
const WRITE: &str = "
UPDATE jadpo_schedules SET next_due = $2, lease_owner = $3, lease_token = $4, lease_until = $5,
    consecutive_failures = $6, last_failure_code = $7, last_failure_kind = $8,
    alert_raised = $9, version = $10
WHERE name = $1 AND version = $11";

fn state(row: &Row) -> Result<ScheduleState, Abort> {
    let last_token: i64 = row.try_get(3)?;
    let lease = match (row.try_get::<_, Option<String>>(2)?, row.try_get::<_, Option<i64>>(4)?) {
        (Some(owner), Some(until)) => Some(Lease {
            owner,
            token: LeaseToken(last_token),
            until: Timestamp::from_millis(until),
        }),
        _ => None,
    };
    Ok(ScheduleState {
        name: row.try_get(0)?,
        next_due: Timestamp::from_millis(row.try_get(1)?),
        lease,
        last_token,
        consecutive_failures: u32::try_from(row.try_get::<_, i32>(5)?).unwrap_or(0),
        last_failure: failure(row.try_get(6)?, row.try_get(7)?)?,
        alert_raised: row.try_get(8)?,
        version: row.try_get(9)?,
    })
}

async fn write(tx: &Transaction<'_>, s: &ScheduleState, read_version: i64) -> Result<(), Abort> {
    let stmt = tx.prepare_cached(WRITE).await?;
    let failures = i32::try_from(s.consecutive_failures).unwrap_or(i32::MAX);
    let n = tx
        .execute(
            &stmt,
            &[
                &s.name,
                &at_ms(s.next_due),
                &s.lease.as_ref().map(|l| l.owner.as_str()),
                &s.last_token,
                &s.lease.as_ref().map(|l| at_ms(l.until)),
                &failures,
                &s.last_failure.as_ref().map(|f| f.code.as_str()),
                &s.last_failure.as_ref().map(|f| f.kind.as_str()),
                &s.alert_raised,
                &s.version,
                &read_version,
            ],
        )
        .await?;
    if n != 1 {
        return Err(Abort::Conflict);
    }
    Ok(())
}

pub(crate) async fn claim(
    tx: &Transaction<'_>,
    schedules: &[(String, Timestamp)],
    worker: &str,
    now: Timestamp,
    lease: Duration,
) -> Result<Vec<ScheduleClaim>, Abort> {
    let names: Vec<&str> = schedules.iter().map(|(n, _)| n.as_str()).collect();
    let firsts: Vec<i64> = schedules.iter().map(|(_, t)| at_ms(*t)).collect();
    let insert = tx.prepare_cached(INSERT_NEW).await?;
    tx.execute(&insert, &[&names, &firsts]).await?;
    let lock = tx.prepare_cached(&lock_some()).await?;
    let rows = tx.query(&lock, &[&names]).await?;
    let mut claims = Vec::new();
    // In the order asked, as the in-memory store claims them.
    for (name, _) in schedules {
        let Some(row) = rows.iter().find(|r| r.get::<_, &str>(0) == name) else {
            continue;
        };
        let read = state(row)?;
        if let Some(c) = read.claim(worker, now, now.plus(lease)) {
            write(tx, &c.state, read.version).await?;
            if let Some(a) = &c.alert {
                super::alerts::insert(tx, &[AlertMessage::schedule_failing(a, now)]).await?;
            }
            claims.push(c);
        }
    }
    Ok(claims)
}

pub(crate) async fn finish(
    tx: &Transaction<'_>,
    name: &str,
    token: LeaseToken,
    failure: Option<FailureRecord>,
    next_due: Timestamp,
    now: Timestamp,
) -> Result<Option<ScheduleAlert>, Abort> {
    let lost = || Abort::Store(StoreError::ScheduleLeaseLost(name.to_owned()));
    let stmt = tx.prepare_cached(&lock_one()).await?;
    let row = tx.query_opt(&stmt, &[&name]).await?.ok_or_else(lost)?;
    let read = state(&row)?;
    let (next, alert) = read.finish(token, failure, next_due).ok_or_else(lost)?;
    write(tx, &next, read.version).await?;
    if let Some(a) = &alert {
        super::alerts::insert(tx, &[AlertMessage::schedule_failing(a, now)]).await?;
    }
    Ok(alert)
}

pub(crate) async fn all(tx: &Transaction<'_>) -> Result<Vec<ScheduleState>, Abort> {
    let stmt = tx.prepare_cached(&list()).await?;
    tx.query(&stmt, &[]).await?.iter().map(state).collect()
}
