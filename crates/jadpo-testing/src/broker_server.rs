//! A broker server of a test's own (Redis, NATS with JetStream, Mosquitto,
//! RabbitMQ)
//! that the test can stop as a crash would and start again on the same
//! port with what it had stored, or start with settings of its own
//! (a password, an access list): what the shared brokers cannot show.
//!
//! The binaries are Debian's (`redis-server`, `nats-server`, `mosquitto`,
//! `rabbitmq-server`). Each server keeps its data in a temporary folder
//! (Redis in an append-only file written at every command, NATS in
//! JetStream's file store, Mosquitto in its persistence file, RabbitMQ in
//! its node's database), so a stream made before a stop is there after the
//! start. A RabbitMQ node takes about five seconds to start: the shared one
//! behind a proxy serves every test that does not need settings of its own.

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
    /// A RabbitMQ node of its own, named `jadpo-PORT@localhost`.
    Amqp,
}

/// Debian's RabbitMQ without its wrapper, which would run it as the
/// `rabbitmq` user: this one runs as the test does.
const RABBITMQ: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

impl Kind {
    fn binary(self) -> &'static str {
        match self {
            Kind::Redis => "redis-server",
            Kind::Nats => "nats-server",
            Kind::Mqtt => "mosquitto",
            Kind::Amqp => RABBITMQ,
        }
    }

    /// Whether its binary is there: asked for its version, or for
    /// `mosquitto`, which has no `--version`, its help (it exits non-zero,
    /// which is enough); RabbitMQ's would start a node, so its file is
    /// looked for.
    fn installed(self) -> bool {
        match self {
            Kind::Amqp => Path::new(RABBITMQ).exists(),
            Kind::Mqtt => Command::new(self.binary()).arg("-h").output().is_ok(),
            _ => Command::new(self.binary()).arg("--version").output().is_ok(),
        }
    }

    fn scheme(self) -> &'static str {
        match self {
            Kind::Redis => "redis",
            Kind::Nats => "nats",
            Kind::Mqtt => "mqtt",
            Kind::Amqp => "amqp",
        }
    }

    /// The line that says it accepts clients.
    fn ready(self) -> &'static str {
        match self {
            Kind::Redis => "Ready to accept connections",
            Kind::Nats => "Server is ready",
            Kind::Mqtt => "running",
            Kind::Amqp => "Server startup complete",
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
            Kind::Amqp => {
                let mut config = format!("listeners.tcp.default = 127.0.0.1:{port}\n");
                for line in settings {
                    config.push_str(line);
                    config.push('\n');
                }
                std::fs::write(format!("{dir}/rabbitmq.conf"), config).expect("the configuration written");
                std::fs::write(format!("{dir}/enabled_plugins"), "[].\n").expect("no plugins");
                // `exec` all the way down (the script execs `erl` when it
                // believes systemd runs it), so the process a test kills is
                // the node itself; its log goes to standard error, where
                // `Logged` reads.
                let mut c = Command::new("sh");
                c.args(["-c", &format!("exec {RABBITMQ} 1>&2")])
                    .env("RUNNING_UNDER_SYSTEMD", "1")
                    .env("RABBITMQ_NODENAME", format!("jadpo-{port}@localhost"))
                    .env("RABBITMQ_NODE_PORT", port.to_string())
                    .env("RABBITMQ_DIST_PORT", free_port().to_string())
                    .env("RABBITMQ_MNESIA_BASE", dir)
                    .env("RABBITMQ_LOG_BASE", dir)
                    .env("RABBITMQ_LOGS", "-")
                    .env("RABBITMQ_CONFIG_FILE", format!("{dir}/rabbitmq.conf"))
                    .env("RABBITMQ_ENABLED_PLUGINS_FILE", format!("{dir}/enabled_plugins"))
                    .env("RABBITMQ_PID_FILE", format!("{dir}/pid"));
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
    /// then allows anonymous clients only if they say so) and RabbitMQ
    /// (`rabbitmq.conf`). `{dir}` in a setting is the data folder.
    pub fn start_with(kind: Kind, settings: &[&str], files: &[(&str, &str)]) -> Option<BrokerServer> {
        if !kind.installed() {
            skip::missing(
                &format!("`{}`", kind.binary()),
                "it is not on PATH",
                "install it (Debian: apt-get install redis-server nats-server mosquitto rabbitmq-server)",
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

    /// `redis://`, `nats://` or `mqtt://127.0.0.1:PORT`, or
    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn url(&self) -> String {
        match self.kind {
            Kind::Amqp => format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port),
            _ => format!("{}://127.0.0.1:{}", self.kind.scheme(), self.port),
        }
    }

    /// Runs `rabbitmqctl ARGS` against this RabbitMQ node and returns what
    /// it printed; panics if it fails.
    pub fn rabbitmqctl(&self, args: &[&str]) -> String {
        assert_eq!(self.kind, Kind::Amqp, "rabbitmqctl is RabbitMQ's");
        let node = format!("jadpo-{}@localhost", self.port);
        let out = Command::new("/usr/lib/rabbitmq/bin/rabbitmqctl")
            .args(["-n", &node])
            .args(args)
            .output()
            .expect("rabbitmqctl runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "rabbitmqctl {args:?}: {text}");
        text
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
                // RabbitMQ's distribution port is a second port found free
                // the same way, and may be taken the same way: another is
                // found at the next try.
                let taken = ["address already in use", "eaddrinuse", "dist_port_already_used"];
                assert!(
                    taken.iter().any(|t| text.contains(t)),
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
