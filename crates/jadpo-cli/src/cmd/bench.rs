//! `jadpo bench`: the real engine (the workers, the completer and the tick
//! `jadpo serve` runs) draining deliveries to a subscriber that does nothing,
//! or with `--http` to a local HTTP sink over real HTTP, timed.
//!
//! `--backlog` (the default) emits every event first, 1,000 per store
//! emit, then starts the engine and times the drain; `--rate R/s` starts
//! the engine first and emits at that rate. Either way it waits until every
//! delivery finished, knowing it from the runtime's own log events
//! (`finishes.rs`), not by asking the store; the store's counts confirm it.
//! `--rate` with `--duration` is a soak: it emits at the rate for that
//! long, with `--retention` pruning behind, and reports every interval
//! (`soak.rs`).
//! It works in a schema or file of its own (`scratch.rs`), removed at the
//! end unless `--keep`. See docs/cli.md.

mod finishes;
mod histogram;
mod report;
mod scratch;
mod sink;
mod soak;

use crate::cmd::dev::worker_name;
use crate::output::{self, CliError};
use crate::{operator, with_store};
use finishes::{Finishes, Watch};
use indicatif::{ProgressBar, ProgressStyle};
use jadpo::Jadpo;
use jadpo_core::DeliveryState;
use jadpo_runtime::interpreter::RustAction;
use jadpo_runtime::logfmt::{Format, Lines};
use jadpo_runtime::WorkerConfig;
use jadpo_store::{ScheduleStore, Store};
use report::Report;
use scratch::Scratch;
use serde_json::json;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to bench: postgres://USER@HOST/DB (a fresh schema in it) or
    /// sqlite:PATH (a fresh file in a new folder beside PATH); default:
    /// $JADPO_STORE, else a SQLite file in a temporary folder.
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, value_name = "URL")]
    pub store: Option<String>,
    /// Events to emit, one delivery each: 1 to 1000000.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub events: u64,
    /// Deliveries the engine runs at once (and requests the HTTP baseline
    /// sends at once): 1 to 10000.
    #[arg(long, value_name = "C", default_value_t = 24)]
    pub concurrency: u64,
    /// Emit every event first, then start the engine and time the drain
    /// (the default).
    #[arg(long, conflicts_with = "rate")]
    pub backlog: bool,
    /// Start the engine first, then emit at this rate (such as 500/s) and
    /// time until every delivery finished.
    #[arg(long, value_name = "R/s")]
    pub rate: Option<String>,
    /// With --rate: emit for this long (such as 30m; 10s to 24h) instead of
    /// --events, and report every --report-every: a soak.
    #[arg(long, value_name = "DURATION", requires = "rate", conflicts_with = "events")]
    pub duration: Option<String>,
    /// With --duration: how often to report (1s to 1h; default 1m).
    #[arg(long, value_name = "DURATION", requires = "duration")]
    pub report_every: Option<String>,
    /// Prune finished deliveries older than this while the bench runs, as
    /// `serve --retention` does (such as 5m; 1s to 3650d; 0 keeps them);
    /// default: 7d.
    #[arg(long, value_name = "DURATION")]
    pub retention: Option<String>,
    /// The subscriber calls a local HTTP sink over real HTTP; a plain HTTP
    /// loop is timed against the same sink to compare.
    #[arg(long)]
    pub http: bool,
    /// With --http: the sink answers after this long (such as 50ms; 0s to
    /// 10s; default 0s).
    #[arg(long, value_name = "DURATION", requires = "http")]
    pub latency: Option<String>,
    /// With --http: limit the sink's connection to this rate (such as
    /// 100/s), as `rate:` in an app file does, to see how closely the
    /// engine keeps to it and what the limit costs.
    #[arg(long, value_name = "R/s", requires = "http")]
    pub connection_rate: Option<String>,
    /// Print one JSON object on the last line of stdout instead of the
    /// summary, and no progress bar.
    #[arg(long)]
    pub json: bool,
    /// Keep the bench's store (schema or file) and print where it is.
    #[arg(long)]
    pub keep: bool,
}

