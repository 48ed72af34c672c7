//! `jadpo dev [APP]`: one process for local work on the embedded SQLite
//! store, with readable logs and `--time-scale`.

use crate::cmd::process::{self, Process};
use crate::output;
use crate::{operator, store_url};
use jadpo_core::clock::Wanted;
use jadpo_runtime::logfmt::{self, Format};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    pub app: PathBuf,
    /// The store (default: $JADPO_STORE, else sqlite:.jadpo/jadpo.db). With
    /// `store` blocks in the app, `--store NAME=URL` overrides one (may be
    /// given once per store).
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, action = clap::ArgAction::Append)]
    pub store: Vec<String>,
    /// The HTTP API's port on 127.0.0.1 (0: any free port, named in
    /// `dev.started`).
    #[arg(long, default_value_t = 7420)]
    pub port: u16,
    /// Run every engine wait (backoffs, pauses, budgets, schedules) N times
    /// faster, to watch days of retries in minutes. A lease still covers its
    /// run's real time limit. The first scaled start keeps the scale in the
    /// store, engine time starting at that moment; every later process and
    /// command on the store (emit, retry, the console) follows that clock,
    /// and a start at another scale is refused (clock.scale_mismatch).
    /// Without it, dev follows the store's clock.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub time_scale: Option<u32>,
    /// Finished deliveries are deleted after this many days (0 keeps them).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(0..=3650))]
    pub retention_days: u32,
    /// Finished deliveries are deleted after this long: minutes to days
    /// (`30m`, `12h`, `7d`; `0` keeps them). Instead of --retention-days.
    #[arg(long, value_name = "DURATION", value_parser = process::parse_retention, conflicts_with = "retention_days")]
    pub retention: Option<std::time::Duration>,
    /// Deliveries run at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: u32,
    #[command(flatten)]
    pub edge: process::EdgeArgs,
    /// How long an idle worker waits before looking for due deliveries
    /// again, when nothing wakes it sooner (10ms to 1h).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_poll)]
    pub poll: Duration,
}

pub(crate) fn run(args: Args) -> ExitCode {
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
        let time = args.time_scale.map_or(Wanted::Store, Wanted::Scale);
        let export = crate::otel::Export::from_env()?;
        let workers = process::Workers {
            mode: "dev",
            concurrency: args.workers,
            poll: args.poll,
            retention: process::retention(args.retention, args.retention_days),
            spans: export
                .as_ref()
                .map_or_else(jadpo::Spans::off, crate::otel::Export::spans),
        };
        let ready = process::ready_each(&app, &stores, time, &workers)?;
        let store = store_url::describe(&stores);
        let asked = args.time_scale;
        let app_path = args.app.display().to_string();
        let started = move |clocks: &process::Clocks, bound: SocketAddr| {
            let clock = clocks.describe();
            if asked.is_none() && clocks.any_scaled() {
                tracing::warn!(
                    clock = %clock,
                    "dev.clock_scaled: no --time-scale given, and this store keeps a scaled clock from an \
                     earlier start: engine time follows it (a new store runs on real time)"
                );
            }
            tracing::info!(
                app = %app_path,
                summary = %summary,
                store = %store,
                api = %format!("http://{bound}"),
                console = %format!("http://{bound}/ui"),
                clock = %clock,
                "dev.started"
            );
        };
        let token = std::env::var("JADPO_API_TOKEN").ok().filter(|t| !t.is_empty());
        let p = Process {
            ready,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)),
            token,
            limits: args.edge.limits(),
            started: Box::new(started),
            export,
        };
        process::run(p, &stores).await
    })
}

/// `--poll`: a duration such as `1s`, `250ms` or `5m`, from 10 ms to 1 h.
/// Emits and retries wake idle workers at once (in every process on
/// PostgreSQL), so the poll is only the fallback for a wake-up that was lost
/// or that a store does not send.
pub(crate) fn parse_poll(s: &str) -> Result<Duration, String> {
    let d = crate::cmd::parse_duration(s)?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
        return Err(format!("{s:?}: the poll is from 10ms to 1h"));
    }
    Ok(d)
}
