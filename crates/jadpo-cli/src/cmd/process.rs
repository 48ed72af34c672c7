//! One Jadpo process, as `jadpo dev` and `jadpo serve` run it: the workers,
//! the tick and the HTTP API, until SIGINT or SIGTERM; then a graceful stop.
//!
//! An app with several `store` blocks is worked whole by each process: one
//! engine per store (its own claim loop, tick, breakers and alerts), the
//! app's schedules with the first store only.

use crate::http;
use crate::operator;
use crate::output::CliError;
use crate::store_url;
use jadpo::Jadpo;
use jadpo_core::clock::Wanted;
use jadpo_store::AnyStore;
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::sync::watch;

pub(crate) struct Process {
    /// Every setting checked already, once per store: only the stores are
    /// left. The first is the default.
    pub ready: Vec<(String, jadpo::Ready)>,
    pub addr: SocketAddr,
    pub token: Option<String>,
    pub limits: http::server::Limits,
    /// Logs `dev.started` or `serve.started` once every store is open, its
    /// clock known (`clock` names it: `real time`, or `scaled 600x since
    /// ...`) and the API listening on the address given (the port chosen
    /// for `--port 0`), so a start that fails logs nothing.
    pub started: Started,
    /// The spans' export, flushed at the stop.
    pub export: Option<crate::otel::Export>,
}

/// What [`Process::started`] runs, once.
pub(crate) type Started = Box<dyn FnOnce(&Clocks, SocketAddr) + Send>;

/// Each store's clock, as a start found it.
pub(crate) struct Clocks(pub Vec<(String, jadpo_runtime::SharedClock)>);

impl Clocks {
    /// Whether any store runs on a scaled clock.
    pub(crate) fn any_scaled(&self) -> bool {
        self.0.iter().any(|(_, c)| c.anchor().is_some())
    }

    /// `real time`, `scaled 600x since 2026-12-02T04:16:24Z`, or with several
    /// stores whose clocks differ, each store's by name.
    pub(crate) fn describe(&self) -> String {
        let text = |c: &jadpo_runtime::SharedClock| {
            c.anchor()
                .map_or_else(|| "real time".to_owned(), |a| jadpo_runtime::clock::anchor_text(&a))
        };
        let texts: Vec<String> = self.0.iter().map(|(_, c)| text(c)).collect();
        if texts.windows(2).all(|w| w[0] == w[1]) {
            return texts.into_iter().next().unwrap_or_else(|| "real time".into());
        }
        let named: Vec<String> = self
            .0
            .iter()
            .zip(texts)
            .map(|((n, _), t)| format!("{n}: {t}"))
            .collect();
        named.join(", ")
    }
}

/// The HTTP server's limits, the same flags for `dev` and `serve`
/// (docs/security.md, "Limits and timeouts").
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct EdgeArgs {
    /// A request's headers must arrive within this long of its first byte
    /// (or of the connection's opening), else the connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_edge_duration)]
    pub header_timeout: std::time::Duration,
    /// A request's body must arrive within this long of its headers, else
    /// 408 `request.timeout`.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_edge_duration)]
    pub body_timeout: std::time::Duration,
    /// A keep-alive connection with no request under way is closed after
    /// this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_edge_duration)]
    pub idle_timeout: std::time::Duration,
    /// Connections open at once; more wait until one closes.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// On SIGINT or SIGTERM, requests under way get this long to finish;
    /// then they are cut off.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_shutdown_duration)]
    pub shutdown_timeout: std::time::Duration,
}

impl EdgeArgs {
    pub(crate) fn limits(&self) -> http::server::Limits {
        http::server::Limits {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections as usize,
            shutdown_timeout: self.shutdown_timeout,
            ..http::server::Limits::default()
        }
    }
}

/// A timeout from 100 ms to 1 h, written as `10s`, `500ms` or `2m`.
fn parse_edge_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = super::parse_duration(s)?;
    if d < std::time::Duration::from_millis(100) || d > std::time::Duration::from_secs(3600) {
        return Err(format!("{s:?}: a timeout is from 100ms to 1h"));
    }
    Ok(d)
}

/// As [`parse_edge_duration`], and `0s` too: stop without waiting.
fn parse_shutdown_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = super::parse_duration(s)?;
    if d > std::time::Duration::from_secs(3600) {
        return Err(format!("{s:?}: the shutdown timeout is at most 1h"));
    }
    Ok(d)
}

/// How `dev` and `serve` run their workers.
#[derive(Clone)]
pub(crate) struct Workers {
    /// `dev` or `serve`: the lease owner's name begins with it.
    pub mode: &'static str,
    pub concurrency: u32,
    pub poll: std::time::Duration,
    /// How long finished deliveries are kept; `None` keeps them.
    pub retention: Option<std::time::Duration>,
    /// Where spans go: the OTLP export, when the environment asks for one.
    pub spans: jadpo::Spans,
}

/// `--retention DURATION`: `30m`, `12h`, `7d` (minutes to ten years), or
/// `0`, which keeps finished deliveries.
pub(crate) fn parse_retention(s: &str) -> Result<std::time::Duration, String> {
    const MINUTE: u64 = 60;
    const MOST: u64 = 3650 * 86_400;
    let t = s.trim();
    let d = match t.strip_suffix('d') {
        Some(days) => {
            let n: u64 = days
                .parse()
                .map_err(|_| format!("{s:?} is not a duration such as 30m, 12h or 7d"))?;
            std::time::Duration::from_secs(n.saturating_mul(86_400))
        }
        None => super::parse_duration(t)?,
    };
    let secs = d.as_secs();
    if d.is_zero() {
        return Ok(d);
    }
    if !(MINUTE..=MOST).contains(&secs) || d.subsec_nanos() != 0 {
        return Err(format!("{s:?}: retention is 0 (keep everything) or from 1m to 3650d"));
    }
    Ok(d)
}

