//! A PgBouncer of a test's own in front of a PostgreSQL server: Debian's
//! `pgbouncer`, on a free port, trust auth, every database passed through
//! to the server, stopped when dropped. As root it runs as the `postgres`
//! user, as PgBouncer refuses root.

use crate::skip;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FIX: &str = "install PgBouncer (Debian: apt-get install pgbouncer)";

pub struct PgBouncer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl PgBouncer {
    /// PgBouncer in `pool_mode` (`session`, `transaction`) in front of the
    /// server at `host:port`. `None` after the skip rule when `pgbouncer`
    /// is not installed; panics if it does not listen within the suite's
    /// ceiling, with its log.
    pub fn start(host: &str, port: u16, pool_mode: &str) -> Option<PgBouncer> {
        let Some(binary) = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
        else {
            skip::missing("PgBouncer", "no pgbouncer in /usr/sbin or /usr/bin", FIX);
            return None;
        };
        let root = crate::pg_server::is_root();
        // The port is found free and handed to PgBouncer by number (it
        // cannot take a listening socket), so another process may take it
        // first: then PgBouncer exits, and another port is tried.
        for _ in 0..5 {
            if let Some(bouncer) = try_start(&binary, root, host, port, pool_mode) {
                return Some(bouncer);
            }
        }
        panic!("no free port for PgBouncer after five tries");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // runuser passes SIGTERM on to PgBouncer: an immediate shutdown.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Starts PgBouncer on a port found free, in a folder of its own; `None`
/// if it exited before listening (the port was taken meanwhile).
fn try_start(binary: &std::path::Path, root: bool, host: &str, port: u16, pool_mode: &str) -> Option<PgBouncer> {
    let dir = tempfile::Builder::new()
        .prefix("jadpo-pgbouncer-")
        .tempdir()
        .expect("a temporary folder");
    let own_port = crate::pg_server::free_port();
    let log = dir.path().join("pgbouncer.log");
    let users = dir.path().join("users.txt");
    std::fs::write(&users, "\"postgres\" \"\"\n").unwrap();
    let ini = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\n* = host={host} port={port}\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {own_port}\n\
             auth_type = trust\nauth_file = {users}\npool_mode = {pool_mode}\n\
             unix_socket_dir =\nlogfile = {log}\nmax_client_conn = 500\ndefault_pool_size = 40\n",
            users = users.display(),
            log = log.display(),
        ),
    )
    .unwrap();
    let mut command = if root {
        crate::pg_server::chown(dir.path(), "postgres");
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(binary);
        c
    } else {
        Command::new(binary)
    };
    let child = command
        .arg(&ini)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pgbouncer");
    let mut bouncer = PgBouncer {
        child,
        port: own_port,
        _dir: dir,
        log,
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", own_port)).is_err() {
        if bouncer.child.try_wait().ok().flatten().is_some() {
            return None;
        }
        assert!(
            started.elapsed() < crate::wait::CEILING,
            "PgBouncer did not listen on {own_port}:\n{}",
            bouncer.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(bouncer)
}