/// Events per store emit in `--backlog`, and at most per emit at a rate.
const CHUNK: u64 = 1_000;
/// An explicit bound on the run's length (the bench's own memory does not
/// grow with it: see `finishes.rs`).
const MAX_EVENTS: u64 = 1_000_000;
const MAX_RATE: u64 = 1_000_000;
/// The most deliveries one process runs at once (the runtime's bound).
const MAX_CONCURRENCY: u64 = 10_000;
const MAX_LATENCY: Duration = Duration::from_secs(10);
/// A soak's bounds: its length, its report interval, and the events it
/// may emit in all.
const SOAK_MIN: Duration = Duration::from_secs(10);
const SOAK_MAX: Duration = Duration::from_secs(24 * 3600);
const REPORT_MIN: Duration = Duration::from_secs(1);
const REPORT_MAX: Duration = Duration::from_secs(3600);
const SOAK_MAX_EVENTS: u64 = 1_000_000_000;
/// Without a delivery finishing for this long, the store is asked.
const CONFIRM_AFTER: Duration = Duration::from_secs(2);
/// Without a delivery finishing for this long, the bench gives up.
const STALLED_AFTER: Duration = Duration::from_secs(60);

const EVENT: &str = "BenchEvent";
const SINK_VAR: &str = "JADPO_BENCH_SINK_URL";
const NOOP_APP: &str = "// `jadpo bench`: one event, one subscriber whose action does nothing.
event BenchEvent { n: int }
action noop(n: int)
subscriber bench { on: BenchEvent  run: noop(event.n) }
";
const HTTP_APP: &str = r#"// `jadpo bench --http`: one event, one subscriber calling the local sink.
event BenchEvent { n: int }
connection sink { base_url: env("JADPO_BENCH_SINK_URL")  timeout: 30s  LIMITS }
action deliver(n: int) { call sink.post("/deliver/{n}", body: event) }
subscriber bench { on: BenchEvent  run: deliver(event.n)  timeout: 1m }
"#;

/// The HTTP app, its sink's connection limited to `rate` calls a second.
fn http_app(rate: Option<u64>) -> String {
    HTTP_APP.replace("LIMITS", &rate.map(|r| format!("rate: {r}/s")).unwrap_or_default())
}

/// What the flags ask for, checked.
#[derive(Debug, Clone)]
struct Settings {
    events: u64,
    concurrency: usize,
    rate: Option<u64>,
    /// `Some` with `--http`.
    latency: Option<Duration>,
    /// The sink connection's `rate:`, calls a second.
    connection_rate: Option<u64>,
    /// `--duration`: a soak of this length (`events` is rate × it).
    duration: Option<Duration>,
    report_every: Duration,
    retention: Option<Duration>,
    json: bool,
    keep: bool,
}

/// Set by SIGINT: the bench stops, and still removes its store.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> Result<(), CliError> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        return Err(CliError::environment("bench.interrupted", "interrupted"));
    }
    Ok(())
}

fn usage(code: &'static str, message: String) -> CliError {
    CliError::environment(code, message)
}

/// `500/s` or `500`: events per second, a whole number from 1.
fn parse_rate(text: &str) -> Result<u64, CliError> {
    let digits = text.trim().strip_suffix("/s").unwrap_or(text.trim());
    match digits.parse::<u64>() {
        Ok(r) if (1..=MAX_RATE).contains(&r) => Ok(r),
        _ => Err(usage(
            "bench.rate_invalid",
            format!("--rate {text:?}: events per second from 1 to {MAX_RATE}, such as 500/s"),
        )),
    }
}

/// `100/s` or `100`: the sink connection's calls per second, 1 to 10,000
/// (what `rate:` takes).
fn parse_connection_rate(text: &str) -> Result<u64, CliError> {
    let digits = text.trim().strip_suffix("/s").unwrap_or(text.trim());
    match digits.parse::<u64>() {
        Ok(r) if (1..=jadpo_core::limit::Rate::MAX_PER_SECOND).contains(&r) => Ok(r),
        _ => Err(usage(
            "bench.connection_rate_invalid",
            format!(
                "--connection-rate {text:?}: calls per second from 1 to {}, such as 100/s",
                jadpo_core::limit::Rate::MAX_PER_SECOND
            ),
        )),
    }
}

/// `50ms`, `1s`, `0`: at most [`MAX_LATENCY`].
fn parse_latency(text: &str) -> Result<Duration, CliError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let d = match (digits.parse::<u64>(), unit) {
        (Ok(n), "ms") => Some(Duration::from_millis(n)),
        (Ok(n), "s") => Some(Duration::from_secs(n)),
        (Ok(0), "") => Some(Duration::ZERO),
        _ => None,
    };
    d.filter(|d| *d <= MAX_LATENCY).ok_or_else(|| {
        usage(
            "bench.latency_invalid",
            format!("--latency {text:?}: a duration from 0s to 10s, such as 50ms or 1s"),
        )
    })
}