/// The retention `dev` and `serve` run with: `--retention` if given, else
/// `--retention-days`; zero keeps everything.
pub(crate) fn retention(given: Option<std::time::Duration>, days: u32) -> Option<std::time::Duration> {
    let d = given.unwrap_or(std::time::Duration::from_secs(u64::from(days) * 86_400));
    (!d.is_zero()).then_some(d)
}

/// Checks every setting of `app` before any store is opened or anything
/// logged, so a start that fails leaves nothing behind.
pub(crate) fn ready(app: jadpo_lang::App, time: Wanted, w: Workers) -> Result<jadpo::Ready, CliError> {
    let builder = jadpo::builder().app(app);
    let builder = match time {
        Wanted::Store => builder,
        Wanted::Scale(n) => builder.time_scale(n),
        Wanted::Real => builder.real_time(),
    };
    builder
        .worker(jadpo_runtime::WorkerConfig {
            name: super::worker_name(w.mode),
            concurrency: w.concurrency as usize,
            poll: w.poll,
            ..jadpo_runtime::WorkerConfig::default()
        })
        .tick(jadpo_runtime::TickConfig { retention: w.retention })
        .spans(w.spans)
        .ready()
        .map_err(operator::start_error)
}

/// [`ready`] once per store.
pub(crate) fn ready_each(
    app: &jadpo_lang::App,
    stores: &[store_url::Named],
    time: Wanted,
    w: &Workers,
) -> Result<Vec<(String, jadpo::Ready)>, CliError> {
    stores
        .iter()
        .map(|s| Ok((s.name.clone(), ready(app.clone(), time, w.clone())?)))
        .collect()
}

/// Resolves when the process is asked to stop.
async fn stop_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// Opens every store (in order, all before anything runs) and builds its
/// engine.
pub(crate) async fn open_all(
    ready: Vec<(String, jadpo::Ready)>,
    stores: &[store_url::Named],
) -> Result<Vec<(String, Jadpo<AnyStore>)>, CliError> {
    let mut built = Vec::with_capacity(ready.len());
    for (i, ((name, ready), named)) in ready.into_iter().zip(stores).enumerate() {
        let store = store_url::open(&named.url).await?;
        let ready = if i == 0 { ready } else { ready.without_schedules() };
        built.push((name, ready.build(store).await.map_err(operator::start_error)?));
    }
    Ok(built)
}

pub(crate) async fn run(p: Process, stores: &[store_url::Named]) -> Result<ExitCode, CliError> {
    let export = p.export;
    let jadpos = open_all(p.ready, stores).await?;
    let listener = tokio::net::TcpListener::bind(p.addr)
        .await
        .map_err(|e| CliError::environment("api.bind_failed", format!("cannot listen on {}: {e}", p.addr)))?;
    let bound = listener.local_addr().unwrap_or(p.addr);
    let addr = bound.to_string();
    let clocks = Clocks(jadpos.iter().map(|(n, j)| (n.clone(), j.clock().clone())).collect());
    (p.started)(&clocks, bound);
    tracing::info!(addr = %addr, "api.listening");
    // Each engine logs in a span naming its store: `/metrics` counts each
    // store's events apart by it.
    let running: Vec<_> = jadpos
        .iter()
        .map(|(name, j)| tracing::info_span!("engine", store = %name).in_scope(|| j.start()))
        .collect();
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let router = http::router_of_stores(jadpos.clone(), p.token, p.addr.ip().is_loopback(), &p.limits);
    let server = tokio::spawn(http::server::serve(listener, router, p.limits, async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    }));
    stop_signal().await;
    tracing::info!("process.stopping");
    let _ = stop_tx.send(true);
    // Claim nothing more; running deliveries finish within their limit.
    // Every store's engine at once, so none claims while another stops.
    let stopping: Vec<_> = running.into_iter().map(|r| tokio::spawn(r.stop())).collect();
    for s in stopping {
        let _ = s.await;
    }
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "api.stopped_with_error"),
        Err(e) => tracing::warn!(error = %e, "api.panicked"),
    }
    if let Some(export) = export {
        export.stop().await;
    }
    tracing::info!("process.stopped");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn retention_is_zero_or_minutes_to_ten_years() {
        let ok = [
            ("0", 0),
            ("1m", 60),
            ("90m", 5_400),
            ("12h", 43_200),
            ("7d", 604_800),
            ("3650d", 315_360_000),
        ];
        for (text, secs) in ok {
            assert_eq!(parse_retention(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        for bad in ["30s", "59s", "500ms", "3651d", "d", "7w", "-1d", "1.5h", ""] {
            assert!(parse_retention(bad).is_err(), "{bad}");
        }
        assert_eq!(retention(None, 30), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(retention(None, 0), None);
        assert_eq!(
            retention(Some(Duration::ZERO), 30),
            None,
            "--retention 0 keeps everything"
        );
        assert_eq!(
            retention(Some(Duration::from_secs(300)), 30),
            Some(Duration::from_secs(300))
        );
    }
}
