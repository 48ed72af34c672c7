//! What the operator commands (`emit`, `deliveries`, `retry`, `skip`,
//! `breakers`) build on: the app file, and a `jadpo::Client`, which starts
//! no workers.
//!
//! These commands never run an action, so they must work where the app's
//! environment is missing (an operator's laptop, a cron job): a client
//! reads no `env(...)` or `secret(...)` and needs no registered code.

use crate::output::CliError;
use jadpo::StartError;
use jadpo_lang::App;
use jadpo_store::ScheduleStore;
use std::path::{Path, PathBuf};
#[cfg(test)]
use {
    jadpo::Jadpo,
    jadpo_core::{Failure, FailureKind},
    jadpo_lang::ActionBody,
    jadpo_runtime::connection::Fake,
    jadpo_runtime::interpreter::RustAction,
    std::sync::Arc,
};

/// The app file used when `--app` is not given.
pub(crate) const DEFAULT_APP: &str = "app.jadpo";

/// How much a command needs the app file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// `emit`: it validates the payload against the app.
    Required,
    /// `deliveries`, `breakers`, `retry`: used when present (connection
    /// filters, breakers with no row yet); the default `app.jadpo` may be
    /// absent. A file named with `--app` must be readable.
    Optional,
}

/// Reads and checks the app. A missing or unreadable file is
/// `app.unreadable` (exit 2), except the default one when it is
/// [`Need::Optional`]; an app with errors prints its diagnostics (exit 1).
pub(crate) fn load_app(flag: Option<&Path>, need: Need) -> Result<Option<App>, CliError> {
    let path: PathBuf = flag.map_or_else(|| PathBuf::from(DEFAULT_APP), Path::to_path_buf);
    if flag.is_none() && need == Need::Optional && !path.exists() {
        return Ok(None);
    }
    jadpo::load_app(&path).map(Some).map_err(start_error)
}

/// The app, read only to find its `store` blocks (for `--store NAME` and
/// the default store): the default `app.jadpo` is skipped when absent or
/// invalid, since the command itself needs nothing else from it; a file
/// named with `--app` must be valid.
pub(crate) fn stores_app(flag: Option<&Path>) -> Result<Option<App>, CliError> {
    match flag {
        Some(_) => load_app(flag, Need::Required),
        None => Ok(load_app(None, Need::Optional).ok().flatten()),
    }
}

/// A start error as the command line reports it.
pub(crate) fn start_error(e: StartError) -> CliError {
    match e {
        StartError::Unreadable { path, reason } => CliError::environment(
            "app.unreadable",
            format!("cannot read the app file {path}: {reason} (give another with --app FILE)"),
        ),
        StartError::Invalid { rendered, count } => CliError {
            rendered: Some(format!(
                "{rendered}\nerror[app.invalid]: the app file has {count} error{}\n(run `jadpo check` for details)",
                if count == 1 { "" } else { "s" }
            )),
            ..CliError::invalid("app.invalid", "the app file has errors")
        },
        StartError::Store(s) => CliError::store(s),
        // Every error on a line of its own, each under its own code.
        StartError::Startup(errors) if errors.len() > 1 => {
            let lines: Vec<String> = errors.iter().map(|e| format!("error[{}]: {e}", e.code())).collect();
            CliError {
                rendered: Some(lines.join("\n")),
                ..CliError::environment(errors[0].code(), errors[0].to_string())
            }
        }
        other => CliError::environment(other.code(), other.to_string()),
    }
}

/// An app with nothing in it, for commands that need no app (a retry by id).
pub(crate) fn empty_app() -> App {
    jadpo::check_app("(no app)", "").unwrap_or_else(|_| unreachable!("an empty app file is valid"))
}

/// A client for operator commands. See the module's documentation.
pub(crate) async fn client<S: ScheduleStore>(app: App, store: S) -> Result<jadpo::Client<S>, CliError> {
    jadpo::Client::new(app, store).await.map_err(start_error)
}

/// A `Jadpo` that needs no environment and no Rust code, for tests of the
/// API, which takes one: every connection a fake, every Rust action a
/// stub, never started.
#[cfg(test)]
pub(crate) async fn jadpo<S: ScheduleStore>(app: App, store: S) -> Result<Jadpo<S>, CliError> {
    let mut builder = jadpo::Builder::default().env(|_| None);
    for name in app.connections.keys() {
        builder = builder.double(name, Fake::ok());
    }
    for (name, action) in &app.actions {
        if matches!(action.body, ActionBody::Uses(_)) {
            builder = builder.action(name, stub());
        }
    }
    builder.app(app).build(store).await.map_err(start_error)
}

#[cfg(test)]
fn stub() -> RustAction {
    Arc::new(|_, _| Box::pin(async { Err(Failure::new("cli.action_not_supplied", FailureKind::InternalFault)) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_app_is_valid() {
        let app = empty_app();
        assert!(app.events.is_empty() && app.connections.is_empty());
    }
}
