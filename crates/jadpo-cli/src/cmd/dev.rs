//! `jadpo dev [APP]`: one process for local work on the embedded SQLite
//! store, with readable logs and `--time-scale`.

use crate::cmd::process::{self, Process};
use crate::output;
use crate::{operator, store_url};
use jadpo_runtime::logfmt::{self, Format};
use jadpo_runtime::{ScaledClock, SharedClock, SystemClock};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    pub app: PathBuf,
    /// The store (default: $JADPO_STORE, else sqlite:.jadpo/jadpo.db). With
    /// `store` blocks in the app, `--store NAME=URL` overrides one (may be
    /// given once per store).
    #[arg(long, env = "JADPO_STORE", action = clap::ArgAction::Append)]
    pub store: Vec<String>,
    /// The HTTP API's port on 127.0.0.1.
    #[arg(long, default_value_t = 7420)]
    pub port: u16,
    /// Run every engine wait (backoffs, pauses, budgets, schedules) N times
    /// faster, to watch days of retries in minutes. A lease still covers its
    /// run's real time limit. Processes started the same UTC day agree on
    /// engine time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub time_scale: u32,
    /// Finished deliveries are deleted after this many days (0 keeps them).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=3650))]
    pub retention_days: u32,
    /// Deliveries run at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: u32,
    /// How long an idle worker waits before looking for due deliveries
    /// again, when nothing wakes it sooner (10ms to 1h).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_poll)]
    pub poll: Duration,
}

pub fn run(args: Args) -> ExitCode {
    logfmt::init_with(
        Format::Human,
        logfmt::DEFAULT_FILTER,
        crate::api::metrics::CountingLayer,
    );
    output::run_async(async move {
        let app = jadpo::load_app(&args.app).map_err(operator::start_error)?;
        let summary = app.summary();
        let env = |k: &str| std::env::var(k).ok();
        let stores = store_url::stores_of(&app, &args.store, Some(store_url::DEFAULT_URL), &env)?;
        let clock: SharedClock = if args.time_scale > 1 {
            Arc::new(ScaledClock::new(args.time_scale))
        } else {
            Arc::new(SystemClock)
        };
        let workers = process::Workers {
            mode: "dev",
            concurrency: args.workers,
            poll: args.poll,
            retention_days: args.retention_days,
        };
        let ready = process::ready_each(&app, &stores, clock, &workers)?;
        tracing::info!(
            app = %args.app.display(),
            summary = %summary,
            store = %store_url::describe(&stores),
            api = %format!("http://127.0.0.1:{}", args.port),
            console = %format!("http://127.0.0.1:{}/ui", args.port),
            time_scale = args.time_scale,
            "dev.started"
        );
        let token = std::env::var("JADPO_API_TOKEN").ok().filter(|t| !t.is_empty());
        let p = Process {
            ready,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)),
            token,
        };
        process::run(p, &stores).await
    })
}

/// Names this process's leases: host and pid, so an operator can tell
/// which process holds a delivery.
pub fn worker_name(mode: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    format!("{mode}@{host}:{}", std::process::id())
}

/// `--poll`: a duration such as `1s`, `250ms` or `5m`, from 10 ms to 1 h.
/// Emits and retries wake idle workers at once (in every process on
/// PostgreSQL), so the poll is only the fallback for a wake-up that was lost
/// or that a store does not send.
pub fn parse_poll(s: &str) -> Result<Duration, String> {
    let d = crate::cmd::retry::parse_duration(s)?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
        return Err(format!("{s:?}: the poll is from 10ms to 1h"));
    }
    Ok(d)
}
