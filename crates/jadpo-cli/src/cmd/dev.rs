//! `jadpo dev [APP]`: one process for local work on the embedded SQLite
//! store, with readable logs and `--time-scale`.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    pub app: PathBuf,
    /// The store (default: $JADPO_STORE, else sqlite:.jadpo/jadpo.db).
    #[arg(long, env = "JADPO_STORE")]
    pub store: Option<String>,
    /// The HTTP API's port on 127.0.0.1.
    #[arg(long, default_value_t = 7420)]
    pub port: u16,
    /// Run every engine wait (backoffs, pauses, leases, budgets, schedules)
    /// N times faster, to watch days of retries in minutes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub time_scale: u32,
    /// Deliveries run at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: u32,
}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("error[cli.unavailable]: `jadpo dev` is being built (issue 6)");
    ExitCode::from(2)
}
