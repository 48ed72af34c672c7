//! What the tests that run `jadpo dev` processes share: a free port,
//! waiting for a process's API, a raw `POST`, and waiting for a condition
//! in real time (for work, never for a backoff).

#![allow(dead_code)]

use std::io::Read;
use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Until `child`'s API listens on `port`; its stderr in the panic if it
/// exited first.
pub fn wait_for_port(port: u16, child: &mut Child) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            panic!("exited early with {status}: {err}");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the API never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// POSTs JSON `body` to `path`; the answer's status.
pub fn post(port: u16, path: &str, body: &str) -> u16 {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Until `done`, at most a minute.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
