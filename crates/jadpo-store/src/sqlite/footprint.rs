//! The store's size: its tables' rows, the file, its write-ahead log and
//! the pages free for reuse.

use super::pool::Abort;
use crate::footprint::{Footprint, TableFootprint};
use rusqlite::Connection;
use std::path::Path;

pub(crate) fn read(c: &Connection, path: &Path) -> Result<Footprint, Abort> {
    let names: Vec<String> = c
        .prepare_cached(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'jadpo\\_%' ESCAPE '\\' ORDER BY name",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut tables = Vec::with_capacity(names.len());
    for name in names {
        // The names come from the schema itself: quoting keeps them names.
        let rows: i64 = c.query_row(&format!("SELECT count(*) FROM \"{name}\""), [], |r| r.get(0))?;
        tables.push(TableFootprint {
            name,
            live_rows: u64::try_from(rows).unwrap_or(0),
            dead_rows: None,
            bytes: None,
            vacuums: None,
        });
    }
    let page_size: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let free_pages: i64 = c.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    Ok(Footprint {
        tables,
        file_bytes: size(path),
        wal_bytes: Some(size(Path::new(&wal)).unwrap_or(0)),
        free_bytes: Some(u64::try_from(page_size * free_pages).unwrap_or(0)),
        wal_position: None,
        autovacuum: None,
    })
}
