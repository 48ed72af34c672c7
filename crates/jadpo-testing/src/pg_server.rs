//! A PostgreSQL server of a test's own, for what the shared server cannot
//! show: its own settings (TLS with the test's certificates), a restart, a
//! standby. `initdb` in a new folder, started with `pg_ctl` on a free port,
//! stopped at once (`-m immediate`) and removed when dropped.
//!
//! A standby ([`PgServer::standby_of`]) is `pg_basebackup -R` of a running
//! server, streaming from it; [`PgServer::promote`] makes it the primary and
//! [`PgServer::stop_immediate`] kills a server as a crash would, for a
//! failover.
//!
//! The server binaries are PostgreSQL's own (`pg_config --bindir`: Debian's
//! `postgresql-15` puts them in `/usr/lib/postgresql/15/bin`). PostgreSQL
//! refuses to run as root, so as root they run as the `postgres` user, who
//! then owns the folder.

use crate::skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What a missing server binary's skip says to do.
const FIX: &str = "install PostgreSQL's server (Debian: apt-get install postgresql) so that `pg_config --bindir` names a folder with initdb, pg_ctl, pg_basebackup and psql";

/// Settings for a primary whose every commit waits until a standby has it
/// (`synchronous_commit = on`, where a test's server has `off`; `*`: any
/// standby that connects is the synchronous one). Its commits wait until
/// one streams from it: start one with [`PgServer::standby_of`] first. The
/// servers do not `fsync`: what the standby has is in its operating
/// system's hands, which outlive a server's crash.
pub const SYNCHRONOUS_PRIMARY: &[&str] = &["synchronous_commit = on", "synchronous_standby_names = '*'"];

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
        let mut server = PgServer::in_new_folder(bindir);
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
        server.add_settings(&settings);
        server.listen();
        Some(server)
    }

    /// A hot standby of `primary` (started with [`SYNCHRONOUS_PRIMARY`] for
    /// a synchronous one): `pg_basebackup -R` copies its data folder, with
    /// its settings, and writes `standby.signal` and `primary_conninfo`.
    /// Returns once it takes (read-only) connections and the primary counts
    /// it as a standby streaming from it, and as its synchronous one when
    /// the primary names any: from then on every commit acknowledged by the
    /// primary is on this server too.
    pub fn standby_of(primary: &PgServer) -> PgServer {
        let mut standby = PgServer::in_new_folder(primary.bindir.clone());
        let port = primary.port.to_string();
        let mut args = to(&port).to_vec();
        // Not the default spread checkpoint, which takes minutes.
        args.extend(["-D", path(&standby.data), "-R", "--checkpoint=fast", "--no-sync"]);
        standby.run_ok("pg_basebackup", &args);
        // The primary's log came with its folder.
        let _ = std::fs::remove_file(standby.data.join("server.log"));
        // The temporary folder's own name, unique: the name the primary
        // knows this standby by (`application_name` in
        // `pg_stat_replication`, from `cluster_name`).
        let name: String = standby
            ._root
            .path()
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect()
            })
            .unwrap_or_default();
        standby.add_settings(&[
            format!("unix_socket_directories = '{}'", path(&standby.data)),
            format!("cluster_name = '{name}'"),
            // Copied from the primary: once promoted, this server has no
            // standby of its own, and would wait for one at every commit.
            "synchronous_standby_names = ''".to_owned(),
        ]);
        standby.listen();
        let streaming = format!(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = '{name}' \
             AND state = 'streaming' \
             AND (sync_state = 'sync' OR current_setting('synchronous_standby_names') = '')"
        );
        crate::wait::until("the primary to count its new standby as streaming", || {
            primary.query(&streaming) == "1"
        });
        standby
    }

    /// Promotes a standby to primary (`pg_ctl promote`), returning once it
    /// takes writes.
    pub fn promote(&self) {
        self.run_ok("pg_ctl", &["-D", path(&self.data), "-w", "-t", "60", "promote"]);
    }

    /// Stops the server as a crash would (`pg_ctl stop -m immediate`: its
    /// processes quit at once, connections drop, no shutdown checkpoint).
    pub fn stop_immediate(&self) {
        self.run_ok("pg_ctl", &["-D", path(&self.data), "-m", "immediate", "-w", "stop"]);
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

    /// Nothing in it yet: a new temporary folder (owned by `postgres` when
    /// this process is root) for a data folder.
    fn in_new_folder(bindir: PathBuf) -> PgServer {
        let run_as = is_root().then(|| "postgres".to_owned());
        let root = tempfile::Builder::new()
            .prefix("jadpo-pg-")
            .tempdir()
            .expect("a temporary folder");
        let data = root.path().join("data");
        if let Some(user) = &run_as {
            chown(root.path(), user);
        }
        PgServer {
            bindir,
            _root: root,
            data,
            port: 0,
            run_as,
        }
    }

    /// Appends `settings` to `postgresql.conf`: a later line wins.
    fn add_settings(&self, settings: &[String]) {
        let conf_file = self.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_file).expect("the data folder has postgresql.conf");
        text.push('\n');
        text.push_str(&settings.join("\n"));
        text.push('\n');
        std::fs::write(&conf_file, text).unwrap();
    }

    /// Starts the server on a free port.
    fn listen(&mut self) {
        // The port is found free and handed to the server by number (it
        // cannot take a listening socket), so another process may take it
        // first: then the start fails, and another port is tried.
        for _ in 0..5 {
            self.port = free_port();
            let port = self.port.to_string();
            let log = self.data.join("server.log");
            let out = self.run(
                "pg_ctl",
                &[
                    "-D",
                    path(&self.data),
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
                return;
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

    /// One value, as `psql` prints it unaligned (`t`, `42`), of `sql` run
    /// as `postgres`.
    fn query(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let mut args = to(&port).to_vec();
        args.extend(["-d", "postgres", "-AtXc", sql]);
        let out = self.run("psql", &args);
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
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
    /// Stops it (if it still runs; one stopped already just fails).
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", &["-D", path(&self.data), "-m", "immediate", "-w", "stop"]);
    }
}

/// A client's arguments to reach the server on `port` as `postgres`.
fn to(port: &str) -> [&str; 6] {
    ["-h", "127.0.0.1", "-p", port, "-U", "postgres"]
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
    for program in ["initdb", "pg_ctl", "postgres", "pg_basebackup", "psql"] {
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