/// A `--duration` or `--report-every` within `min..=max`.
fn parse_span(flag: &str, text: &str, min: Duration, max: Duration) -> Result<Duration, CliError> {
    let code = if flag == "--duration" {
        "bench.duration_invalid"
    } else {
        "bench.report_every_invalid"
    };
    match super::retry::parse_duration(text) {
        Ok(d) if (min..=max).contains(&d) => Ok(d),
        _ => Err(usage(
            code,
            format!(
                "{flag} {text:?}: a duration from {} to {}, such as 30m",
                crate::output::duration_short(min),
                crate::output::duration_short(max)
            ),
        )),
    }
}

/// `--retention`: as `serve` takes it, and, the bench being short, down to
/// a second; `0` keeps everything (`None`).
fn parse_retention(text: &str) -> Result<Option<Duration>, CliError> {
    let seconds = super::retry::parse_duration(text)
        .ok()
        .filter(|d| d.subsec_nanos() == 0 && (d.is_zero() || d.as_secs() < 60));
    match seconds.map(Ok).unwrap_or_else(|| super::process::parse_retention(text)) {
        Ok(d) => Ok(Some(d).filter(|d| !d.is_zero())),
        Err(_) => Err(usage(
            "bench.retention_invalid",
            format!("--retention {text:?}: 0 (keep everything) or a duration from 1s to 3650d, such as 5m"),
        )),
    }
}

fn settings(args: &Args) -> Result<Settings, CliError> {
    let rate = args.rate.as_deref().map(parse_rate).transpose()?;
    let duration = args
        .duration
        .as_deref()
        .map(|d| parse_span("--duration", d, SOAK_MIN, SOAK_MAX))
        .transpose()?;
    let events = match (duration, rate) {
        (Some(d), Some(r)) => {
            let n = r.saturating_mul(d.as_secs());
            if n > SOAK_MAX_EVENTS {
                return Err(usage(
                    "bench.duration_invalid",
                    format!(
                        "--rate {r}/s for --duration {}s is {n} events: at most {SOAK_MAX_EVENTS}",
                        d.as_secs()
                    ),
                ));
            }
            n
        }
        _ => args.events,
    };
    let retention = args.retention.as_deref().map(parse_retention).transpose()?.flatten();
    if duration.is_none() && !(1..=MAX_EVENTS).contains(&args.events) {
        return Err(usage(
            "bench.events_invalid",
            format!("--events {}: from 1 to {MAX_EVENTS}", args.events),
        ));
    }
    if !(1..=MAX_CONCURRENCY).contains(&args.concurrency) {
        return Err(usage(
            "bench.concurrency_invalid",
            format!("--concurrency {}: from 1 to {MAX_CONCURRENCY}", args.concurrency),
        ));
    }
    let latency = match (&args.latency, args.http) {
        (Some(l), _) => Some(parse_latency(l)?),
        (None, true) => Some(Duration::ZERO),
        (None, false) => None,
    };
    Ok(Settings {
        events,
        concurrency: args.concurrency as usize,
        rate,
        latency,
        connection_rate: args.connection_rate.as_deref().map(parse_connection_rate).transpose()?,
        duration,
        report_every: args
            .report_every
            .as_deref()
            .map(|d| parse_span("--report-every", d, REPORT_MIN, REPORT_MAX))
            .transpose()?
            .unwrap_or(Duration::from_secs(60)),
        retention,
        json: args.json,
        keep: args.keep,
    })
}

/// Logs as `jadpo dev` prints them (warnings only unless `RUST_LOG` says
/// more), and the layer that sees deliveries finish, whatever is printed.
fn init_logs(finishes: Arc<Finishes>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{filter::Targets, EnvFilter, Layer};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let lines = Lines {
        format: Format::Human,
        out: Mutex::new(Box::new(std::io::stderr())),
    };
    let watch = Watch(finishes).with_filter(Targets::new().with_target(finishes::TARGET, tracing::Level::INFO));
    let _ = tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(watch)
        .try_init();
}

