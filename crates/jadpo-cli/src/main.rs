//! `jadpo`: the command line (DESIGN.md section 8). Each subcommand lives in
//! its own module under `cmd/` and returns the process's exit code.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "jadpo", version, about = "Durable event delivery", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check an app file and report every error in it.
    Check(cmd::check::Args),
    /// Run Jadpo locally: SQLite store, workers, the tick and the HTTP API.
    Dev(cmd::dev::Args),
    /// The seed's outage, for real: a provider goes down and comes back.
    Demo(cmd::demo::Args),
    /// Run Jadpo in production: a shared store, JSON logs, a token-guarded API.
    Serve(cmd::serve::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check(args) => cmd::check::run(args),
        Command::Dev(args) => cmd::dev::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Serve(args) => cmd::serve::run(args),
    }
}
