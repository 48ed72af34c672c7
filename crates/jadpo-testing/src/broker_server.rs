//! A broker server of a test's own (Redis, NATS with JetStream, Mosquitto)
//! that the test can stop as a crash would and start again on the same
//! port with what it had stored, or start with settings of its own
//! (a password, an access list): what the shared brokers cannot show.
//!
//! The binaries are Debian's (`redis-server`, `nats-server`, `mosquitto`).
//! Each server keeps its data in a temporary folder (Redis in an
//! append-only file written at every command, NATS in JetStream's file
//! store, Mosquitto in its persistence file), so a stream made before a
//! stop is there after the start.

use crate::pg_server::free_port;
use crate::process::Logged;
use crate::skip;
use std::path::Path;
use std::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Redis,
    Nats,
    Mqtt,
}

impl Kind {
    fn binary(self) -> &'static str {
        match self {
            Kind::Redis => "redis-server",
            Kind::Nats => "nats-server",
            Kind::Mqtt => "mosquitto",
        }
    }

    /// How the binary says its version: `mosquitto` has no `--version`
    /// and exits non-zero for `-h`, which is enough to know it is there.
    fn version_flag(self) -> &'static str {
        match self {
            Kind::Mqtt => "-h",
            _ => "--version",
        }
    }

    fn scheme(self) -> &'static str {
        match self {
            Kind::Redis => "redis",
            Kind::Nats => "nats",
            Kind::Mqtt => "mqtt",
        }
    }

    /// The line that says it accepts clients.
    fn ready(self) -> &'static str {
        match self {
            Kind::Redis => "Ready to accept connections",
            Kind::Nats => "Server is ready",
            Kind::Mqtt => "running",
        }
    }

    fn command(self, port: u16, dir: &Path, settings: &[String]) -> Command {
        let mut c = Command::new(self.binary());
        let dir = dir.to_str().expect("a UTF-8 temporary folder");
        match self {
            Kind::Redis => {
                c.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir", dir])
                    .args(["--appendonly", "yes", "--appendfsync", "always", "--save", ""])
                    // Where `Logged` reads.
                    .args(["--logfile", "/dev/stderr", "--loglevel", "notice"]);
            }
            Kind::Nats => {
                c.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd", dir]);
            }
            Kind::Mqtt => {
                // Mosquitto reads its listener and settings from a file only.
                let mut config = format!(
                    "listener {port} 127.0.0.1\nuser root\npersistence true\npersistence_location {dir}/\n\
                     log_dest stderr\nlog_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
                );
                if settings.is_empty() {
                    config.push_str("allow_anonymous true\n");
                }
                for line in settings {
                    config.push_str(line);
                    config.push('\n');
                }
                let file = format!("{dir}/mosquitto.conf");
                std::fs::write(&file, config).expect("the configuration written");
                c.args(["-c", &file]);
                return c;
            }
        }
        c.args(settings);
        c
    }
}

/// The server; killed when dropped.
pub struct BrokerServer {
    kind: Kind,
    port: u16,
    dir: tempfile::TempDir,
    settings: Vec<String>,
    process: Option<Logged>,
}

impl BrokerServer {
    /// Starts a server of `kind` on a free port. `None` after the skip
    /// rule when its binary is missing.
    pub fn start(kind: Kind) -> Option<BrokerServer> {
        BrokerServer::start_with(kind, &[], &[])
    }

    /// As [`BrokerServer::start`], with `files` (name, text) written to its
    /// data folder first and `settings` added: command-line arguments for
    /// Redis and NATS, lines of the configuration file for Mosquitto (which
    /// then allows anonymous clients only if they say so). `{dir}` in a
    /// setting is the data folder.
    pub fn start_with(kind: Kind, settings: &[&str], files: &[(&str, &str)]) -> Option<BrokerServer> {
        if Command::new(kind.binary()).arg(kind.version_flag()).output().is_err() {
            skip::missing(
                &format!("`{}`", kind.binary()),
                "it is not on PATH",
                "install it (Debian: apt-get install redis-server nats-server mosquitto)",
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("a file in the data folder");
        }
        let folder = dir.path().to_str().expect("a UTF-8 temporary folder");
        let settings = settings.iter().map(|s| s.replace("{dir}", folder)).collect();
        let mut server = BrokerServer {
            kind,
            port: 0,
            dir,
            settings,
            process: None,
        };
        // The port is found free and handed over by number; another
        // process may take it first, and then another port is tried.
        for _ in 0..5 {
            server.port = free_port();
            if server.run() {
                return Some(server);
            }
        }
        panic!("no free port for {} after five tries", kind.binary());
    }

    /// `redis://`, `nats://` or `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.kind.scheme(), self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts it again, on its port, with what it had stored.
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "it is running");
        for _ in 0..50 {
            if self.run() {
                return;
            }
            // The port is still held by the killed server's sockets, or was
            // taken meanwhile: wait a little and try again.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("{} did not start again on port {}", self.kind.binary(), self.port);
    }

    /// Runs it on `self.port`; false when the port was taken.
    fn run(&mut self) -> bool {
        let mut process = Logged::spawn(&mut self.kind.command(self.port, self.dir.path(), &self.settings));
        let ready = self.kind.ready();
        let start = std::time::Instant::now();
        loop {
            let lines = process.lines();
            if lines.iter().any(|l| l.contains(ready)) {
                self.process = Some(process);
                return true;
            }
            if process.exited().is_some() {
                let text = process.text().to_ascii_lowercase();
                assert!(
                    text.contains("address already in use"),
                    "{} failed:\n{text}",
                    self.kind.binary()
                );
                return false;
            }
            assert!(
                start.elapsed() < crate::wait::CEILING,
                "{} not ready:\n{}",
                self.kind.binary(),
                process.text()
            );
            std::thread::sleep(crate::wait::POLL);
        }
    }
}
