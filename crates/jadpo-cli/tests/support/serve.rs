//! `jadpo serve` processes on one PostgreSQL schema, for the wake-up test
//! and the wake-up benchmark (which includes this file by path): started
//! for real, reached over HTTP, their JSON logs read as they come, stopped
//! with SIGTERM.

#![allow(dead_code)]

use jadpo_store::postgres::testing::TestSchema;
use jadpo_testing::process::Logged;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub(crate) const TOKEN: &str = "test-token-0123456789abcdef012345";

/// A URL to the schema: its `search_path` set through the URL's `options`.
pub(crate) fn url(schema: &TestSchema) -> String {
    schema.url_with_search_path()
}

/// A running `jadpo serve`, its JSON log kept as it comes.
pub(crate) struct Serve {
    pub port: u16,
    child: Logged,
}

impl Serve {
    /// Starts `jadpo serve` in `dir` (which holds `app.jadpo`) with `args`
    /// after the store, port 0 and token, and waits until its API listens
    /// (on the port it chose, read from its log) and its store's listener
    /// listens.
    pub(crate) fn start(dir: &Path, store: &str, args: &[&str]) -> Serve {
        Serve::start_logging(dir, store, args, None)
    }

    /// As [`Serve::start`], logging what `rust_log` says (`RUST_LOG`), not
    /// the default.
    pub(crate) fn start_logging(dir: &Path, store: &str, args: &[&str], rust_log: Option<&str>) -> Serve {
        Serve::start_binary(Path::new(env!("CARGO_BIN_EXE_jadpo")), dir, store, args, rust_log)
    }

    /// As [`Serve::start_logging`], with another `jadpo` binary (a previous
    /// version's).
    pub(crate) fn start_binary(bin: &Path, dir: &Path, store: &str, args: &[&str], rust_log: Option<&str>) -> Serve {
        Serve::start_with(Command::new(bin), dir, store, args, rust_log)
    }

    /// As [`Serve::start`], with these environment variables set.
    pub(crate) fn start_env(dir: &Path, store: &str, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut command = Command::new(env!("CARGO_BIN_EXE_jadpo"));
        command.envs(env.iter().copied());
        Serve::start_with(command, dir, store, args, None)
    }

    fn start_with(mut command: Command, dir: &Path, store: &str, args: &[&str], rust_log: Option<&str>) -> Serve {
        command.env_remove("RUST_LOG");
        if let Some(filter) = rust_log {
            command.env("RUST_LOG", filter);
        }
        let mut child = Logged::spawn(
            command
                .current_dir(dir)
                .env_remove("JADPO_STORE")
                .env("JADPO_API_TOKEN", TOKEN)
                .args(["serve", "--store", store, "--bind", "127.0.0.1", "--port", "0"])
                .args(args)
                .stdout(Stdio::null()),
        );
        let port = child.port("api.listening");
        let mut serve = Serve { port, child };
        serve.wait_for("the store's listener listens", |s| s.logged("store.listening") > 0);
        serve
    }

    /// How many log lines have `event` as their event.
    pub(crate) fn logged(&self, event: &str) -> usize {
        self.events(event).len()
    }

