//! Schedules' state in `jadpo_schedules`: read the row, let the core's
//! `ScheduleState` decide, write it back conditional on the version read.

use super::pool::Abort;
use crate::codec::at_ms;
use crate::types::StoreError;
use jadpo_core::alert::AlertMessage;
use jadpo_core::schedule::{ScheduleAlert, ScheduleClaim, ScheduleState};
use jadpo_core::{FailureKind, FailureRecord, Lease, LeaseToken, Timestamp};
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::time::Duration;

const COLUMNS: &str = "name, next_due, lease_owner, lease_token, lease_until, \
    consecutive_failures, last_failure_code, last_failure_kind, alert_raised, version";

fn state(row: &Row<'_>) -> rusqlite::Result<ScheduleState> {
    let owner: Option<String> = row.get(2)?;
    let token: i64 = row.get(3)?;
    let until: Option<i64> = row.get(4)?;
    let failures: i64 = row.get(5)?;
    let code: Option<String> = row.get(6)?;
    let kind: Option<String> = row.get(7)?;
    let bad = |col, what: String| rusqlite::Error::FromSqlConversionFailure(col, Type::Text, what.into());
    let last_failure = match (code, kind) {
        (Some(code), Some(kind)) => Some(FailureRecord {
            kind: FailureKind::parse(&kind).ok_or_else(|| bad(7, format!("failure kind {kind:?}")))?,
            code,
        }),
        _ => None,
    };
    Ok(ScheduleState {
        name: row.get(0)?,
        next_due: Timestamp::from_millis(row.get(1)?),
        lease: owner.zip(until).map(|(owner, until)| Lease {
            owner,
            token: LeaseToken(token),
            until: Timestamp::from_millis(until),
        }),
        last_token: token,
        consecutive_failures: u32::try_from(failures).map_err(|_| bad(5, format!("failures {failures}")))?,
        last_failure,
        alert_raised: row.get(8)?,
        version: row.get(9)?,
    })
}

fn read(c: &Connection, name: &str) -> rusqlite::Result<Option<ScheduleState>> {
    c.prepare_cached(&format!("SELECT {COLUMNS} FROM jadpo_schedules WHERE name = ?1"))?
        .query_row([name], state)
        .optional()
}

/// One statement conditional on the version read (`None`: no row was read):
/// nothing changed means another process moved it first.
fn write(c: &Connection, s: &ScheduleState, read_version: Option<i64>) -> Result<(), Abort> {
    let lease = s.lease.as_ref();
    let failure = s.last_failure.as_ref();
    let p = params![
        s.name,
        at_ms(s.next_due),
        lease.map(|l| l.owner.as_str()),
        s.last_token,
        lease.map(|l| at_ms(l.until)),
        s.consecutive_failures,
        failure.map(|f| f.code.as_str()),
        failure.map(|f| f.kind.as_str()),
        s.alert_raised,
        s.version,
    ];
    let changed = match read_version {
        None => c
            .prepare_cached(&format!(
                "INSERT INTO jadpo_schedules ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                 ON CONFLICT (name) DO NOTHING"
            ))?
            .execute(p)?,
        Some(v) => {
            let mut stmt = c.prepare_cached(
                "UPDATE jadpo_schedules SET next_due = ?2, lease_owner = ?3, lease_token = ?4, \
                 lease_until = ?5, consecutive_failures = ?6, last_failure_code = ?7, \
                 last_failure_kind = ?8, alert_raised = ?9, version = ?10 \
                 WHERE name = ?1 AND version = ?11",
            )?;
            for (i, v) in p.iter().enumerate() {
                stmt.raw_bind_parameter(i + 1, v)?;
            }
            stmt.raw_bind_parameter(11, v)?;
            stmt.raw_execute()?
        }
    };
    match changed {
        1 => Ok(()),
        _ => Err(Abort::Conflict),
    }
}

/// Claims the due ones among `schedules`; a schedule seen for the first time
/// gets its row, due at the time given, as the in-memory store keeps it.
pub(crate) fn claim(
    c: &Connection,
    schedules: &[(String, Timestamp)],
    worker: &str,
    now: Timestamp,
    lease: Duration,
) -> Result<Vec<ScheduleClaim>, Abort> {
    let mut claims = Vec::new();
    for (name, first_due) in schedules {
        let stored = read(c, name)?;
        let read_version = stored.as_ref().map(|s| s.version);
        let current = stored.unwrap_or_else(|| ScheduleState::new(name.clone(), *first_due));
        match current.claim(worker, now, now.plus(lease)) {
            Some(claim) => {
                write(c, &claim.state, read_version)?;
                if let Some(a) = &claim.alert {
                    super::alerts::insert(c, &[AlertMessage::schedule_failing(a, now)])?;
                }
                claims.push(claim);
            }
            None if read_version.is_none() => write(c, &current, None)?,
            None => {}
        }
    }
    Ok(claims)
}

pub(crate) fn finish(
    c: &Connection,
    name: &str,
    token: LeaseToken,
    failure: Option<FailureRecord>,
    next_due: Timestamp,
    now: Timestamp,
) -> Result<Option<ScheduleAlert>, Abort> {
    let lost = || Abort::Store(StoreError::ScheduleLeaseLost(name.to_owned()));
    let current = read(c, name)?.ok_or_else(lost)?;
    let (next, alert) = current.finish(token, failure, next_due).ok_or_else(lost)?;
    write(c, &next, Some(current.version))?;
    if let Some(a) = &alert {
        super::alerts::insert(c, &[AlertMessage::schedule_failing(a, now)])?;
    }
    Ok(alert)
}

pub(crate) fn all(c: &Connection) -> Result<Vec<ScheduleState>, Abort> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLUMNS} FROM jadpo_schedules ORDER BY name"))?
            .query_map([], state)?
            .collect::<rusqlite::Result<_>>()?,
    )
}
