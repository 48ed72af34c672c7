//! The plans of the claim and of a finish's write as the server runs them,
//! for the tests and the bench that check the statements keep to their
//! indexes on large tables. Only with the `testing` feature: nothing a
//! program calls.

use super::{claim, reason, writes, Abort, PgStore};
use crate::types::StoreError;
use jadpo_core::{DeliveryId, Timestamp};

impl PgStore {
    /// The claim's query plan and timing as it runs now, without claiming:
    /// its transaction is rolled back. To check on a large table that the
    /// claim still goes by its partial indexes.
    pub async fn explain_claim(&self, now: Timestamp, limit: usize) -> Result<String, StoreError> {
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        let plan = claim::explain(&tx, now, limit).await.map_err(explain_failed)?;
        tx.rollback().await.map_err(db_failed)?;
        Ok(plan)
    }

    /// The plan of a finish's write of these deliveries (`EXPLAIN`, nothing
    /// written): to check that each row is looked up by its primary key.
    pub async fn explain_finish(&self, ids: &[DeliveryId]) -> Result<String, StoreError> {
        let ids: Vec<i64> = ids.iter().map(|d| d.0).collect();
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        let plan = writes::explain_ends(&tx, &ids).await.map_err(explain_failed)?;
        tx.rollback().await.map_err(db_failed)?;
        Ok(plan)
    }
}

fn explain_failed(e: Abort) -> StoreError {
    match e {
        Abort::Db(e) => db_failed(e),
        Abort::Store(e) => e,
        Abort::Conflict => StoreError::Unavailable("conflict".into()),
    }
}

/// `sql`'s plan (it starts with `EXPLAIN ...`) both as planned for these
/// values and as the generic plan a connection's cached statement may
/// switch to, each under a `-- MODE` line.
pub(super) async fn explain_both(
    tx: &deadpool_postgres::Transaction<'_>,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<String, Abort> {
    let mut out = String::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        tx.batch_execute(&format!("SET LOCAL plan_cache_mode = {mode}")).await?;
        let lines = tx.query(sql, params).await?;
        out.push_str(&format!("-- {mode}\n"));
        for line in &lines {
            out.push_str(line.try_get(0)?);
            out.push('\n');
        }
    }
    Ok(out)
}

fn db_failed(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e)))
}