pub fn run(args: Args) -> ExitCode {
    let finishes = Finishes::new(Instant::now());
    init_logs(finishes.clone());
    output::run_async(async move {
        let s = settings(&args)?;
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                INTERRUPTED.store(true, Ordering::Relaxed);
            }
        });
        let scratch = Scratch::create(args.store.as_deref()).await?;
        let measured = measure_in(&scratch, &s, finishes).await;
        let url = scratch.url();
        if !s.keep {
            scratch.remove().await;
        }
        let mut report = measured?;
        report.kept = s.keep;
        report.store_url = url;
        if s.json {
            let mut line = serde_json::to_string(&report.json()).unwrap_or_default();
            line.push('\n');
            output::print(&line);
        } else {
            output::print(&report.human());
        }
        if report.all_succeeded() {
            Ok(ExitCode::SUCCESS)
        } else {
            Err(CliError::invalid(
                "bench.not_all_succeeded",
                format!(
                    "{} of {} deliveries succeeded (see the counts above)",
                    report.succeeded(),
                    s.events
                ),
            ))
        }
    })
}

async fn measure_in(scratch: &Scratch, s: &Settings, finishes: Arc<Finishes>) -> Result<Report, CliError> {
    let store = scratch.open().await?;
    let sink = match s.latency {
        Some(latency) => Some(sink::Sink::start(latency).await?),
        None => None,
    };
    let sink_url = sink.as_ref().map(sink::Sink::url);
    // A soak reads the store's size through a handle of its own.
    let reader = match s.duration {
        Some(_) => Some(scratch.open().await?),
        None => None,
    };
    let reader = reader.as_ref();
    let mut report = with_store!(store, |st| measure(st, s, sink_url.clone(), finishes, reader).await)?;
    report.store = scratch.kind();
    report.schema = scratch.schema().map(str::to_owned);
    if let (Some(sink), Some(url)) = (sink, sink_url) {
        report.sink_requests = Some(sink.requests());
        report.http_baseline_per_s = Some(sink::baseline(&url, s.events, s.concurrency).await?);
        sink.stop().await;
    }
    Ok(report)
}

fn noop() -> RustAction {
    Arc::new(|_, _| Box::pin(async { Ok(()) }))
}

