//! The per-minute summary the console's charts read (`jadpo_minutes`).

use super::Abort;
use crate::codec::at_ms;
use crate::types::{minute_of, MinuteCount};
use deadpool_postgres::Transaction;
use jadpo_core::Timestamp;
use std::collections::BTreeMap;

/// Each row added to what is there. The rows come unique and sorted, so
/// two processes adding at once lock them in the same order.
const ADD: &str = "
INSERT INTO jadpo_minutes (minute, series, n)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
ON CONFLICT (minute, series) DO UPDATE SET n = jadpo_minutes.n + excluded.n";

const FORGET: &str = "DELETE FROM jadpo_minutes WHERE minute < $1";

const READ: &str = "SELECT minute, series, n FROM jadpo_minutes WHERE minute >= $1 ORDER BY minute, series";

pub(crate) async fn add(tx: &Transaction<'_>, counts: &[MinuteCount], forget_before: Timestamp) -> Result<(), Abort> {
    let mut sum: BTreeMap<(i64, &str), i64> = BTreeMap::new();
    for c in counts {
        *sum.entry((at_ms(minute_of(c.minute)), c.series.as_str())).or_default() += c.n as i64;
    }
    let minute: Vec<i64> = sum.keys().map(|(m, _)| *m).collect();
    let series: Vec<&str> = sum.keys().map(|(_, s)| *s).collect();
    let n: Vec<i64> = sum.values().copied().collect();
    let (add, forget) = tokio::try_join!(tx.prepare_cached(ADD), tx.prepare_cached(FORGET))?;
    if !sum.is_empty() {
        tx.execute(&add, &[&minute, &series, &n]).await?;
    }
    tx.execute(&forget, &[&at_ms(minute_of(forget_before))]).await?;
    Ok(())
}

pub(crate) async fn read(tx: &Transaction<'_>, since: Timestamp) -> Result<Vec<MinuteCount>, Abort> {
    let stmt = tx.prepare_cached(READ).await?;
    tx.query(&stmt, &[&at_ms(minute_of(since))])
        .await?
        .iter()
        .map(|r| {
            Ok(MinuteCount {
                minute: Timestamp::from_millis(r.try_get(0)?),
                series: r.try_get(1)?,
                n: r.try_get::<_, i64>(2)?.max(0) as u64,
            })
        })
        .collect()
}
