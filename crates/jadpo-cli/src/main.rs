//! `jadpo`: the command line (docs/cli.md). Each subcommand lives in its own
//! module under `cmd/` and returns the process's exit code: 0 done, 1 input
//! refused, 2 the command could not run (usage, store, app file).

mod api;
mod cmd;
mod console;
mod http;
mod operator;
mod otel;
mod output;
mod store_url;
mod views;

use clap::{CommandFactory, Parser, Subcommand};
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
    /// A provider's hour-long outage, for real: it goes down and comes back.
    Demo(cmd::demo::Args),
    /// Run Jadpo in production: a shared store, JSON logs, a token-guarded API.
    Serve(cmd::serve::Args),
    /// Emit an event: check its payload against the app, store it and one
    /// delivery per subscriber.
    Emit(cmd::emit::Args),
    /// List deliveries, or show one with its attempts (`deliveries show ID`).
    Deliveries(cmd::deliveries::Args),
    /// Retry failed and parked deliveries with a fresh budget.
    Retry(cmd::retry::Args),
    /// Show each connection's circuit breaker.
    Breakers(cmd::breakers::Args),
    /// List the alerts raised, newest first.
    Alerts(cmd::alerts::Args),
    /// Create or upgrade the store's tables.
    Migrate(cmd::migrate::Args),
    /// Time the engine: emit N events, drain them through the real workers
    /// to a no-op (or local HTTP) subscriber, report rates and latency.
    Bench(cmd::bench::Args),
    /// Run the app against a scenario (traffic, outages) in virtual time
    /// and report what would happen (docs/simulate.md).
    Simulate(cmd::simulate::Args),
    /// Print a shell completion script.
    Completions(cmd::completions::Args),
    /// Ask a running Jadpo's `/healthz` (a container's HEALTHCHECK): exit 0
    /// when it answers 200.
    Healthcheck(cmd::healthcheck::Args),
}

/// jemalloc rather than the system's: a delivery is many small, short-lived
/// allocations (ARCHITECTURE.md, "Choices of crates").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    store_url::unset_empty_env();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match cli.command {
        Command::Check(args) => cmd::check::run(args),
        Command::Dev(args) => cmd::dev::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Emit(args) => cmd::emit::run(args),
        Command::Deliveries(args) => cmd::deliveries::run(args),
        Command::Retry(args) => cmd::retry::run(args),
        Command::Breakers(args) => cmd::breakers::run(args),
        Command::Alerts(args) => cmd::alerts::run(args),
        Command::Migrate(args) => cmd::migrate::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Completions(args) => cmd::completions::run(args, Cli::command()),
        Command::Healthcheck(args) => cmd::healthcheck::run(args),
    }
}

/// clap's own message for bad usage (exit 2), or the help or version asked
/// for; but a store URL it echoes (`jadpo deliveries postgres://...`
/// without `--store`) never shows its password.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // Jadpo's own words, which show no argument given.
        e.exit()
    }
    let text = e.render().to_string();
    let shown = store_url::redact(&text);
    if shown == text {
        // As clap prints it, in colour where the terminal has it.
        e.exit()
    }
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), shown.as_bytes());
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}