fn bar(s: &Settings, len: u64, label: &str) -> ProgressBar {
    if s.json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let template = format!("{label:<8} {{bar:40}} {{human_pos}}/{{human_len}} {{elapsed}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

async fn measure<S: ScheduleStore>(
    store: S,
    s: &Settings,
    sink_url: Option<String>,
    finishes: Arc<Finishes>,
    reader: Option<&crate::store_url::AnyStore>,
) -> Result<Report, CliError> {
    let mut intervals = Vec::new();
    let builder = jadpo::builder()
        .env(move |k| if k == SINK_VAR { sink_url.clone() } else { None })
        .worker(WorkerConfig {
            name: worker_name("bench"),
            concurrency: s.concurrency,
            ..WorkerConfig::default()
        })
        .retention(s.retention.or(jadpo_runtime::TickConfig::default().retention));
    let builder = if s.latency.is_some() {
        builder.app_source("bench.jadpo", &http_app(s.connection_rate))
    } else {
        builder
            .app_source("bench.jadpo", NOOP_APP)
            .map(|b| b.action("noop", noop()))
    };
    let jadpo = builder
        .map_err(operator::start_error)?
        .build(store)
        .await
        .map_err(operator::start_error)?;
    let n = s.events;
    let (emit, started) = match s.rate {
        None => {
            let emit_bar = bar(s, n, "emit");
            let t = Instant::now();
            let mut sent = 0;
            while sent < n {
                interrupted()?;
                let k = CHUNK.min(n - sent);
                emit_chunk(&jadpo, &finishes, sent, k).await?;
                sent += k;
                emit_bar.inc(k);
            }
            let emit = t.elapsed();
            emit_bar.finish_and_clear();
            let started = Instant::now();
            let running = jadpo.start();
            let drain_bar = bar(s, n, "drain");
            let waited = wait(jadpo.store().as_ref(), &finishes, n, &drain_bar).await;
            running.stop().await;
            drain_bar.finish_and_clear();
            waited?;
            (emit, started)
        }
        Some(rate) => {
            let running = jadpo.start();
            // A soak's reports are its progress.
            let finish_bar = match reader {
                Some(_) => ProgressBar::hidden(),
                None => bar(s, n, "finished"),
            };
            let started = Instant::now();
            let done = AtomicBool::new(false);
            let draining = async {
                let result = tokio::try_join!(
                    emit_at(&jadpo, &finishes, n, rate),
                    wait(jadpo.store().as_ref(), &finishes, n, &finish_bar)
                );
                done.store(true, Ordering::Release);
                result
            };
            let reporting = async {
                match reader {
                    Some(r) => soak::report(r, &finishes, s.report_every, s.json, &done).await,
                    None => Ok(Vec::new()),
                }
            };
            let (result, reported) = tokio::join!(draining, reporting);
            running.stop().await;
            finish_bar.finish_and_clear();
            intervals = reported?;
            (result?.0, started)
        }
    };
    let peak_rss_bytes = report::peak_rss_bytes();
    // The drain ends at the last finish seen, else when the store said so.
    let end = finishes
        .last_finish()
        .unwrap_or_else(|| finishes.micros(Instant::now()));
    let drain = Duration::from_micros(end.saturating_sub(finishes.micros(started)));
    let p = finishes.percentiles(&[0.50, 0.99]);
    let counts = match s.retention {
        // Pruned rows are not counted: the finishes seen are.
        Some(_) => jadpo.store().counts().await.map_err(CliError::store)?,
        None => settled_counts(jadpo.store().as_ref(), n).await?,
    };
    Ok(Report {
        events: n,
        concurrency: s.concurrency,
        mode: if s.rate.is_some() { "rate" } else { "backlog" },
        rate_per_s: s.rate,
        subscriber: if s.latency.is_some() { "http" } else { "noop" },
        http_latency: s.latency,
        connection_rate: s.connection_rate,
        emit,
        drain,
        p50_ms: p.as_ref().map(|p| p[0]),
        p99_ms: p.as_ref().map(|p| p[1]),
        peak_rss_bytes,
        counts,
        seen_finished: finishes.count(),
        duration: s.duration,
        retention: s.retention,
        intervals,
        ..Report::default()
    })
}

/// Emits events `first..first + k` in one store emit; notes each
/// delivery's emit time (when the emit returned: committed).
async fn emit_chunk<S: ScheduleStore>(
    jadpo: &Jadpo<S>,
    finishes: &Finishes,
    first: u64,
    k: u64,
) -> Result<(), CliError> {
    let payloads: Vec<(&str, serde_json::Value)> = (first..first + k).map(|i| (EVENT, json!({ "n": i }))).collect();
    let out = jadpo.emit_many(&payloads).await.map_err(|e| match e {
        jadpo::EmitError::Store(e) => CliError::store(e),
        jadpo::EmitError::Event(e) => CliError::environment("bench.failed", e.to_string()),
    })?;
    finishes.emitted(
        out.iter().flat_map(|e| e.deliveries.iter().map(|d| d.0)),
        Instant::now(),
    );
    Ok(())
}

/// Emits `n` events at `rate` per second: each second's share as it comes
/// due, at most [`CHUNK`] per emit. Returns the time it took.
async fn emit_at<S: ScheduleStore>(
    jadpo: &Jadpo<S>,
    finishes: &Finishes,
    n: u64,
    rate: u64,
) -> Result<Duration, CliError> {
    let t = Instant::now();
    let mut sent = 0;
    while sent < n {
        interrupted()?;
        // Event i is due at i / rate seconds.
        let due = ((t.elapsed().as_secs_f64() * rate as f64) as u64 + 1).min(n);
        if due > sent {
            let k = (due - sent).min(CHUNK);
            emit_chunk(jadpo, finishes, sent, k).await?;
            sent += k;
        } else {
            let next = t + Duration::from_secs_f64(sent as f64 / rate as f64);
            tokio::time::sleep_until(next.into()).await;
        }
    }
    Ok(t.elapsed())
}

/// Finished deliveries in the store's counts, and whether any is left.
fn tally(counts: &std::collections::BTreeMap<DeliveryState, u64>) -> (u64, u64) {
    let done = counts.iter().filter(|(s, _)| s.is_finished()).map(|(_, n)| n).sum();
    let left = counts.iter().filter(|(s, _)| !s.is_finished()).map(|(_, n)| n).sum();
    (done, left)
}

/// Waits until `n` deliveries finished. The runtime's events say so as it
/// happens; the store is asked only when none arrived for a while (so a
/// runtime that logs differently still ends), and the bench gives up when
/// nothing at all moved for [`STALLED_AFTER`].
async fn wait<S: Store>(store: &S, finishes: &Finishes, n: u64, bar: &ProgressBar) -> Result<(), CliError> {
    let mut progress = (0u64, 0u64, Instant::now());
    let mut asked = Instant::now();
    loop {
        interrupted()?;
        let seen = finishes.count();
        bar.set_position(seen.min(n));
        if seen >= n {
            return Ok(());
        }
        if seen != progress.0 {
            progress = (seen, progress.1, Instant::now());
        } else if progress.2.elapsed() >= CONFIRM_AFTER && asked.elapsed() >= CONFIRM_AFTER {
            asked = Instant::now();
            let counts = store.counts().await.map_err(CliError::store)?;
            let (done, left) = tally(&counts);
            if done >= n && left == 0 {
                return Ok(());
            }
            if done != progress.1 {
                progress = (seen, done, Instant::now());
            } else if progress.2.elapsed() >= STALLED_AFTER {
                return Err(CliError::environment(
                    "bench.stalled",
                    format!(
                        "no delivery finished for {}s: {done} of {n} finished, {left} not yet",
                        STALLED_AFTER.as_secs()
                    ),
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The store's counts once every delivery shows finished there (at once,
/// unless the in-process signal ran ahead of it).
async fn settled_counts<S: Store>(
    store: &S,
    n: u64,
) -> Result<std::collections::BTreeMap<DeliveryState, u64>, CliError> {
    let deadline = Instant::now() + CONFIRM_AFTER;
    loop {
        let counts = store.counts().await.map_err(CliError::store)?;
        let (done, left) = tally(&counts);
        if (done >= n && left == 0) || Instant::now() >= deadline {
            return Ok(counts);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_latencies_are_read_or_refused_with_a_code() {
        assert_eq!(parse_rate("500/s").unwrap(), 500);
        assert_eq!(parse_rate("7").unwrap(), 7);
        for bad in ["0/s", "0", "-1/s", "fast", "1.5/s", "10/m"] {
            assert_eq!(parse_rate(bad).unwrap_err().code, "bench.rate_invalid", "{bad}");
        }
        assert_eq!(parse_connection_rate("100/s").unwrap(), 100);
        for bad in ["0/s", "10001/s", "x"] {
            assert_eq!(
                parse_connection_rate(bad).unwrap_err().code,
                "bench.connection_rate_invalid",
                "{bad}"
            );
        }
        assert!(http_app(Some(100)).contains("rate: 100/s"));
        assert!(!http_app(None).contains("rate:"));
        assert_eq!(parse_latency("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_latency("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_latency("0").unwrap(), Duration::ZERO);
        for bad in ["11s", "50", "soon", "1m"] {
            assert_eq!(parse_latency(bad).unwrap_err().code, "bench.latency_invalid", "{bad}");
        }
        let secs = |n: u64| Some(Duration::from_secs(n));
        for (text, keep) in [
            ("2s", secs(2)),
            ("5m", secs(300)),
            ("7d", secs(7 * 86_400)),
            ("0", None),
        ] {
            assert_eq!(parse_retention(text).unwrap(), keep, "{text}");
        }
        for bad in ["500ms", "soon", "-1s", "3651d"] {
            assert_eq!(
                parse_retention(bad).unwrap_err().code,
                "bench.retention_invalid",
                "{bad}"
            );
        }
        let minute = Duration::from_secs(60);
        assert_eq!(
            parse_span("--duration", "30m", SOAK_MIN, SOAK_MAX).unwrap(),
            minute * 30
        );
        for bad in ["5s", "25h", "x"] {
            assert_eq!(
                parse_span("--duration", bad, SOAK_MIN, SOAK_MAX).unwrap_err().code,
                "bench.duration_invalid",
                "{bad}"
            );
        }
        assert_eq!(
            parse_span("--report-every", "2h", REPORT_MIN, REPORT_MAX)
                .unwrap_err()
                .code,
            "bench.report_every_invalid"
        );
    }

    #[test]
    fn the_bench_apps_are_valid() {
        for app in [NOOP_APP.to_owned(), http_app(None), http_app(Some(100))] {
            jadpo::check_app("bench.jadpo", &app).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
