//! The errors of the embedded API: each has the stable code the command
//! line and the HTTP API give (`code()`), a message that says what to fix,
//! and the error it wraps (`source()`).

use crate::TypeMismatch;
use jadpo_runtime::clock::ClockError;
use jadpo_runtime::connection::StartupError;
use jadpo_runtime::emit::EventError;
use jadpo_store::StoreError;
use std::fmt;

/// Why Jadpo could not start. Each has a stable code and says what to fix.
///
/// ```
/// use jadpo::{Setting, StartError, StartupError};
/// let app = r#"connection crm { base_url: env("CRM_URL") }"#;
/// let Err(err) = jadpo::builder().app_source("app.jadpo", app)?.env(|_| None).ready() else {
///     panic!("CRM_URL is not set")
/// };
/// assert_eq!(err.code(), "connection.env_missing");
/// let StartError::Startup(problems) = &err else { panic!("{err}") };
/// assert!(matches!(&problems[0],
///     StartupError::EnvMissing { setting: Setting::BaseUrl, variable, .. } if variable == "CRM_URL"));
/// # Ok::<(), StartError>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// `app.unreadable`: the app file could not be read.
    Unreadable {
        /// The path as given.
        path: String,
        /// Why it could not be read, as the system says.
        reason: String,
    },
    /// The app file has errors; `rendered` shows each with its source line.
    Invalid {
        /// Every error, each shown with its source line.
        rendered: String,
        /// How many errors.
        count: usize,
    },
    /// A connection or action setting could not be resolved (missing
    /// environment variable, bad URL); every one is listed.
    Startup(Vec<StartupError>),
    /// `action.unregistered`: an action declared with `uses` that a
    /// subscriber or schedule runs has no Rust code.
    Unregistered(Vec<String>),
    /// `action.register_invalid`
    Register(String),
    /// The store could not be migrated: unreachable, or its schema and this
    /// build do not go together (`store.schema_newer`,
    /// `store.migration_contract`).
    Store(StoreError),
    /// `clock.scale_mismatch`, `clock.store_scaled`: the store keeps a
    /// scaled clock this start cannot run on (docs/decisions.md, "One
    /// scaled clock per store").
    Clock(ClockError),
    /// `event.type_mismatch`: a Rust type registered for an event
    /// ([`crate::Builder::event`]) does not have the app's fields, each of its
    /// type; the field at fault is named.
    EventType {
        /// The event's name.
        event: String,
        /// The field, and what to change.
        mismatch: TypeMismatch,
    },
    /// `action.args_mismatch`: a typed action's argument type
    /// ([`crate::Builder::typed_action`]) has a field the action does not declare,
    /// or of another type; the field at fault is named.
    ActionArgs {
        /// The action's name.
        action: String,
        /// The field, and what to change.
        mismatch: TypeMismatch,
    },
}

impl StartError {
    /// The stable error code, the same the command line shows (for
    /// `Startup`, the first error's; each of them has its own).
    pub fn code(&self) -> &'static str {
        match self {
            StartError::Unreadable { .. } => "app.unreadable",
            StartError::Invalid { .. } => "app.invalid",
            StartError::Startup(e) => e.first().map_or("connection.invalid", StartupError::code),
            StartError::Unregistered(_) => "action.unregistered",
            StartError::Register(_) => "action.register_invalid",
            StartError::Store(e) => e.code(),
            StartError::Clock(e) => e.code(),
            StartError::EventType { .. } => "event.type_mismatch",
            StartError::ActionArgs { .. } => "action.args_mismatch",
        }
    }

    /// The field or parameter at fault, where one is.
    pub fn field(&self) -> Option<&str> {
        match self {
            StartError::EventType { mismatch, .. } | StartError::ActionArgs { mismatch, .. } => {
                mismatch.field.as_deref()
            }
            _ => None,
        }
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Unreadable { path, reason } => {
                write!(f, "cannot read the app file {path}: {reason}")
            }
            StartError::Invalid { rendered, count } => {
                write!(
                    f,
                    "{rendered}\nthe app file has {count} error{}",
                    if *count == 1 { "" } else { "s" }
                )
            }
            StartError::Startup(errors) => {
                let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                f.write_str(&lines.join("\n"))
            }
            StartError::Unregistered(names) => write!(
                f,
                "no Rust code supplies {}: register {} with `Builder::action`",
                names.join(", "),
                if names.len() == 1 { "it" } else { "them" }
            ),
            StartError::Register(why) => f.write_str(why),
            StartError::Store(e) => e.fmt(f),
            StartError::Clock(e) => e.fmt(f),
            StartError::EventType { mismatch, .. } | StartError::ActionArgs { mismatch, .. } => mismatch.fmt(f),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Store(e) => Some(e),
            StartError::Clock(e) => Some(e),
            // The first; `Display` lists them all.
            StartError::Startup(e) => e.first().map(|e| e as _),
            _ => None,
        }
    }
}

/// Why an emit was refused.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display())).await?;
/// let jadpo = jadpo::builder()
///     .app_source("app.jadpo", "event Ping { id: string  n: int }")?
///     .build(store)
///     .await?;
/// let err = jadpo.emit("Ping", &serde_json::json!({"id": "1", "n": "two"})).await.unwrap_err();
/// assert_eq!((err.code(), err.field()), ("event.invalid", Some("n")));
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum EmitError {
    /// Refused before the store: an unknown event, a payload that does not fit
    /// it or is too large, or a malformed idempotency key (`event.unknown`,
    /// `event.invalid`, `event.too_large`, `event.idempotency_key_invalid`).
    Event(EventError),
    /// The store refused it (an idempotency key used before with another
    /// payload: `event.idempotency_conflict`) or could not write it
    /// (`store.unavailable`, or the schema's code when this build cannot
    /// run on it).
    Store(StoreError),
}

impl EmitError {
    /// The stable error code, the same the command line and the HTTP API
    /// give for it.
    pub fn code(&self) -> &'static str {
        match self {
            EmitError::Event(e) => e.code(),
            EmitError::Store(e) => e.code(),
        }
    }

    /// The payload's field at fault, where one is (`event.invalid`,
    /// `event.key_invalid`).
    pub fn field(&self) -> Option<&str> {
        match self {
            EmitError::Event(e) => e.field(),
            EmitError::Store(_) => None,
        }
    }
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::Event(e) => e.fmt(f),
            EmitError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for EmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EmitError::Event(e) => Some(e),
            EmitError::Store(e) => Some(e),
        }
    }
}
