//! The store's scaled clock (`jadpo_clock`): at most one row, kept by the
//! first scaled start and never moved (`jadpo_core::clock`).

use super::Abort;
use deadpool_postgres::Transaction;
use jadpo_core::clock::Anchor;
use jadpo_core::Timestamp;

const READ: &str = "SELECT scale, anchor_real, anchor_engine FROM jadpo_clock WHERE id = 1";

fn from_row(r: &tokio_postgres::Row) -> Result<Anchor, Abort> {
    Ok(Anchor {
        scale: u32::try_from(r.try_get::<_, i32>(0)?).unwrap_or(u32::MAX),
        real: Timestamp::from_millis(r.try_get(1)?),
        engine: Timestamp::from_millis(r.try_get(2)?),
    })
}

pub(crate) async fn anchor(tx: &Transaction<'_>) -> Result<Option<Anchor>, Abort> {
    let stmt = tx.prepare_cached(READ).await?;
    tx.query_opt(&stmt, &[]).await?.as_ref().map(from_row).transpose()
}

/// `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same row
/// to commit, so the read after it sees whichever anchor won.
pub(crate) async fn keep(tx: &Transaction<'_>, a: Anchor) -> Result<Anchor, Abort> {
    let scale = i32::try_from(a.scale).unwrap_or(i32::MAX);
    tx.execute(
        "INSERT INTO jadpo_clock (id, scale, anchor_real, anchor_engine) VALUES (1, $1, $2, $3) \
         ON CONFLICT (id) DO NOTHING",
        &[&scale, &a.real.as_millis(), &a.engine.as_millis()],
    )
    .await?;
    Ok(anchor(tx).await?.expect("the row was just written or was there"))
}
