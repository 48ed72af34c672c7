//! Stores (memory now; SQLite and PostgreSQL with issue 4).
