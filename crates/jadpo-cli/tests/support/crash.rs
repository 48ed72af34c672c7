//! What the crash tests share (`crash_postgres.rs`, `crash_sqlite.rs`):
//! `jadpo dev` as a process that can be killed, stopped, continued and
//! started again on its port, its log in a file; a keep-alive HTTP client
//! for its API; a small seeded random source whose seed is printed, for
//! replay with `JADPO_CRASH_SEED`; and the checks of the rows and calls
//! left at the end, the same whichever database kept them.

#![allow(dead_code)]

use jadpo_runtime::provider::Recorded;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The seed of a crash run: `JADPO_CRASH_SEED` when set, else a new one.
/// Printed first, so a failed run can be replayed.
pub(crate) fn seed() -> u64 {
    let seed = match std::env::var("JADPO_CRASH_SEED") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("JADPO_CRASH_SEED={s:?} is not a u64")),
        _ => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            nanos ^ (u64::from(std::process::id()) << 32)
        }
    };
    eprintln!("crash seed {seed}");
    seed
}

/// SplitMix64: small, seedable, the same everywhere.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }

    /// In `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A duration between `lo` and `hi` milliseconds.
    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// Polls `done` every 20 ms until it holds; fails after `limit`.
pub(crate) fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `jadpo dev` process on a fixed port, which may be killed, stopped and
/// started again. Each start logs to a file of its own in `logs`. Dropped,
/// it kills what runs (a failed test leaves no process behind) and, while
/// panicking, prints the end of its last log.
pub(crate) struct Dev {
    pub name: String,
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    stopped: bool,
    /// Times started.
    pub starts: u32,
    log: PathBuf,
}

impl Dev {
    /// Not started yet: `jadpo dev --port PORT ARGS...` in `dir` (which holds
    /// `app.jadpo`), logging under `dir`.
    pub(crate) fn new(name: &str, dir: &Path, args: &[&str]) -> Dev {
        Dev {
            name: name.to_owned(),
            port: free_port(),
            dir: dir.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
            stopped: false,
            starts: 0,
            log: PathBuf::new(),
        }
    }

