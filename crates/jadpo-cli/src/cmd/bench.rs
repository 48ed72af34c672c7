//! `jadpo bench`: the real engine (the workers, the completer and the tick
//! `jadpo serve` runs) draining deliveries to a subscriber that does nothing,
//! with `--http` to a local HTTP sink over real HTTP, or with `--driver` to
//! a broker (`broker.rs`), timed.
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
//! end unless `--keep`. Its flags and their checks are `settings.rs`. See
//! docs/cli.md.

mod broker;
mod finishes;
mod histogram;
mod hot;
mod report;
mod scratch;
mod settings;
mod sink;
mod soak;

use crate::cmd::worker_name;
use crate::operator;
use crate::output::{self, CliError};
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
pub(crate) use settings::Args;
use settings::Settings;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Events per store emit in `--backlog`, and at most per emit at a rate.
const CHUNK: u64 = 1_000;
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

/// An app with `key: event.k` on its subscriber and `k` on its event, for
/// `--keys`, with `rule` (`--order`, `--concurrency-per-key`).
fn keyed(app: &str, rule: Option<jadpo_core::key_rule::KeyRule>) -> String {
    use jadpo_core::key_rule::KeyRule;
    let rule = match rule {
        None => String::new(),
        Some(KeyRule::Fifo) => "order: fifo ".into(),
        Some(KeyRule::Strict) => "order: strict ".into(),
        Some(KeyRule::Cap(n)) => format!("concurrency_per_key: {n} "),
    };
    app.replace("event BenchEvent { n: int }", "event BenchEvent { n: int  k: int }")
        .replace(
            "subscriber bench { on: BenchEvent ",
            &format!("subscriber bench {{ on: BenchEvent  key: event.k  {rule}"),
        )
}

/// The HTTP app, its sink's connection limited to `rate` calls a second.
fn http_app(rate: Option<u64>) -> String {
    HTTP_APP.replace("LIMITS", &rate.map(|r| format!("rate: {r}/s")).unwrap_or_default())
}

/// Set by SIGINT: the bench stops, and still removes its store.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> Result<(), CliError> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        return Err(CliError::environment("bench.interrupted", "interrupted"));
    }
    Ok(())
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

