//! The store's size: its tables' rows, dead rows and bytes from the
//! statistics views, and the server's WAL position; and whether the
//! server's autovacuum runs, without which every delivery's dead row
//! versions stay and the tables grow however much retention deletes.

use super::Abort;
use crate::footprint::{Footprint, TableFootprint};
use deadpool_postgres::GenericClient;

/// The store's own tables, in its schema (`current_schema()`: the one the
/// store's `search_path` puts first).
const TABLES: &str = "
SELECT s.relname::text, s.n_live_tup, s.n_dead_tup, pg_total_relation_size(s.relid),
       s.autovacuum_count + s.vacuum_count
FROM pg_stat_user_tables AS s
WHERE s.schemaname = current_schema() AND s.relname LIKE 'jadpo\\_%'
ORDER BY s.relname";

const WAL: &str = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint";

const AUTOVACUUM: &str = "SELECT current_setting('autovacuum')::bool";

/// Whether the server's autovacuum is on (`autovacuum` in its settings).
pub(crate) async fn autovacuum(client: &impl GenericClient) -> Result<bool, Abort> {
    Ok(client.query_one(AUTOVACUUM, &[]).await?.try_get(0)?)
}

pub(crate) async fn read(client: &impl GenericClient) -> Result<Footprint, Abort> {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let tables = client
        .query(TABLES, &[])
        .await?
        .iter()
        .map(|r| {
            Ok(TableFootprint {
                name: r.try_get(0)?,
                live_rows: count(r.try_get(1)?),
                dead_rows: Some(count(r.try_get(2)?)),
                bytes: Some(count(r.try_get(3)?)),
                vacuums: Some(count(r.try_get(4)?)),
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    let wal: i64 = client.query_one(WAL, &[]).await?.try_get(0)?;
    Ok(Footprint {
        tables,
        wal_position: Some(count(wal)),
        autovacuum: Some(autovacuum(client).await?),
        ..Footprint::default()
    })
}