    /// The log lines whose event is `event`, as JSON.
    pub(crate) fn events(&self, event: &str) -> Vec<serde_json::Value> {
        self.child
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == event)
            .collect()
    }

    /// Which of `events` was logged last, if any was.
    pub(crate) fn last_of(&self, events: &[&str]) -> Option<String> {
        self.child
            .lines()
            .iter()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["event"].as_str().map(str::to_owned))
            .find(|e| events.contains(&e.as_str()))
    }

    /// Every log line so far, for a failure's message.
    pub(crate) fn log_text(&self) -> String {
        self.child.text()
    }

    /// Polls `check` until it holds, failing after the suite's wait ceiling
    /// or if the process exits.
    pub(crate) fn wait_for(&mut self, what: &str, check: impl Fn(&Serve) -> bool) {
        let start = Instant::now();
        while !check(self) {
            if let Some(status) = self.child.exited() {
                panic!(
                    "exited early with {status} while waiting for {what}:\n{}",
                    self.log_text()
                );
            }
            assert!(
                start.elapsed() < jadpo_testing::wait::CEILING,
                "timed out waiting for {what}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends a request to this process's API with the token; the status and
    /// the body.
    pub(crate) fn http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        http(self.port, method, path, body, jadpo_testing::wait::CEILING)
    }

    /// Kills it with SIGKILL, as a crash would: nothing is given back.
    pub(crate) fn kill(self) {
        self.child.kill();
    }

    /// Stops it with SIGTERM; its exit status and its whole log.
    pub(crate) fn terminate(self) -> (ExitStatus, String) {
        self.child.terminate()
    }
}

/// The first connection to `listener`, failing after `limit`.
pub(crate) fn accept_within(listener: &TcpListener, limit: Duration) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    start.elapsed() < limit,
                    "no connection to {:?} within {limit:?}",
                    listener.local_addr()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// `Ping` is delivered to the provider; `Block` to a port that accepts and
/// never answers, which keeps a worker busy as long as the caller wants.
const PAIR_APP: &str = r#"
event Ping { id: string }
event Block { id: string }
connection echo { base_url: "PROVIDER" }
connection blackhole { base_url: "BLACKHOLE"  timeout: HANG }
action forward(id: string) { call echo.post("/ping/{id}", body: event) }
action hang(id: string) { call blackhole.post("/hang/{id}", body: event) }
subscriber forward_ping { on: Ping  run: forward(event.id) }
subscriber hang_block { on: Block  run: hang(event.id)  timeout: HANG }
"#;

/// Two `jadpo serve` processes on one schema, both polling every `poll`:
/// A runs one delivery at a time and that one hangs, so from then on A
/// cannot claim and whatever starts is B's doing. For the wake-up test and
/// the wake-up benchmark.
pub(crate) struct Pair {
    pub provider: jadpo_runtime::provider::TestProvider,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub a: Serve,
    pub b: Serve,
    blackhole: TcpListener,
    hung: TcpStream,
}

impl Pair {
    /// `hang` is how long A's hanging call may last (an app file duration).
    pub(crate) fn start(
        rt: &tokio::runtime::Runtime,
        schema: &TestSchema,
        hang: &str,
        b_workers: usize,
        poll: &str,
    ) -> Pair {
        let provider = rt.block_on(jadpo_runtime::provider::TestProvider::start());
        let blackhole = TcpListener::bind("127.0.0.1:0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let app = PAIR_APP
            .replace("PROVIDER", &provider.url())
            .replace("BLACKHOLE", &format!("http://{}", blackhole.local_addr().unwrap()))
            .replace("HANG", hang);
        std::fs::write(dir.path().join("app.jadpo"), app).unwrap();
        let url = url(schema);
        let a = Serve::start(dir.path(), &url, &["--workers", "1", "--poll", poll]);
        assert_eq!(a.http("POST", "/events/Block", Some(r#"{"id":"b"}"#)).0, 202);
        let hung = accept_within(&blackhole, Duration::from_secs(30));
        // B logs when its claim loop goes idle and when it is woken.
        let b = Serve::start_logging(
            dir.path(),
            &url,
            &["--workers", &b_workers.to_string(), "--poll", poll],
            Some(&format!(
                "{},jadpo_runtime::worker=debug",
                jadpo_runtime::logfmt::DEFAULT_FILTER
            )),
        );
        Pair {
            provider,
            dir,
            url,
            a,
            b,
            blackhole,
            hung,
        }
    }

    /// Ends the hanging call, so A can stop, then stops B and A: their exit
    /// statuses and logs.
    pub(crate) fn stop(self) -> ((ExitStatus, String), (ExitStatus, String)) {
        drop(self.hung);
        drop(self.blackhole);
        let b = self.b.terminate();
        let a = self.a.terminate();
        (a, b)
    }
}

/// Sends a request to the API on `port` with [`TOKEN`]; the status and the
/// body. Gives up after `within`: a server that never answers fails the
/// test instead of hanging it.
pub(crate) fn http(port: u16, method: &str, path: &str, body: Option<&str>, within: Duration) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(within)).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out)
        .unwrap_or_else(|e| panic!("{method} {path} got no answer within {within:?}: {e}"));
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
}
