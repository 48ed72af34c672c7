//! `jadpo dev`, `jadpo serve` and `jadpo demo` as processes: started for
//! real, asked over HTTP, stopped with SIGTERM.

#[path = "support/serve.rs"]
mod serve;

use jadpo_testing::process::Logged;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const APP: &str = r#"
event Ping { id: string }
connection echo { base_url: "http://127.0.0.1:9" }
action forward(id: string) { call echo.post("/ping/{id}", body: event) }
subscriber forward_ping { on: Ping  run: forward(event.id) }
"#;

fn jadpo(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jadpo"));
    cmd.current_dir(dir)
        .env_remove("JADPO_STORE")
        .env_remove("JADPO_API_TOKEN")
        .env_remove("RUST_LOG");
    cmd
}

fn dir_with_app() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP).unwrap();
    dir
}

fn http(method: &str, port: u16, path: &str, body: Option<&str>, token: Option<&str>) -> (u16, String) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn dev_serves_the_api_runs_deliveries_and_stops_on_sigterm() {
    let dir = dir_with_app();
    // Port 0 and the port from the log: never a port picked and let go.
    let mut child = Logged::spawn(jadpo(dir.path()).args(["dev", "--port", "0"]).stdout(Stdio::null()));
    let port = child.port("api.listening");
    let (status, body) = http("POST", port, "/events/Ping", Some(r#"{"id":"a1"}"#), None);
    assert_eq!(status, 202, "{body}");
    // Nothing listens on port 9: the call never leaves, the delivery is
    // retried later with its failure recorded.
    let start = Instant::now();
    loop {
        let (_, body) = http("GET", port, "/deliveries", None, None);
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        if list[0]["last_failure_kind"] == "unavailable" {
            assert_eq!(list[0]["state"], "due");
            assert_eq!(list[0]["last_failure_code"], "http.never_left");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no attempt recorded: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // An attempt ran: every loop has moved, and the store is at this build's schema.
    let (status, body) = http("GET", port, "/livez", None, None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = http("GET", port, "/readyz", None, None);
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = http("GET", port, "/metrics", None, None);
    assert_eq!(status, 200);
    // Counted from the runtime's own events (at least one retry so far).
    assert!(
        metrics.contains("jadpo_attempts_total{outcome=\"retry\"} "),
        "{metrics}"
    );
    assert!(
        metrics.contains("jadpo_failures_total{kind=\"unavailable\"} "),
        "{metrics}"
    );
    let (status, logs) = child.terminate();
    assert!(status.success(), "{status}: {logs}");
    assert!(
        logs.contains(&format!(
            "api=http://127.0.0.1:{port} console=http://127.0.0.1:{port}/ui"
        )),
        "dev.started names the port chosen for --port 0: {logs}"
    );
    assert!(logs.contains("delivery.retry"), "{logs}");
    assert!(logs.contains("process.stopped"), "{logs}");
    assert!(
        dir.path().join(".jadpo/jadpo.db").exists(),
        "the default store is created"
    );
}

/// A broker connection shows wherever a connection does: `jadpo dev`
/// publishing to a Redis nobody listens on opens `bus`'s breaker, and
/// `jadpo breakers`, the console's breakers page (with its limit) and
/// `/metrics` (its breaker, its limit, its attempts' timings) show it.
#[test]
fn a_broker_connections_breaker_shows_in_the_cli_the_console_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("app.jadpo"),
        r#"
event Ping { id: string }
connection bus { driver: redis  url: "redis://127.0.0.1:1"  rate: 100/s }
action forward(id: string) { call bus.publish("pings", body: event, idempotency_key: id) }
subscriber forward_ping { on: Ping  run: forward(event.id) }
"#,
    )
    .unwrap();
    let mut child = Logged::spawn(jadpo(dir.path()).args(["dev", "--port", "0"]).stdout(Stdio::null()));
    let port = child.port("api.listening");
    for i in 0..10 {
        let (status, body) = http("POST", port, "/events/Ping", Some(&format!(r#"{{"id":"p{i}"}}"#)), None);
        assert_eq!(status, 202, "{body}");
    }
    let start = Instant::now();
    loop {
        let (_, body) = http("GET", port, "/breakers", None, None);
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        if list[0]["connection"] == "bus" && list[0]["state"] == "open" && list[0]["held"].as_u64() > Some(0) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "bus never opened: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let store = format!("sqlite:{}", dir.path().join(".jadpo/jadpo.db").display());
    let out = jadpo(dir.path())
        .args(["breakers", "--store", &store, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["connection"], "bus", "{list}");
    assert_eq!(list[0]["state"], "open", "{list}");

    let (status, page) = http("GET", port, "/ui/breakers", None, None);
    assert_eq!(status, 200, "{page}");
    let row = page
        .split("<tr data-connection=\"bus\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for bus: {page}"));
    assert!(row.contains("state-open"), "{row}");
    assert!(row.contains("100/s"), "its limit: {row}");

    let (_, metrics) = http("GET", port, "/metrics", None, None);
    for line in [
        "jadpo_breaker_state{connection=\"bus\",state=\"open\"} 1",
        "jadpo_connection_tokens{connection=\"bus\"}",
        "jadpo_attempt_duration_seconds_count{connection=\"bus\"}",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let (status, logs) = child.terminate();
    assert!(status.success(), "{status}: {logs}");
}

/// `--retention DURATION`: a delivery that failed is pruned once a minute
/// of engine time has passed (120 times faster here), with its event; a
/// retention under a minute, or both flags, is a usage error.
#[test]
fn dev_prunes_finished_deliveries_after_its_retention_duration() {
    let dir = tempfile::tempdir().unwrap();
    let app = APP.replace(
        "run: forward(event.id) }",
        "run: forward(event.id)  retry: { attempts: 1 } }",
    );
    std::fs::write(dir.path().join("app.jadpo"), app).unwrap();
    for (flags, why) in [
        (&["--retention", "30s"][..], "from 1m to 3650d"),
        (
            &["--retention", "5m", "--retention-days", "3"][..],
            "cannot be used with",
        ),
    ] {
        let out = jadpo(dir.path()).arg("dev").args(flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(why), "{flags:?}: {err}");
    }
    let mut child = Logged::spawn(
        jadpo(dir.path())
            .args(["dev", "--port", "0", "--time-scale", "120", "--retention", "1m"])
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    let (status, body) = http("POST", port, "/events/Ping", Some(r#"{"id":"a1"}"#), None);
    assert_eq!(status, 202, "{body}");
    let listed =
        || -> serde_json::Value { serde_json::from_str(&http("GET", port, "/deliveries", None, None).1).unwrap() };
    jadpo_testing::wait::until("the delivery to fail", || listed()[0]["state"] == "failed");
    jadpo_testing::wait::until("the failed delivery pruned", || {
        listed().as_array().is_some_and(Vec::is_empty)
    });
    let (status, logs) = child.terminate();
    assert!(status.success(), "{status}: {logs}");
    assert!(logs.contains("retention.pruned"), "{logs}");
}

/// An API token `serve` takes: 32 characters or more.
use serve::TOKEN;

#[test]
fn serve_requires_a_token_and_a_store_and_refuses_time_scale() {
    let dir = dir_with_app();
    let db = format!("sqlite:{}", dir.path().join("s.db").display());
    let out: Output = jadpo(dir.path()).args(["serve", "--store", &db]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("serve.token_missing"));

    // A token short enough to guess is refused, saying how to make one.
    let out = jadpo(dir.path())
        .args(["serve", "--store", &db])
        .env("JADPO_API_TOKEN", &TOKEN[..31])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("serve.token_too_short") && err.contains("openssl rand -hex 32"),
        "{err}"
    );

    let out = jadpo(dir.path())
        .args(["serve"])
        .env("JADPO_API_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("serve.store_missing"));

    let out = jadpo(dir.path())
        .args(["serve", "--store", &db, "--time-scale", "10"])
        .env("JADPO_API_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("serve.time_scale_refused"));

    let out = jadpo(dir.path())
        .args(["serve", "--store", "mysql://x"])
        .env("JADPO_API_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("store.url_invalid"));
}

#[test]
fn serve_logs_json_lines_and_guards_the_api_with_its_token() {
    let dir = dir_with_app();
    let db = format!("sqlite:{}", dir.path().join("s.db").display());
    let mut child = Logged::spawn(
        jadpo(dir.path())
            .args(["serve", "--store", &db, "--bind", "127.0.0.1", "--port", "0"])
            .env("JADPO_API_TOKEN", TOKEN)
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    assert_eq!(http("GET", port, "/deliveries", None, None).0, 401);
    assert_eq!(http("GET", port, "/deliveries", None, Some("wrong")).0, 401);
    assert_eq!(
        http("POST", port, "/events/Ping", Some(r#"{"id":"x"}"#), Some(TOKEN)).0,
        202
    );
    // The probes need no token: an orchestrator's carry none.
    jadpo_testing::wait::until("every loop's first beat", || {
        http("GET", port, "/livez", None, None).0 == 200
    });
    let (status, body) = http("GET", port, "/readyz", None, None);
    assert_eq!(status, 200, "{body}");
    let (status, logs) = child.terminate();
    assert!(status.success());
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["event"].is_string(), "{line}");
        assert!(!line.contains(TOKEN), "the token never reaches a log: {line}");
    }
}

/// Hundreds of sockets sending half a request, under a low file limit:
/// `serve` keeps answering (its cap keeps it under the limit, its header
/// timeout frees the sockets), and a SIGTERM with a body still coming
/// stops it within its shutdown timeout, not when the client leaves.
#[test]
fn serve_outlasts_a_flood_of_unfinished_requests_and_stops_promptly() {
    use std::io::Write;
    let dir = dir_with_app();
    let db = format!("sqlite:{}", dir.path().join("s.db").display());
    let bin = env!("CARGO_BIN_EXE_jadpo");
    let mut child = Logged::spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -n 256 && exec '{bin}' serve --store '{db}' --bind 127.0.0.1 --port 0 \
                 --header-timeout 1s --max-connections 128 --shutdown-timeout 1s"
            ))
            .current_dir(dir.path())
            .env_remove("JADPO_STORE")
            .env_remove("RUST_LOG")
            .env("JADPO_API_TOKEN", TOKEN)
            .stdout(Stdio::null()),
    );
    let port = child.port("api.listening");
    let flood: Vec<std::net::TcpStream> = (0..300)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
            s
        })
        .collect();
    let bound = Duration::from_secs(60);
    assert_eq!(serve::http(port, "GET", "/healthz", None, bound).0, 200);
    assert_eq!(
        serve::http(port, "POST", "/events/Ping", Some(r#"{"id":"x"}"#), bound).0,
        202
    );
    drop(flood);
    let mut pending = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        pending,
        "POST /events/Ping HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    )
    .unwrap();
    let (status, logs) = child.terminate();
    assert!(status.success(), "{logs}");
    assert!(!logs.contains("Too many open files"), "{logs}");
    drop(pending);
}

#[test]
fn demo_delivers_everything_through_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let out = jadpo(dir.path())
        .args([
            "demo",
            "--events",
            "60",
            "--down-minutes",
            "5",
            "--time-scale",
            "600",
            "--no-compare",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("breaker OPENED"), "{stdout}");
    assert!(stdout.contains("breaker CLOSED"), "{stdout}");
    let delivered = stdout.lines().find(|l| l.starts_with("delivered")).unwrap();
    assert!(delivered.split_whitespace().nth(1) == Some("60"), "{delivered}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("connection_unavailable alert") && l.contains("true")),
        "{stdout}"
    );
}

/// Two `jadpo serve` processes on one PostgreSQL store share the work:
/// every delivery runs once, and both processes run some. That both do is
/// forced, not hoped for: the provider answers nothing until five calls are
/// in flight at once, more than one process's four workers can make.
#[test]
fn two_serve_processes_share_one_postgres_store() {
    use jadpo_runtime::provider::{Behaviour, TestProvider};
    use jadpo_store::postgres::testing::TestSchema;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let provider = rt.block_on(TestProvider::start());
    provider.set(Behaviour::Together { calls: 5 });
    let url = schema.url_with_search_path();
    let dir = tempfile::tempdir().unwrap();
    let app = APP.replace("http://127.0.0.1:9", &provider.url());
    std::fs::write(dir.path().join("app.jadpo"), app).unwrap();
    let mut children: Vec<Logged> = (0..2)
        .map(|_| {
            Logged::spawn(
                jadpo(dir.path())
                    .args([
                        "serve",
                        "--store",
                        &url,
                        "--bind",
                        "127.0.0.1",
                        "--port",
                        "0",
                        "--workers",
                        "4",
                    ])
                    .env("JADPO_API_TOKEN", TOKEN)
                    .stdout(Stdio::null()),
            )
        })
        .collect();
    let ports: Vec<u16> = children.iter_mut().map(|c| c.port("api.listening")).collect();
    for i in 0..40 {
        let body = format!(r#"{{"id":"p{i}"}}"#);
        assert_eq!(
            http("POST", ports[i % 2], "/events/Ping", Some(&body), Some(TOKEN)).0,
            202
        );
    }
    let start = Instant::now();
    loop {
        let (_, body) = http(
            "GET",
            ports[1],
            "/deliveries?state=succeeded&limit=100",
            None,
            Some(TOKEN),
        );
        let done = serde_json::from_str::<serde_json::Value>(&body)
            .unwrap()
            .as_array()
            .map_or(0, |a| a.len());
        if done == 40 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "only {done} of 40 succeeded");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut ran = Vec::new();
    for child in children.drain(..) {
        let (status, logs) = child.terminate();
        assert!(status.success());
        let ids: Vec<i64> = logs
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == "delivery.succeeded")
            .filter_map(|v| v["delivery"].as_i64())
            .collect();
        ran.push(ids);
    }
    assert!(
        ran.iter().all(|ids| !ids.is_empty()),
        "both processes ran deliveries: {ran:?}"
    );
    let mut all: Vec<i64> = ran.concat();
    all.sort_unstable();
    let before = all.len();
    all.dedup();
    assert_eq!((before, all.len()), (40, 40), "each delivery succeeded exactly once");
    assert_eq!(provider.calls(), 40, "and the provider was called once for each");
}
