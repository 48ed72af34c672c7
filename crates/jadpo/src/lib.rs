//! Jadpo embedded in a Rust program (issue 5).
pub use jadpo_core as core;
