//! The store's scaled clock (`jadpo_clock`): at most one row, kept by the
//! first scaled start and never moved (`jadpo_core::clock`).

use super::pool::Abort;
use jadpo_core::clock::Anchor;
use jadpo_core::Timestamp;
use rusqlite::{params, Connection, OptionalExtension};

pub(crate) fn anchor(c: &Connection) -> Result<Option<Anchor>, Abort> {
    let row = c
        .prepare_cached("SELECT scale, anchor_real, anchor_engine FROM jadpo_clock WHERE id = 1")?
        .query_row([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })
        .optional()?;
    Ok(row.map(|(scale, real, engine)| Anchor {
        scale: u32::try_from(scale).unwrap_or(u32::MAX),
        real: Timestamp::from_millis(real),
        engine: Timestamp::from_millis(engine),
    }))
}

/// Inside the pool's `BEGIN IMMEDIATE`: the insert and the read that
/// follows see the same row, whichever process wrote it.
pub(crate) fn keep(tx: &Connection, a: Anchor) -> Result<Anchor, Abort> {
    tx.prepare_cached(
        "INSERT INTO jadpo_clock (id, scale, anchor_real, anchor_engine) VALUES (1, ?1, ?2, ?3) \
         ON CONFLICT (id) DO NOTHING",
    )?
    .execute(params![i64::from(a.scale), a.real.as_millis(), a.engine.as_millis()])?;
    Ok(anchor(tx)?.expect("the row was just written or was there"))
}
