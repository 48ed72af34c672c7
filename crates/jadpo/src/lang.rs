//! The app file, read and checked: what [`crate::load_app`] and
//! [`crate::check_app`] return, and what a failed check reports.
//!
//! ```
//! let app = jadpo::check_app("app.jadpo", "event Ping { id: string }")?;
//! assert!(app.events.contains_key("Ping"));
//! # Ok::<(), jadpo::StartError>(())
//! ```

pub use jadpo_lang::{App, Code, Diagnostic};
