//! A PostgreSQL server of a test's own, for what the shared server cannot
//! show: its own settings (TLS with the test's certificates), a restart, a
//! standby. `initdb` in a new folder, started with `pg_ctl` on a free port,
//! stopped at once (`-m immediate`) and removed when dropped.
//!
//! The server binaries are PostgreSQL's own (`pg_config --bindir`: Debian's
//! `postgresql-15` puts them in `/usr/lib/postgresql/15/bin`). PostgreSQL
//! refuses to run as root, so as root they run as the `postgres` user, who
//! then owns the folder.

use crate::skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What a missing server binary's skip says to do.
const FIX: &str = "install PostgreSQL's server (Debian: apt-get install postgresql) so that `pg_config --bindir` names a folder with initdb and pg_ctl";

pub struct PgServer {
    bindir: PathBuf,
    /// Holds the data folder; removed after the server stopped.
    _root: tempfile::TempDir,
    data: PathBuf,
    port: u16,
    /// `Some("postgres")` when this process is root.
    run_as: Option<String>,
}

impl PgServer {
    /// A new server with `conf` added to its `postgresql.conf` and `files`
    /// written into its data folder (readable by the server only, as it
    /// wants a key to be) before it starts. `None` after the skip rule when
    /// the server binaries are missing; panics if they are there and the
    /// server does not start, with its log.
    pub fn start(conf: &[&str], files: &[(&str, &[u8])]) -> Option<PgServer> {
        let bindir = match bindir() {
            Ok(b) => b,
            Err(why) => {
                skip::missing("PostgreSQL's server binaries", &why, FIX);
                return None;
            }
        };
        let run_as = is_root().then(|| "postgres".to_owned());
        let root = tempfile::Builder::new()
            .prefix("jadpo-pg-")
            .tempdir()
            .expect("a temporary folder");
        let data = root.path().join("data");
        if let Some(user) = &run_as {
            chown(root.path(), user);
        }
        let mut server = PgServer {
            bindir,
            _root: root,
            data,
            port: 0,
            run_as,
        };
        server.run_ok(
            "initdb",
            &[
                "-D",
                path(&server.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        for (name, bytes) in files {
            let file = server.data.join(name);
            std::fs::write(&file, bytes).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            if let Some(user) = &server.run_as {
                chown(&file, user);
            }
        }
        let mut settings = vec![
            "listen_addresses = '127.0.0.1'".to_owned(),
            format!("unix_socket_directories = '{}'", path(&server.data)),
            // A test's server keeps nothing worth a flush.
            "fsync = off".to_owned(),
            "synchronous_commit = off".to_owned(),
            "full_page_writes = off".to_owned(),
        ];
        settings.extend(conf.iter().map(|c| c.to_string()));
        let conf_file = server.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_file).expect("initdb wrote postgresql.conf");
        text.push('\n');
        text.push_str(&settings.join("\n"));
        text.push('\n');
        std::fs::write(&conf_file, text).unwrap();
        // The port is found free and handed to the server by number (it
        // cannot take a listening socket), so another process may take it
        // first: then the start fails, and another port is tried.
        for _ in 0..5 {
            server.port = free_port();
            let port = server.port.to_string();
            let log = server.data.join("server.log");
            let out = server.run(
                "pg_ctl",
                &[
                    "-D",
                    path(&server.data),
                    "-l",
                    path(&log),
                    "-o",
                    &format!("-p {port}"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
            );
            if out.status.success() {
                return Some(server);
            }
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            if !log.contains("Address already in use") {
                panic!(
                    "pg_ctl start failed: {}\n{}\n{log}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        panic!("no free port for a PostgreSQL server after five tries");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's data folder, where [`PgServer::start`]'s files are.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, then `query` if any
    /// (`sslmode=require`, say).
    pub fn url(&self, query: &str) -> String {
        let mut url = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        if !query.is_empty() {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let binary = self.bindir.join(program);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(binary).args(args);
                c
            }
            None => {
                let mut c = Command::new(binary);
                c.args(args);
                c
            }
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        self.command(program, args)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"))
    }

    fn run_ok(&self, program: &str, args: &[&str]) {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", &["-D", path(&self.data), "-m", "immediate", "-w", "stop"]);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

fn bindir() -> Result<PathBuf, String> {
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .map_err(|e| format!("pg_config: {e}"))?;
    if !out.status.success() {
        return Err("pg_config --bindir failed".to_owned());
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for program in ["initdb", "pg_ctl", "postgres"] {
        if !dir.join(program).exists() {
            return Err(format!("{} has no {program}", dir.display()));
        }
    }
    Ok(dir)
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub(crate) fn chown(p: &Path, user: &str) {
    let out = Command::new("chown")
        .args(["-R", user])
        .arg(p)
        .output()
        .unwrap_or_else(|e| panic!("chown: {e}"));
    assert!(out.status.success(), "chown {user} {}: {out:?}", p.display());
}

/// A port nothing listens on as this runs.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
