//! A TCP proxy in front of a server (PostgreSQL, in Jadpo's outage tests)
//! whose connections a test can cut, refuse or stall, as a network or a
//! failover does, while the server itself keeps running.
//!
//! It runs on the tokio runtime it was started on; a test without one
//! makes a runtime and keeps it for the proxy's life.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Bytes flow both ways.
    Up = 0,
    /// Open connections were cut; new ones are accepted and closed at once
    /// (counted by [`Proxy::refused`]).
    Down = 1,
    /// Bytes stop flowing both ways; nothing is closed: a server that
    /// hangs.
    Stalled = 2,
    /// Up, but the first client message carrying `COMMIT` cuts everything
    /// instead of going through (the proxy is then down): a commit whose
    /// answer never comes.
    CutAtCommit = 3,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Down,
            2 => Mode::Stalled,
            3 => Mode::CutAtCommit,
            _ => Mode::Up,
        }
    }
}

/// The proxy; dropping it stops it and cuts what it relays.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

struct Shared {
    upstream: String,
    mode: AtomicU8,
    refused: AtomicUsize,
    relays: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    /// Aborts every relay; how many connections that cut.
    fn cut(&self) -> usize {
        let relays: Vec<AbortHandle> = self
            .relays
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        let live = relays.iter().filter(|r| !r.is_finished()).count();
        for r in relays {
            r.abort();
        }
        live.div_ceil(2)
    }
}

impl Proxy {
    /// Listens on 127.0.0.1 (a port of its own) and relays to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: impl Into<String>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a local port");
        let port = listener.local_addr().expect("bound").port();
        let shared = Arc::new(Shared {
            upstream: upstream.into(),
            mode: AtomicU8::new(Mode::Up as u8),
            refused: AtomicUsize::new(0),
            relays: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if s.mode() == Mode::Down {
                    drop(client);
                    s.refused.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&s.upstream).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let up = tokio::spawn(pump(cr, sw, s.clone(), true));
                let down = tokio::spawn(pump(sr, cw, s.clone(), false));
                let mut relays = s.relays.lock().unwrap_or_else(|p| p.into_inner());
                relays.retain(|r| !r.is_finished());
                relays.extend([up.abort_handle(), down.abort_handle()]);
            }
        })
        .abort_handle();
        Proxy { port, shared, accept }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a `scheme://user@host:port/db?...` URL) with its host and port
    /// this proxy's, and `sslmode=disable`: the proxy reads the protocol
    /// (to cut at a `COMMIT`), which TLS would hide from it.
    pub fn url_through(&self, url: &str) -> String {
        let through = self.authority_through(url);
        let sep = if through.contains('?') { '&' } else { '?' };
        format!("{through}{sep}sslmode=disable")
    }

    fn authority_through(&self, url: &str) -> String {
        let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
            panic!("not a URL with an authority: {url}");
        };
        let after = &url[scheme_end..];
        let authority_end = after.find(['/', '?']).unwrap_or(after.len());
        let authority = &after[..authority_end];
        let host_start = authority.rfind('@').map_or(0, |i| i + 1);
        format!(
            "{}{}127.0.0.1:{}{}",
            &url[..scheme_end],
            &authority[..host_start],
            self.port,
            &after[authority_end..]
        )
    }

    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// Sets the mode; [`Mode::Down`] cuts every open connection too.
    pub fn set(&self, mode: Mode) {
        self.shared.mode.store(mode as u8, Ordering::SeqCst);
        if mode == Mode::Down {
            self.shared.cut();
        }
    }

    /// Goes down: cuts every open connection, refuses new ones; how many
    /// were cut.
    pub fn cut(&self) -> usize {
        self.shared.mode.store(Mode::Down as u8, Ordering::SeqCst);
        self.shared.cut()
    }

    /// Connections refused while down.
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.cut();
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, s: Arc<Shared>, client_to_server: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while s.mode() == Mode::Stalled {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let Ok(n) = from.read(&mut buf).await else { return };
        if n == 0 {
            return;
        }
        while s.mode() == Mode::Stalled {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if client_to_server && s.mode() == Mode::CutAtCommit && buf[..n].windows(6).any(|w| w == b"COMMIT") {
            s.mode.store(Mode::Down as u8, Ordering::SeqCst);
            s.cut();
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server: what comes in goes back.
    async fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(port: u16) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(b"ping").await?;
        let mut got = vec![0u8; 4];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn relays_while_up_refuses_while_down_and_cuts_what_was_open() {
        let p = Proxy::start(echo().await).await;
        assert_eq!(round_trip(p.port()).await.unwrap(), b"ping");
        let mut open = TcpStream::connect(("127.0.0.1", p.port())).await.unwrap();
        open.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).await.unwrap();
        assert!(p.cut() >= 1, "the open connection was cut");
        let mut rest = Vec::new();
        let read = tokio::time::timeout(crate::wait::CEILING, open.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        assert!(round_trip(p.port()).await.is_err(), "refused while down");
        assert!(p.refused() >= 1);
        p.set(Mode::Up);
        assert_eq!(round_trip(p.port()).await.unwrap(), b"ping");
    }

    #[test]
    fn a_url_through_the_proxy_keeps_all_but_host_and_port() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let p = rt.block_on(Proxy::start("127.0.0.1:5432"));
        let port = p.port();
        assert_eq!(
            p.url_through("postgres://postgres@127.0.0.1:5432/test?options=x"),
            format!("postgres://postgres@127.0.0.1:{port}/test?options=x&sslmode=disable")
        );
        assert_eq!(
            p.url_through("postgres://u:p%40w@db.example/test"),
            format!("postgres://u:p%40w@127.0.0.1:{port}/test?sslmode=disable")
        );
        drop(p);
    }
}