pub(crate) fn run(args: Args) -> ExitCode {
    let finishes = Finishes::new(Instant::now());
    init_logs(finishes.clone());
    output::run_async(async move {
        let mut s = settings::check(&args)?;
        let export = crate::otel::Export::from_env()?;
        if let Some(export) = &export {
            s.spans = export.spans();
        }
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
        if let Some(export) = export {
            export.stop().await;
            report.spans = Some(crate::otel::counts());
        }
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
    let target = match &s.broker {
        Some((broker, url)) => Some(broker::Target::make(*broker, url).await?),
        None => None,
    };
    let sink_url = sink.as_ref().map(sink::Sink::url);
    // A soak reads the store's size through a handle of its own.
    let reader = match s.duration {
        Some(_) => Some(scratch.open().await?),
        None => None,
    };
    let reader = reader.as_ref();
    let measured = measure(store, s, sink_url.clone(), target.as_ref(), finishes, reader).await;
    let mut report = match (measured, &target) {
        (Ok(report), _) => report,
        (Err(e), Some(target)) => {
            target.remove().await;
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    };
    if let Some(target) = &target {
        let baseline = target.baseline(s.events, s.concurrency).await;
        target.remove().await;
        report.broker_baseline_per_s = Some(baseline?);
        report.driver = s.broker.as_ref().map(|(b, _)| b.name());
    }
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
    target: Option<&broker::Target>,
    finishes: Arc<Finishes>,
    reader: Option<&crate::store_url::AnyStore>,
) -> Result<Report, CliError> {
    let others = s.hot_key.then(|| hot::Others::new(s.events, s.keys.unwrap_or(2)));
    let jadpo = build_engine(store, s, sink_url, target, others.as_ref()).await?;
    let n = s.events;
    let Run {
        emit,
        started,
        intervals,
        others_started,
    } = match s.rate {
        None => drain_backlog(&jadpo, s, &finishes, others.as_deref()).await?,
        Some(rate) => deliver_at_rate(&jadpo, s, &finishes, rate, reader).await?,
    };
    let peak_rss_bytes = report::peak_rss_bytes();
    // The drain ends at the last finish seen, else when the store said so.
    let end = finishes
        .last_finish()
        .unwrap_or_else(|| finishes.micros(Instant::now()));
    let drain = others_started.unwrap_or(Duration::from_micros(end.saturating_sub(finishes.micros(started))));
    let p = finishes.percentiles(&[0.50, 0.99]);
    let counts = match (s.retention, others_started) {
        // Pruned rows are not counted, nor is a hot key's backlog left
        // undrained waited for: the finishes seen are.
        (Some(_), _) | (_, Some(_)) => jadpo.store().counts().await.map_err(CliError::store)?,
        (None, None) => settled_counts(jadpo.store().as_ref(), n).await?,
    };
    Ok(Report {
        events: n,
        concurrency: s.concurrency,
        mode: if s.rate.is_some() { "rate" } else { "backlog" },
        rate_per_s: s.rate,
        subscriber: match (s.latency, &s.broker) {
            (Some(_), _) => "http",
            (None, Some(_)) => "publish",
            (None, None) => "noop",
        },
        http_latency: s.latency,
        connection_rate: s.connection_rate,
        keys: s.keys,
        order: s.key_rule.map(jadpo_core::key_rule::KeyRule::stored),
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
        others_started,
        ..Report::default()
    })
}

/// The engine `jadpo serve` would run, on the bench's app: the HTTP one
/// when there is a sink to deliver to, else the one whose action does nothing.
async fn build_engine<S: ScheduleStore>(
    store: S,
    s: &Settings,
    sink_url: Option<String>,
    target: Option<&broker::Target>,
    others: Option<&Arc<hot::Others>>,
) -> Result<Jadpo<S>, CliError> {
    let broker_url = s.broker.as_ref().map(|(_, url)| url.clone());
    let builder = jadpo::builder()
        .env(move |k| match k {
            SINK_VAR => sink_url.clone(),
            broker::URL_VAR => broker_url.clone(),
            _ => None,
        })
        .worker(WorkerConfig {
            name: worker_name("bench"),
            concurrency: s.concurrency,
            ..WorkerConfig::default()
        })
        .spans(s.spans.clone())
        .retention(s.retention.or(jadpo_runtime::TickConfig::default().retention));
    let key = |app: String| if s.keys.is_some() { keyed(&app, s.key_rule) } else { app };
    let builder = if let Some(target) = target {
        builder.app_source("bench.jadpo", &key(target.app()))
    } else if s.latency.is_some() {
        builder.app_source("bench.jadpo", &key(http_app(s.connection_rate)))
    } else {
        builder
            .app_source("bench.jadpo", &key(NOOP_APP.to_owned()))
            .map(|b| b.action("noop", others.map_or_else(noop, |o| o.action())))
    };
    builder
        .map_err(operator::start_error)?
        .build(store)
        .await
        .map_err(operator::start_error)
}

/// What one run of the engine gives the report: how long emitting took,
/// when the drain's clock started, and a soak's intervals.
struct Run {
    emit: Duration,
    started: Instant,
    intervals: Vec<soak::Interval>,
    /// `--hot-key`: how long until every other key's delivery started.
    others_started: Option<Duration>,
}

/// `--backlog`: every event is emitted before the engine starts, so the
/// drain is timed on its own.
async fn drain_backlog<S: ScheduleStore>(
    jadpo: &Jadpo<S>,
    s: &Settings,
    finishes: &Finishes,
    others: Option<&hot::Others>,
) -> Result<Run, CliError> {
    let n = s.events;
    let emit_bar = bar(s, n, "emit");
    let t = Instant::now();
    let mut sent = 0;
    while sent < n {
        interrupted()?;
        let k = CHUNK.min(n - sent);
        emit_chunk(jadpo, finishes, sent, k, s).await?;
        sent += k;
        emit_bar.inc(k);
    }
    let emit = t.elapsed();
    emit_bar.finish_and_clear();
    let started = Instant::now();
    let running = jadpo.start();
    if let Some(others) = others {
        let took = others.wait(started).await;
        running.stop().await;
        return Ok(Run {
            emit,
            started,
            intervals: Vec::new(),
            others_started: Some(took?),
        });
    }
    let drain_bar = bar(s, n, "drain");
    let waited = wait(jadpo.store().as_ref(), finishes, n, &drain_bar).await;
    running.stop().await;
    drain_bar.finish_and_clear();
    waited?;
    Ok(Run {
        emit,
        started,
        intervals: Vec::new(),
        others_started: None,
    })
}

/// `--rate`: the engine runs while events are emitted at the rate; with a
/// reader (a soak), the store's size is reported every interval meanwhile.
async fn deliver_at_rate<S: ScheduleStore>(
    jadpo: &Jadpo<S>,
    s: &Settings,
    finishes: &Finishes,
    rate: u64,
    reader: Option<&crate::store_url::AnyStore>,
) -> Result<Run, CliError> {
    let n = s.events;
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
            emit_at(jadpo, finishes, rate, s),
            wait(jadpo.store().as_ref(), finishes, n, &finish_bar)
        );
        done.store(true, Ordering::Release);
        result
    };
    let reporting = async {
        match reader {
            Some(r) => soak::report(r, finishes, s.report_every, s.json, &done).await,
            None => Ok(Vec::new()),
        }
    };
    let (result, reported) = tokio::join!(draining, reporting);
    running.stop().await;
    finish_bar.finish_and_clear();
    // A failed soak report is the error to show, before a failed drain's.
    let intervals = reported?;
    Ok(Run {
        emit: result?.0,
        started,
        intervals,
        others_started: None,
    })
}

/// Emits events `first..first + k` in one store emit; notes each
/// delivery's emit time (when the emit returned: committed).
async fn emit_chunk<S: ScheduleStore>(
    jadpo: &Jadpo<S>,
    finishes: &Finishes,
    first: u64,
    k: u64,
    s: &Settings,
) -> Result<(), CliError> {
    let payloads: Vec<(&str, serde_json::Value)> = (first..first + k)
        .map(|i| match s.key_of(i) {
            Some(key) => (EVENT, json!({ "n": i, "k": key })),
            None => (EVENT, json!({ "n": i })),
        })
        .collect();
    let out = jadpo.emit_many(&payloads).await.map_err(|e| match e {
        jadpo::EmitError::Store(e) => CliError::store(e),
        jadpo::EmitError::Event(e) => CliError::environment("bench.failed", e.to_string()),
        e => CliError::environment(e.code(), e.to_string()),
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
    rate: u64,
    s: &Settings,
) -> Result<Duration, CliError> {
    let n = s.events;
    let t = Instant::now();
    let mut sent = 0;
    while sent < n {
        interrupted()?;
        // Event i is due at i / rate seconds.
        let due = ((t.elapsed().as_secs_f64() * rate as f64) as u64 + 1).min(n);
        if due > sent {
            let k = (due - sent).min(CHUNK);
            emit_chunk(jadpo, finishes, sent, k, s).await?;
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
    fn the_bench_apps_are_valid() {
        assert!(http_app(Some(100)).contains("rate: 100/s"));
        assert!(!http_app(None).contains("rate:"));
        for app in [NOOP_APP.to_owned(), http_app(None), http_app(Some(100))] {
            jadpo::check_app("bench.jadpo", &app).unwrap_or_else(|e| panic!("{e}"));
            use jadpo_core::key_rule::KeyRule;
            for rule in [None, Some(KeyRule::Fifo), Some(KeyRule::Strict), Some(KeyRule::Cap(3))] {
                let keyed = keyed(&app, rule);
                let checked = jadpo::check_app("bench.jadpo", &keyed).unwrap_or_else(|e| panic!("{e}"));
                let bench = &checked.subscribers["bench"];
                assert_eq!(bench.key, Some(vec!["k".to_string()]), "{keyed}");
                assert_eq!(bench.key_rule, rule, "{keyed}");
            }
        }
    }
}
