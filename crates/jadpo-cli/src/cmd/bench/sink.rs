//! `--http`: a local HTTP sink (axum on 127.0.0.1, a port of its own) that
//! answers every request 200 after `--latency`, and the baseline: a plain
//! reqwest loop of the same concurrency sending the same requests to it,
//! the fastest the engine could go over the same HTTP.

use crate::output::CliError;
use axum::http::StatusCode;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running sink; stopped when dropped.
pub(super) struct Sink {
    pub addr: SocketAddr,
    requests: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Sink {
    pub(super) async fn start(latency: Duration) -> Result<Sink, CliError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| CliError::environment("bench.sink_failed", format!("cannot listen on 127.0.0.1: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CliError::environment("bench.sink_failed", format!("the sink's address: {e}")))?;
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        let router = axum::Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                counted.fetch_add(1, Ordering::Relaxed);
                StatusCode::OK
            }
        });
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await;
        });
        Ok(Sink {
            addr,
            requests,
            stop,
            task: Some(task),
        })
    }

    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests answered so far.
    pub(super) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(super) async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Sends `n` POSTs with a small JSON body to the sink, `concurrency` at a
/// time, as the engine's deliveries do; returns requests per second.
pub(super) async fn baseline(url: &str, n: u64, concurrency: usize) -> Result<f64, CliError> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| CliError::environment("bench.sink_failed", format!("HTTP client: {e}")))?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(usize::try_from(n).unwrap_or(usize::MAX)) {
        let (client, next, url) = (client.clone(), next.clone(), url.to_owned());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok(());
                }
                let body = format!("{{\"n\":{i}}}");
                let answer = client
                    .post(format!("{url}/deliver/{i}"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| format!("baseline request: {e}"))?;
                if !answer.status().is_success() {
                    return Err(format!("baseline request: the sink answered {}", answer.status()));
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(why)) => return Err(CliError::environment("bench.sink_failed", why)),
            Err(e) => {
                return Err(CliError::environment(
                    "bench.sink_failed",
                    format!("baseline task: {e}"),
                ))
            }
        }
    }
    Ok(n as f64 / started.elapsed().as_secs_f64().max(1e-9))
}