    /// Starts it without waiting for its API.
    pub(crate) fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        self.starts += 1;
        self.log = self.dir.join(format!("{}.{}.log", self.name, self.starts));
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_jadpo"))
            .current_dir(&self.dir)
            .env_remove("JADPO_STORE")
            .env_remove("JADPO_API_TOKEN")
            .env_remove("RUST_LOG")
            .args(["dev", "--port", &self.port.to_string()])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("jadpo runs");
        self.child = Some(child);
        self.stopped = false;
    }

    /// Whether its API accepts connections. An exit is an error, with the
    /// end of its log.
    pub(crate) fn listening(&mut self) -> Result<bool, String> {
        let child = self.child.as_mut().expect("started");
        if let Some(status) = child.try_wait().unwrap() {
            self.child = None;
            return Err(format!("{} exited with {status}:\n{}", self.name, self.log_tail(30)));
        }
        Ok(TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_millis(500)).is_ok())
    }

    /// Starts it and waits until its API listens (see [`Dev::wait_listening`]).
    pub(crate) fn start(&mut self, limit: Duration) {
        self.spawn();
        self.wait_listening(limit);
    }

    /// Waits until the API of the process just spawned listens. A start
    /// that exits at once (its port not yet free again, say) is tried
    /// again, five times in all.
    pub(crate) fn wait_listening(&mut self, limit: Duration) {
        let begun = Instant::now();
        let mut tries = 1;
        loop {
            match self.listening() {
                Ok(true) => return,
                Ok(false) => {}
                Err(why) => {
                    assert!(tries < 5, "{why}");
                    tries += 1;
                    eprintln!("{}: start failed, starting again: {why}", self.name);
                    std::thread::sleep(Duration::from_millis(300));
                    self.spawn();
                }
            }
            assert!(
                begun.elapsed() < limit,
                "{}'s API did not listen within {limit:?}:\n{}",
                self.name,
                self.log_tail(30)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("started").id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", self.name);
    }

    /// SIGKILL, as a crash: nothing is given back, nothing is written.
    pub(crate) fn kill(&mut self) {
        let mut child = self.child.take().expect("started");
        let _ = child.kill();
        let _ = child.wait();
        self.stopped = false;
    }

    /// SIGSTOP: the process stalls, its leases running on.
    pub(crate) fn stop(&mut self) {
        self.signal("-STOP");
        self.stopped = true;
    }

    /// SIGCONT.
    pub(crate) fn cont(&mut self) {
        self.signal("-CONT");
        self.stopped = false;
    }

    /// SIGTERM, and its exit status (within `limit`, else it is killed and
    /// the test fails).
    pub(crate) fn terminate(&mut self, limit: Duration) -> ExitStatus {
        if self.stopped {
            self.cont();
        }
        self.signal("-TERM");
        let begun = Instant::now();
        loop {
            let child = self.child.as_mut().unwrap();
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            if begun.elapsed() > limit {
                self.kill();
                panic!(
                    "{} did not stop within {limit:?} of SIGTERM:\n{}",
                    self.name,
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `n` lines of its current log.
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Its current log, whole.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if std::thread::panicking() && self.starts > 0 {
            eprintln!(
                "---- {} (start {}, {}) ----\n{}",
                self.name,
                self.starts,
                self.log.display(),
                self.log_tail(40)
            );
        }
        if let Some(mut child) = self.child.take() {
            if self.stopped {
                let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A keep-alive HTTP/1.1 client of one port, which connects again after
/// any error. Every failure is an `Err` for the caller to retry.
pub(crate) struct Client {
    pub port: u16,
    timeout: Duration,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    pub(crate) fn new(port: u16, timeout: Duration) -> Client {
        Client {
            port,
            timeout,
            conn: None,
        }
    }

    /// Sends one request; the status and the body.
    pub(crate) fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        let result = self.exchange(method, path, headers, body);
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn exchange(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        if self.conn.is_none() {
            let s = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), self.timeout)?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            s.set_nodelay(true)?;
            self.conn = Some(BufReader::new(s));
        }
        let conn = self.conn.as_mut().unwrap();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        conn.get_mut().write_all(request.as_bytes())?;
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
        }
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| bad("no status"))?;
        let mut length = None;
        let mut close = false;
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').ok_or_else(|| bad("bad header"))?;
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<usize>().map_err(|_| bad("bad length"))?);
            } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
                close = true;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(bad("chunked answers are not read here"));
            }
        }
        let mut body = vec![0u8; length.ok_or_else(|| bad("no content-length"))?];
        conn.read_exact(&mut body)?;
        if close {
            self.conn = None;
        }
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// A delivery as read back once every process stopped.
#[derive(Debug)]
pub(crate) struct Delivery {
    pub id: i64,
    /// Its event's `id`, which its calls carry as their idempotency key.
    pub event: String,
    pub state: String,
    pub attempts: i64,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub handled_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// The `id` in an event's payload.
pub(crate) fn event_of(payload: &str) -> String {
    serde_json::from_str::<serde_json::Value>(payload).unwrap()["id"]
        .as_str()
        .expect("the payload has its id")
        .to_owned()
}

/// The provider's calls by event (the idempotency key is the event's id):
/// how many were sent and how many answered `2xx`.
pub(crate) fn calls_by_event(requests: &[Recorded]) -> HashMap<String, (i64, i64)> {
    let mut calls: HashMap<String, (i64, i64)> = HashMap::new();
    for r in requests {
        let key = r.header("idempotency-key").expect("every call has its key").to_owned();
        let body_id = r.json().ok().and_then(|b| b["id"].as_str().map(str::to_owned));
        assert_eq!(body_id.as_deref(), Some(key.as_str()), "the body is the event");
        let entry = calls.entry(key).or_default();
        entry.0 += 1;
        if (200..300).contains(&r.status) {
            entry.1 += 1;
        }
    }
    calls
}

/// Deliveries (one per event) whose calls were answered `2xx` twice or more.
pub(crate) fn answered_twice(requests: &[Recorded]) -> usize {
    let mut ok: HashMap<&str, u32> = HashMap::new();
    for r in requests.iter().filter(|r| (200..300).contains(&r.status)) {
        *ok.entry(r.header("idempotency-key").unwrap()).or_default() += 1;
    }
    ok.values().filter(|n| **n >= 2).count()
}

/// What the run left, for its summary line.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Deliveries attempted more than once.
    pub retried: usize,
    pub max_attempts: i64,
    /// Attempts with no row: lost with their process, no outcome written.
    pub lost: i64,
}

/// Every delivery succeeded and holds no lease; its `history` (attempt
/// number and state, in the order written, its success included) has
/// numbers strictly increasing within its count of attempts and one
/// success, last: no outcome was written under a stale lease. Its event
/// was answered `2xx` at least once, and called no more often than it had
/// attempts. Every attempt and every call belongs to a delivery.
pub(crate) fn check_deliveries(
    rows: Vec<Delivery>,
    mut history: HashMap<i64, Vec<(i64, String)>>,
    mut calls: HashMap<String, (i64, i64)>,
    seed: u64,
) -> Tally {
    let mut tally = Tally::default();
    for d in rows {
        let (id, attempts) = (d.id, d.attempts);
        let what = format!("delivery {id} ({}, seed {seed})", d.event);
        assert_eq!(d.state, "succeeded", "{what}");
        assert!(attempts >= 1, "{what}: succeeded with {attempts} attempts");
        assert!(
            d.lease_owner.is_none() && d.lease_until.is_none(),
            "{what}: a finished delivery keeps a lease"
        );
        assert!(
            d.handled_at.is_some() && d.finished_at.is_some(),
            "{what}: no handled record or finish time"
        );
        tally.max_attempts = tally.max_attempts.max(attempts);
        if attempts > 1 {
            tally.retried += 1;
        }

        let entries = history.remove(&id).unwrap_or_default();
        assert!(
            entries.windows(2).all(|w| w[0].0 < w[1].0),
            "{what}: attempt numbers not strictly increasing: {entries:?}"
        );
        assert!(
            entries.iter().all(|(n, _)| *n >= 1 && *n <= attempts),
            "{what}: an attempt numbered outside 1..={attempts}: {entries:?}"
        );
        tally.lost += attempts - entries.len() as i64;
        let successes = entries.iter().filter(|(_, s)| s == "succeeded").count();
        assert_eq!(
            successes, 1,
            "{what}: {successes} successes in its history: {entries:?}"
        );
        assert_eq!(
            entries.last(),
            Some(&(attempts, "succeeded".to_owned())),
            "{what}: the success is not its last attempt: {entries:?}"
        );

        let (sent, answered) = calls.remove(&d.event).unwrap_or_default();
        assert!(answered >= 1, "{what}: succeeded with no 2xx answer ({sent} calls)");
        assert!(sent <= attempts, "{what}: {sent} calls in {attempts} attempts");
    }
    assert!(history.is_empty(), "attempts of no delivery: {history:?}");
    assert!(
        calls.is_empty(),
        "calls for no event: {:?}",
        calls.keys().take(5).collect::<Vec<_>>()
    );
    tally
}
