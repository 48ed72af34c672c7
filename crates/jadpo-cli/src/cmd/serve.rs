//! `jadpo serve [APP] --store URL`: production mode, JSON logs, the API
//! behind a bearer token; many processes share one PostgreSQL store.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    pub app: PathBuf,
    /// The store, e.g. postgres://user@host/db (default: $JADPO_STORE).
    #[arg(long, env = "JADPO_STORE")]
    pub store: Option<String>,
    /// Deliveries run at once in this process.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: u32,
    /// The HTTP API's port.
    #[arg(long, default_value_t = 7420)]
    pub port: u16,
    /// The address the API listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: String,
    /// Refused: `--time-scale` is for `jadpo dev` only.
    #[arg(long, hide = true)]
    pub time_scale: Option<String>,
}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("error[cli.unavailable]: `jadpo serve` is being built (issue 6)");
    ExitCode::from(2)
}
