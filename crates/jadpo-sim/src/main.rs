//! `jadpo-sim`: run the outage scenario, or many simulation seeds.

use clap::{Parser, Subcommand};
use jadpo_sim::outage::{self, OutageConfig};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "jadpo-sim", about = "Jadpo's deterministic simulation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A provider's outage (by default 5,000 deliveries, an hour down), with
    /// the breaker and without it.
    Outage {
        #[arg(long, default_value_t = 5_000)]
        deliveries: usize,
        /// How long the provider is down, in minutes.
        #[arg(long, default_value_t = 60)]
        down_minutes: u64,
        #[arg(long, default_value_t = 2)]
        workers: usize,
        #[arg(long, default_value_t = 8)]
        slots: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Random systems under faults, checked after every step.
    Seeds {
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long, default_value_t = 1_000)]
        count: u64,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Outage {
            deliveries,
            down_minutes,
            workers,
            slots,
            seed,
        } => {
            if deliveries == 0 || workers == 0 || slots == 0 {
                eprintln!("error[sim.arguments_invalid]: --deliveries, --workers and --slots take at least 1");
                return ExitCode::from(2);
            }
            let config = OutageConfig {
                deliveries,
                down_for: Duration::from_secs(down_minutes.saturating_mul(60)),
                workers,
                slots,
                seed,
                ..OutageConfig::default()
            };
            match outage::run(&config) {
                Ok(report) => {
                    print!("{report}");
                    ExitCode::SUCCESS
                }
                Err(v) => {
                    eprintln!("{v}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Seeds { from, count } => {
            let mut failed = 0u64;
            let mut steps = 0u64;
            for seed in from..from.saturating_add(count) {
                match jadpo_sim::run_seed(seed) {
                    Ok(sim) => steps += sim.stats.steps,
                    Err(v) => {
                        failed += 1;
                        eprintln!("{v}");
                    }
                }
            }
            println!("{} passed, {failed} failed ({steps} steps)", count - failed);
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
