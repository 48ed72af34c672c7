//! The HTTP server under the API: accepts connections and bounds what each
//! client may hold (docs/security.md, "Limits and timeouts").
//!
//! `axum::serve` has no timeouts and no cap on connections, so a client that
//! sends half a request line, or opens a thousand idle sockets, keeps the
//! server's file descriptors until it leaves. This loop is hyper's HTTP/1.1
//! with the limits Jadpo needs:
//!
//! - a request's headers must arrive within `header_timeout` of its first
//!   byte, or of the connection's opening (a slow-loris trickle does not
//!   reset it);
//! - a keep-alive connection waiting for its next request is closed after
//!   `idle_timeout`;
//! - at most `max_connections` are open; further clients wait in the
//!   listen backlog until one closes (an accept that fails, as when file
//!   descriptors run out, is logged and retried, never fatal);
//! - a stop closes idle connections at once and waits at most
//!   `shutdown_timeout` for requests under way.
//!
//! The body's own limit and timeout are [`super::checks`]'s: they need the
//! route to choose a code.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

/// What one client may hold. The defaults are documented in docs/cli.md and
/// docs/security.md; `dev` and `serve` take each as a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// From a request's first byte to the end of its headers.
    pub header_timeout: Duration,
    /// From the end of the headers to the end of the body.
    pub body_timeout: Duration,
    /// A keep-alive connection with no request under way.
    pub idle_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long a stop waits for requests under way.
    pub shutdown_timeout: Duration,
    /// After a few wrong tokens from one address, its first wait; it
    /// doubles with each further one (docs/security.md, "Guessing the
    /// token"). Not a flag: [`super::throttle::FIRST_WAIT`] but in tests.
    pub throttle_first_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 512,
            shutdown_timeout: Duration::from_secs(10),
            throttle_first_wait: super::throttle::FIRST_WAIT,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown`
/// completes; then closes idle connections, waits at most
/// `shutdown_timeout` for the requests under way, and drops the rest.
/// Every request carries its client's address as [`ConnectInfo`].
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    assert!(
        limits.max_connections > 0,
        "a server that takes no connection serves nothing"
    );
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (drain_tx, drain_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and its kind are passing: connections close, the
                // descriptors come back. Pause so the loop does not spin.
                tracing::warn!(error = %e, "api.accept_failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let router = router.clone();
        let drain = drain_rx.clone();
        connections.spawn(async move {
            connection(stream, peer, router, limits, drain).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = drain_tx.send(true);
    let waited = tokio::time::timeout(limits.shutdown_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if waited.is_err() {
        tracing::warn!(
            connections = connections.len(),
            timeout_ms = limits.shutdown_timeout.as_millis() as u64,
            "api.shutdown_timed_out: requests still under way were cut off"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// One client's connection, until it closes, its watch runs out, or a
/// drain lets it finish the request under way.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    limits: Limits,
    mut drain: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let phase = Arc::new(Watch::new());
    let io = hyper_util::rt::TokioIo::new(Watched {
        inner: stream,
        phase: phase.clone(),
    });
    let on_request = phase.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let busy = Busy::begin(on_request.clone());
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await;
            // The request ends when hyper has written (or dropped) the body.
            response.map(|r| r.map(|body| Body::new(Tracked { body, _busy: busy })))
        }
    });
    // hyper's own header timeout starts when it waits for a request, idle
    // or not, so it cannot tell idle from slow: the watch below does both.
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let expired = phase.expired(limits);
    tokio::pin!(expired);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = &mut expired => return,
        _ = drain.wait_for(|d| *d) => conn.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        _ = conn => {}
        () = expired => {}
    }
}

/// Where a connection is between requests, for its timeouts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// No request under way and none begun, since then.
    Idle(Instant),
    /// A request's first bytes came at this instant; its headers have not.
    Head(Instant),
    /// This many requests are being answered.
    Busy(usize),
}

/// A connection's [`Phase`], shared by its reads, its requests and the
/// timer that closes it.
struct Watch {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            // A new connection owes its first request's headers at once:
            // sockets opened and left silent are a way to hold the server.
            phase: Mutex::new(Phase::Head(Instant::now())),
            changed: Notify::new(),
        }
    }

    fn set(&self, f: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        let next = f(*phase);
        if next != *phase {
            *phase = next;
            self.changed.notify_one();
        }
    }

    /// Bytes came in: between requests, that begins one.
    fn read_some(&self) {
        self.set(|p| match p {
            Phase::Idle(_) => Phase::Head(Instant::now()),
            other => other,
        });
    }

    /// Completes when the connection has been idle or in its headers for
    /// too long.
    async fn expired(&self, limits: Limits) {
        loop {
            let changed = self.changed.notified();
            let phase = *self.phase.lock().unwrap_or_else(|p| p.into_inner());
            let deadline = match phase {
                Phase::Idle(since) => Some(since + limits.idle_timeout),
                Phase::Head(since) => Some(since + limits.header_timeout),
                Phase::Busy(_) => None,
            };
            match deadline {
                Some(at) if at <= Instant::now() => return,
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// One request under way on a connection; its drop ends it.
struct Busy(Arc<Watch>);

impl Busy {
    fn begin(watch: Arc<Watch>) -> Busy {
        watch.set(|p| match p {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Idle(_) | Phase::Head(_) => Phase::Busy(1),
        });
        Busy(watch)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.set(|p| match p {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        });
    }
}

/// A response body that ends its request when it is done with.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling its [`Watch`] when bytes come in.
struct Watched {
    inner: TcpStream,
    phase: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.phase.read_some();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
/// A router served on 127.0.0.1 at a port of its own, until dropped or
/// stopped: what every API test module starts its server with.
pub(crate) struct Serving {
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

#[cfg(test)]
impl Serving {
    pub(crate) async fn start(app: axum::Router, limits: Limits) -> Serving {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        Serving {
            addr,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Asks the server to stop; the task that served, to await.
    pub(crate) fn stop(&mut self) -> tokio::task::JoinHandle<std::io::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.served.take().expect("stopped once")
    }
}

#[cfg(test)]
impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
