//! How much room a store takes: what `jadpo bench --duration` reports each
//! interval to show that a store under steady load and retention stays the
//! same size (docs/performance.md, "Soak").

/// One system table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFootprint {
    /// The table's name, such as `jadpo_deliveries`.
    pub name: String,
    /// Rows, as the database estimates them on PostgreSQL (statistics
    /// kept by autovacuum and analyze), counted on SQLite.
    pub live_rows: u64,
    /// Row versions deleted or replaced but not yet vacuumed away
    /// (PostgreSQL only).
    pub dead_rows: Option<u64>,
    /// The table with its indexes and TOAST (PostgreSQL only).
    pub bytes: Option<u64>,
    /// Vacuums of the table so far, automatic and manual (PostgreSQL only).
    pub vacuums: Option<u64>,
}

/// A store's size at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Each system table's size.
    pub tables: Vec<TableFootprint>,
    /// SQLite: the database file.
    pub file_bytes: Option<u64>,
    /// SQLite: the write-ahead log beside it.
    pub wal_bytes: Option<u64>,
    /// SQLite: pages on the freelist, free for new rows to reuse.
    pub free_bytes: Option<u64>,
    /// PostgreSQL: WAL written by the whole server since it was made
    /// (`pg_current_wal_lsn`), to see how much one interval wrote.
    pub wal_position: Option<u64>,
    /// PostgreSQL: whether the server's autovacuum is on. Off, nothing
    /// reclaims the row versions every claim and finish leave behind.
    pub autovacuum: Option<bool>,
}

impl Footprint {
    /// The sum of the tables' bytes, where the store measures them.
    pub fn table_bytes(&self) -> Option<u64> {
        self.tables.iter().map(|t| t.bytes).sum()
    }

    /// The table named `name`, if the store measured it.
    pub fn table(&self, name: &str) -> Option<&TableFootprint> {
        self.tables.iter().find(|t| t.name == name)
    }
}
