//! One module per subcommand, and the flags several of them share.

pub(crate) mod alerts;
pub(crate) mod bench;
pub(crate) mod breakers;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod deliveries;
pub(crate) mod demo;
pub(crate) mod dev;
pub(crate) mod emit;
pub(crate) mod migrate;
pub(crate) mod process;
pub(crate) mod retry;
pub(crate) mod serve;

use std::path::PathBuf;

/// `--store URL`, shared by the operator commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct StoreArg {
    /// The store: sqlite:PATH or postgres://USER@HOST/DB (default:
    /// $JADPO_STORE, else sqlite:.jadpo/jadpo.db).
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, value_name = "URL", global = true)]
    pub store: Option<String>,
}

/// `--app FILE`, shared by the operator commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct AppArg {
    /// The app file (default: app.jadpo in the current folder).
    #[arg(long, value_name = "FILE", global = true)]
    pub app: Option<PathBuf>,
}

/// Names this process's leases: host and pid, so an operator can tell
/// which process holds a delivery.
pub(crate) fn worker_name(mode: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    format!("{mode}@{host}:{}", std::process::id())
}
