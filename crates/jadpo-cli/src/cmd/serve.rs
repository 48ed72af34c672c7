//! `jadpo serve [APP] --store URL`: production mode, JSON logs, the API
//! behind a bearer token; many processes share one PostgreSQL store.

use crate::cmd::dev::parse_poll;
use crate::cmd::process::{self, Process};
use crate::output::{self, CliError};
use crate::{operator, store_url};
use jadpo_core::clock::Wanted;
use jadpo_runtime::logfmt::{self, Format};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    pub app: PathBuf,
    /// The store, e.g. postgres://user@host/db (default: $JADPO_STORE).
    /// With `store` blocks in the app, `--store NAME=URL` overrides one (may
    /// be given once per store).
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, action = clap::ArgAction::Append)]
    pub store: Vec<String>,
    /// Finished deliveries are deleted after this many days (0 keeps them).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(0..=3650))]
    pub retention_days: u32,
    /// Finished deliveries are deleted after this long: minutes to days
    /// (`30m`, `12h`, `7d`; `0` keeps them). Instead of --retention-days.
    #[arg(long, value_name = "DURATION", value_parser = process::parse_retention, conflicts_with = "retention_days")]
    pub retention: Option<std::time::Duration>,
    /// Deliveries run at once in this process.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: u32,
    /// The HTTP API's port (0: any free port, named in `serve.started`).
    #[arg(long, default_value_t = 7420)]
    pub port: u16,
    /// The address the API listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: IpAddr,
    /// How long an idle worker waits before looking for due deliveries
    /// again, when nothing wakes it sooner (10ms to 1h).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_poll)]
    pub poll: std::time::Duration,
    #[command(flatten)]
    pub edge: process::EdgeArgs,
    /// Refused: `--time-scale` is for `jadpo dev` only.
    #[arg(long, hide = true)]
    pub time_scale: Option<String>,
}

/// The shortest API token `serve` takes: 32 characters of `openssl rand
/// -hex` are 128 bits, beyond guessing at any rate the API answers.
pub(crate) const MIN_TOKEN_CHARS: usize = 32;

pub(crate) fn run(args: Args) -> ExitCode {
    logfmt::init_with(Format::Json, logfmt::DEFAULT_FILTER, crate::api::metrics::CountingLayer);
    output::run_async(async move {
        if args.time_scale.is_some() {
            return Err(CliError::invalid(
                "serve.time_scale_refused",
                "`--time-scale` is for `jadpo dev` only: production runs on the system clock",
            ));
        }
        let Some(token) = std::env::var("JADPO_API_TOKEN").ok().filter(|t| !t.is_empty()) else {
            return Err(CliError::environment(
                "serve.token_missing",
                "`jadpo serve` requires $JADPO_API_TOKEN: the HTTP API takes `Authorization: Bearer <token>`",
            ));
        };
        let length = token.chars().count();
        if length < MIN_TOKEN_CHARS {
            return Err(CliError::environment(
                "serve.token_too_short",
                format!(
                    "$JADPO_API_TOKEN has {length} characters; `jadpo serve` needs at least {MIN_TOKEN_CHARS}, \
                     so that it cannot be guessed: make one with `openssl rand -hex 32`"
                ),
            ));
        }
        let app = jadpo::load_app(&args.app).map_err(operator::start_error)?;
        let summary = app.summary();
        let env = |k: &str| std::env::var(k).ok();
        let stores = store_url::stores_of(&app, &args.store, None, &env)?;
        if stores.is_empty() {
            return Err(CliError::environment(
                "serve.store_missing",
                "`jadpo serve` needs `--store URL` or $JADPO_STORE (postgres://USER@HOST/DATABASE for many processes)",
            ));
        }
        let export = crate::otel::Export::from_env()?;
        let workers = process::Workers {
            mode: "serve",
            concurrency: args.workers,
            poll: args.poll,
            retention: process::retention(args.retention, args.retention_days),
            spans: export
                .as_ref()
                .map_or_else(jadpo::Spans::off, crate::otel::Export::spans),
        };
        let ready = process::ready_each(&app, &stores, Wanted::Real, &workers)?;
        let store = store_url::describe(&stores);
        let app_path = args.app.display().to_string();
        let workers = args.workers;
        let started = move |_: &process::Clocks, bound: SocketAddr| {
            tracing::info!(
                app = %app_path,
                addr = %bound,
                summary = %summary,
                store = %store,
                workers = workers,
                "serve.started"
            );
        };
        let p = Process {
            ready,
            addr: SocketAddr::new(args.bind, args.port),
            token: Some(token),
            limits: args.edge.limits(),
            started: Box::new(started),
            export,
        };
        process::run(p, &stores).await
    })
}
