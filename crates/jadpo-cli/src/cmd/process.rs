//! One Jadpo process, as `jadpo dev` and `jadpo serve` run it: the workers,
//! the tick and the HTTP API, until SIGINT or SIGTERM; then a graceful stop.

use crate::api;
use crate::operator;
use crate::output::CliError;
use jadpo_store::ScheduleStore;
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::sync::watch;

pub struct Process {
    /// Every setting checked already: only the store is left.
    pub ready: jadpo::Ready,
    pub addr: SocketAddr,
    pub token: Option<String>,
}

/// How `dev` and `serve` run their workers.
pub struct Workers {
    /// `dev` or `serve`: the lease owner's name begins with it.
    pub mode: &'static str,
    pub concurrency: u32,
    pub poll: std::time::Duration,
    /// 0 keeps finished deliveries.
    pub retention_days: u32,
}

/// Checks every setting of `app` before any store is opened or anything
/// logged, so a start that fails leaves nothing behind.
pub fn ready(app: jadpo_lang::App, clock: jadpo_runtime::SharedClock, w: Workers) -> Result<jadpo::Ready, CliError> {
    jadpo::builder()
        .app(app)
        .clock(clock)
        .worker(jadpo_runtime::WorkerConfig {
            name: super::dev::worker_name(w.mode),
            concurrency: w.concurrency as usize,
            poll: w.poll,
            retention: (w.retention_days > 0)
                .then(|| std::time::Duration::from_secs(u64::from(w.retention_days) * 86_400)),
            ..jadpo_runtime::WorkerConfig::default()
        })
        .ready()
        .map_err(operator::start_error)
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

pub async fn run<S: ScheduleStore>(p: Process, store: S) -> Result<ExitCode, CliError> {
    let jadpo = p.ready.build(store).await.map_err(operator::start_error)?;
    let listener = tokio::net::TcpListener::bind(p.addr)
        .await
        .map_err(|e| CliError::environment("api.bind_failed", format!("cannot listen on {}: {e}", p.addr)))?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| p.addr.to_string());
    tracing::info!(addr = %addr, "api.listening");
    let running = jadpo.start();
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let router = api::router(jadpo.clone(), p.token, p.addr.ip().is_loopback());
    let server = tokio::spawn(api::serve(listener, router, async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    }));
    stop_signal().await;
    tracing::info!("process.stopping");
    let _ = stop_tx.send(true);
    // Claim nothing more; running deliveries finish within their limit.
    running.stop().await;
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "api.stopped_with_error"),
        Err(e) => tracing::warn!(error = %e, "api.panicked"),
    }
    tracing::info!("process.stopped");
    Ok(ExitCode::SUCCESS)
}
