//! What the tests that run `jadpo dev` processes share: a raw `POST` and
//! `GET`, and waiting for a condition in real time (for work, never for a
//! backoff).
//! Processes themselves are `jadpo_testing::process::Logged`, on port 0.

#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

/// `jadpo` in `dir`, with none of the caller's `JADPO_STORE`, `RUST_LOG`
/// or `JADPO_API_TOKEN`, its stdout dropped (a process's log is stderr).
pub(crate) fn jadpo(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_jadpo"));
    c.current_dir(dir)
        .env_remove("JADPO_STORE")
        .env_remove("RUST_LOG")
        .env_remove("JADPO_API_TOKEN")
        .stdout(Stdio::null());
    c
}

/// POSTs JSON `body` to `path`; the answer's status.
pub(crate) fn post(port: u16, path: &str, body: &str) -> u16 {
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

/// GETs `path`; the answer's body.
pub(crate) fn get(port: u16, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// Until `done`, at most the suite's wait ceiling.
pub(crate) fn wait_until(what: &str, done: impl FnMut() -> bool) {
    jadpo_testing::wait::until(what, done);
}
