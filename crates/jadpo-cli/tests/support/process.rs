//! What the tests that run `jadpo dev` processes share: a raw `POST`, and
//! waiting for a condition in real time (for work, never for a backoff).
//! Processes themselves are `jadpo_testing::process::Logged`, on port 0.

#![allow(dead_code)]

use std::io::Read;

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

/// Until `done`, at most the suite's wait ceiling.
pub fn wait_until(what: &str, done: impl FnMut() -> bool) {
    jadpo_testing::wait::until(what, done);
}
