//! One module per subcommand, and the flags several of them share.

pub mod alerts;
pub mod bench;
pub mod breakers;
pub mod check;
pub mod completions;
pub mod deliveries;
pub mod demo;
pub mod dev;
pub mod emit;
pub mod migrate;
pub mod process;
pub mod retry;
pub mod serve;

use std::path::PathBuf;

/// `--store URL`, shared by the operator commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StoreArg {
    /// The store: sqlite:PATH or postgres://USER@HOST/DB (default:
    /// $JADPO_STORE, else sqlite:.jadpo/jadpo.db).
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, value_name = "URL", global = true)]
    pub store: Option<String>,
}

/// `--app FILE`, shared by the operator commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AppArg {
    /// The app file (default: app.jadpo in the current folder).
    #[arg(long, value_name = "FILE", global = true)]
    pub app: Option<PathBuf>,
}
