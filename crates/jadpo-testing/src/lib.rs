//! What the tests of every Jadpo crate share. It depends on no other Jadpo
//! crate, so any crate's tests (and `jadpo-store`'s `testing` feature) may
//! use it.
//!
//! - [`skip`]: the one rule for a test whose prerequisite is missing.
//! - [`wait`]: waiting for something to happen, with one generous ceiling.
//! - [`logs`]: a buffer a `tracing` subscriber writes a test's log lines
//!   into, to read them back.
//! - [`process`]: a child process whose stderr is kept as it comes, with
//!   the port its API chose.
//! - [`pg_server`]: a PostgreSQL server of a test's own (its settings, its
//!   files, a restart).
//! - [`pgbouncer`]: a PgBouncer of a test's own in front of a server.
//! - [`broker_server`]: a Redis or NATS server of a test's own, to kill
//!   and start again on its port with what it stored.
//! - [`proxy`]: a TCP proxy in front of a server (PostgreSQL) that can cut,
//!   refuse and stall connections, for store outages.

pub mod broker_server;
pub mod logs;
pub mod pg_server;
pub mod pgbouncer;
pub mod process;
pub mod proxy;
pub mod skip;
pub mod wait;
