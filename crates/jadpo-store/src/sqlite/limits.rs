//! Limited connections' tokens and slots (`jadpo_connection_limits`): one
//! row per connection holding its `LimitState` as JSON, written only at the
//! version read (see [`crate::limits`]).

use super::pool::Abort;
use crate::limits::{Answer, LimitWrite, Release};
use jadpo_core::limit::LimitState;
use rusqlite::{params, Connection};

fn state(json: &str) -> Result<LimitState, Abort> {
    serde_json::from_str(json).map_err(|e| {
        Abort::Store(crate::StoreError::Unavailable(format!(
            "unreadable row of jadpo_connection_limits: {e}"
        )))
    })
}

pub(crate) fn all(c: &Connection) -> Result<Vec<LimitState>, Abort> {
    let rows: Vec<String> = c
        .prepare_cached("SELECT state FROM jadpo_connection_limits ORDER BY connection")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    rows.iter().map(|s| state(s)).collect()
}

/// How many due deliveries wait on each connection, through the index of
/// waiting deliveries (its condition named so SQLite uses it).
pub(crate) fn waiting_counts(c: &Connection) -> Result<std::collections::BTreeMap<String, u64>, Abort> {
    let rows = c
        .prepare_cached(
            "SELECT waiting_on, count(*) FROM jadpo_deliveries \
             WHERE waiting_on IS NOT NULL AND state = 'due' GROUP BY waiting_on",
        )?
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().map(|(c, n)| (c, n.max(0) as u64)).collect())
}

/// Writes each state only if its row is still at the version read (or still
/// absent); otherwise [`Abort::Conflict`], and the method is redone.
pub(crate) fn write(c: &Connection, writes: &[LimitWrite]) -> Result<(), Abort> {
    for w in writes {
        let json = serde_json::to_string(&w.state).expect("a limit state is plain data");
        let changed = if w.read_version == 0 {
            c.prepare_cached(
                "INSERT INTO jadpo_connection_limits (connection, state, version) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (connection) DO NOTHING",
            )?
            .execute(params![w.state.connection, json, w.state.version])?
        } else {
            c.prepare_cached(
                "UPDATE jadpo_connection_limits SET state = ?2, version = ?3 WHERE connection = ?1 AND version = ?4",
            )?
            .execute(params![w.state.connection, json, w.state.version, w.read_version])?
        };
        if changed != 1 {
            return Err(Abort::Conflict);
        }
    }
    Ok(())
}

/// Gives slots back and writes 429s (see [`crate::limits::settle`]): one
/// read of the rows, only when there is something to settle.
pub(crate) fn settle(c: &Connection, releases: &[Release<'_>], answers: &[Answer]) -> Result<(), Abort> {
    if releases.is_empty() && answers.is_empty() {
        return Ok(());
    }
    write(c, &crate::limits::settle(all(c)?, releases, answers))
}
