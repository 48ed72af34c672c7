//! The plans of the claim and of a finish's write as the server runs them,
//! for the tests and the bench that check the statements keep to their
//! indexes on large tables. Only with the `testing` feature: nothing a
//! program calls.

use super::{claim, reason, writes, Abort, PgStore};
use crate::types::StoreError;
use deadpool_postgres::Transaction;
use jadpo_core::{DeliveryId, Timestamp};

impl PgStore {
    /// The claim's query plan and timing as it runs now, without claiming:
    /// its transaction is rolled back. To check on a large table that the
    /// claim still goes by its partial indexes.
    pub async fn explain_claim(&self, now: Timestamp, limit: usize) -> Result<String, StoreError> {
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        let plan = claim_plan(&tx, now, limit).await.map_err(explain_failed)?;
        tx.rollback().await.map_err(db_failed)?;
        Ok(plan)
    }

    /// The plan of a finish's write of these deliveries (`EXPLAIN`, nothing
    /// written): to check that each row is looked up by its primary key.
    pub async fn explain_finish(&self, ids: &[DeliveryId]) -> Result<String, StoreError> {
        let ids: Vec<i64> = ids.iter().map(|d| d.0).collect();
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        let plan = ends_plan(&tx, &ids).await.map_err(explain_failed)?;
        tx.rollback().await.map_err(db_failed)?;
        Ok(plan)
    }

    /// The plan of the walk that finds what a queued delivery waits for
    /// (`deliveries show`): subscriber `subscriber`'s live delivery of key
    /// `key` below `below`, as it runs now, both as planned for these
    /// values and generic: to check that it steps down the key's index, not
    /// the key's whole history.
    pub async fn explain_waits_for(
        &self,
        subscriber: &str,
        key: &str,
        below: DeliveryId,
    ) -> Result<String, StoreError> {
        let sql = format!("EXPLAIN (ANALYZE, COSTS OFF) {}", super::keys::WALK_DOWN);
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        let plan = explain_both(&tx, &sql, &[&subscriber, &key, &below.0, &100_000i32])
            .await
            .map_err(explain_failed)?;
        tx.rollback().await.map_err(db_failed)?;
        Ok(plan)
    }

    /// The plan of handing on the slots `freed` (subscriber, key) gave
    /// up, as it runs now (its promotions rolled back), both as planned for
    /// these values and generic: to check that a finish batch's thousand
    /// keys cost a thousand lookups, not a comparison of every pair.
    pub async fn explain_hand_on(&self, freed: &[(&str, &str)], now: Timestamp) -> Result<String, StoreError> {
        let sql = format!("EXPLAIN (ANALYZE, COSTS OFF) {}", super::keys::HAND_ON);
        let (subscribers, keys): (Vec<&str>, Vec<&str>) = freed.iter().copied().unzip();
        let now = crate::codec::at_ms(now);
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        // A finish sends its hand-on in the transaction its writes pinned
        // to nested loops: planned as it runs there.
        tx.batch_execute(writes::PIN_JOINS).await.map_err(db_failed)?;
        let plan = explain_both(&tx, &sql, &[&subscribers, &keys, &now])
            .await
            .map_err(explain_failed)?;
        tx.rollback().await.map_err(db_failed)?;
        Ok(plan)
    }

    /// The plan of listing deliveries by `filter`, as it runs now, both
    /// as planned for these values and generic: to check that a filter
    /// reads its index and stops at its limit.
    pub async fn explain_list(&self, filter: &crate::types::DeliveryFilter) -> Result<String, StoreError> {
        let (sql, params) = super::read::list_query(filter);
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.iter().map(|p| &**p as _).collect();
        let sql = format!("EXPLAIN (ANALYZE, COSTS OFF) {sql}");
        let mut client = self.connection().await?;
        let tx = client.transaction().await.map_err(db_failed)?;
        let plan = explain_both(&tx, &sql, &params).await.map_err(explain_failed)?;
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

/// The claim's plan as it runs now (`EXPLAIN (ANALYZE, BUFFERS)`), both as
/// planned for these values and as the generic plan a connection's cached
/// statement may switch to, in a transaction the caller rolls back: the
/// rows it locks stay as they were.
async fn claim_plan(tx: &Transaction<'_>, now: jadpo_core::Timestamp, limit: usize) -> Result<String, Abort> {
    let sql = format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {}", claim::CLAIM);
    let now = crate::codec::at_ms(now);
    let limit = limit.min(super::MAX_BATCH) as i64;
    tx.batch_execute(claim::PIN_PLAN).await?;
    explain_both(tx, &sql, &[&now, &limit]).await
}

/// The plan of a finish's write of `ids` as plain ends, both as planned
/// for these values and as the generic plan a cached statement may switch
/// to (`EXPLAIN`, nothing written), with the settings every write sends.
async fn ends_plan(tx: &Transaction<'_>, ids: &[i64]) -> Result<String, Abort> {
    let n = ids.len();
    let zero = vec![0i64; n];
    let state = vec!["succeeded"; n];
    let none: Vec<Option<i64>> = vec![None; n];
    tx.batch_execute(writes::PIN_JOINS).await?;
    let sql = format!("EXPLAIN (COSTS OFF) {}", writes::WRITE_ENDS);
    explain_both(tx, &sql, &[&ids, &zero, &zero, &state, &none, &none]).await
}
