//! A schema of its own for a one-off run that must not touch the tables
//! already in a database (`jadpo bench`): created empty, migrated by a store
//! opened on it with [`Options::schema`](super::Options), dropped with
//! everything in it at the end.
//!
//! The run's connections should be named after the schema
//! (`application_name`): [`drop_schema`] ends them first, so a run stopped
//! half-way (its sessions still open, perhaps in a transaction) cannot keep
//! the drop waiting on a lock.

use super::{reason, Options, PgStore};
use crate::StoreError;

fn check(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(StoreError::Unavailable(format!(
            "schema name {name:?}: lowercase letters, digits and _, at most 63"
        )))
    }
}

fn failed(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(format!("PostgreSQL: {}", reason(&e)))
}

/// Creates the empty schema `name` in the database at `url`.
pub async fn create_schema(url: &str, name: &str) -> Result<(), StoreError> {
    check(name)?;
    let admin = PgStore::lazy(url, Options::default())?;
    let client = admin.connection().await?;
    client
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .map_err(failed)
}

/// Ends the sessions named `name`, then drops the schema `name` and all in
/// it. Gone already is fine.
pub async fn drop_schema(url: &str, name: &str) -> Result<(), StoreError> {
    check(name)?;
    let admin = PgStore::lazy(url, Options::default())?;
    let client = admin.connection().await?;
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .map_err(failed)?;
    client
        .batch_execute(&format!(
            "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {name} CASCADE"
        ))
        .await
        .map_err(failed)
}

/// Whether the schema `name` exists: for tests that a run dropped it.
#[cfg(feature = "testing")]
pub async fn schema_exists(url: &str, name: &str) -> Result<bool, StoreError> {
    let admin = PgStore::lazy(url, Options::default())?;
    let client = admin.connection().await?;
    let row = client
        .query_one("SELECT count(*) FROM pg_namespace WHERE nspname = $1", &[&name])
        .await
        .map_err(failed)?;
    Ok(row.get::<_, i64>(0) > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_schema_names_reach_the_sql() {
        assert!(check("jadpo_bench_123_456").is_ok());
        for bad in ["", "Bench", "a-b", "a;drop", "1abc", &"x".repeat(64)] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }
}
