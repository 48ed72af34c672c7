//! The per-minute summary (`jadpo_minutes`) the console's charts read.

use super::pool::Abort;
use crate::types::*;
use jadpo_core::Timestamp;
use rusqlite::{params, Connection};

/// Adds to the per-minute summary, and forgets minutes before
/// `forget_before`.
pub(crate) fn add(c: &Connection, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), Abort> {
    let mut add = c.prepare_cached(
        "INSERT INTO jadpo_minutes (minute, series, n) VALUES (?1, ?2, ?3) \
         ON CONFLICT (minute, series) DO UPDATE SET n = n + excluded.n",
    )?;
    for m in counts {
        add.execute(params![minute_of(m.minute).as_millis(), m.series, m.n as i64])?;
    }
    c.prepare_cached("DELETE FROM jadpo_minutes WHERE minute < ?1")?
        .execute([minute_of(forget_before).as_millis()])?;
    Ok(())
}

pub(crate) fn read(c: &Connection, since: Timestamp) -> Result<Vec<MinuteCount>, Abort> {
    Ok(
        c.prepare_cached("SELECT minute, series, n FROM jadpo_minutes WHERE minute >= ?1 ORDER BY minute, series")?
            .query_map([minute_of(since).as_millis()], |r| {
                Ok(MinuteCount {
                    minute: Timestamp::from_millis(r.get(0)?),
                    series: r.get(1)?,
                    n: r.get::<_, i64>(2)?.max(0) as u64,
                })
            })?
            .collect::<rusqlite::Result<_>>()?,
    )
}
