//! Signed calls checked by the official Standard Webhooks verifier (PyPI
//! `standardwebhooks`), as a real receiver checks them: every request must
//! verify, against the receiver's own clock.
//!
//! The verifier runs in a Python virtualenv: `$JADPO_TEST_VERIFIER_PYTHON`
//! (`.ci/run` makes one), or one this test makes under the target folder on
//! first use (`python3 -m venv`, then `pip install`). When neither works,
//! `jadpo_testing::skip` decides: each test fails under CI, and is skipped
//! with a banner otherwise.

mod connection_support;

use connection_support::*;
use jadpo_runtime::connection::{CallRequest, Connections};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The version the issue that asked for this test was checked against.
const VERIFIER: &str = "standardwebhooks==1.1.0";

/// One key in every form the libraries read the same: with and without
/// `whsec_`, with and without padding (34 bytes, so base64 pads).
const FORMS: [&str; 4] = [
    "whsec_c2VjcmV0LXdpdGgtcGFkZGluZy0zNA==",
    "whsec_c2VjcmV0LXdpdGgtcGFkZGluZy0zNA",
    "c2VjcmV0LXdpdGgtcGFkZGluZy0zNA==",
    "c2VjcmV0LXdpdGgtcGFkZGluZy0zNA",
];
const NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OLD: &str = "whsec_c2VjcmV0LW5vdC10aGUtc2FtZQ==";

static VENV: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);

fn works(python: &PathBuf) -> bool {
    Command::new(python)
        .args(["-c", "import standardwebhooks"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn make_venv() -> Result<PathBuf, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("standardwebhooks-venv");
    let python = dir.join("bin").join("python");
    if works(&python) {
        return Ok(python);
    }
    let run = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&dir))?;
    run(Command::new(dir.join("bin").join("pip")).args(["install", "--quiet", VERIFIER]))?;
    if works(&python) {
        Ok(python)
    } else {
        Err("standardwebhooks does not import after pip install".into())
    }
}

/// The Python with the verifier, or `None` (skipped) off CI. Every test
/// that asks hears the verdict, not only the first: under CI each fails.
fn python() -> Option<PathBuf> {
    let mut venv = VENV.lock().unwrap_or_else(|e| e.into_inner());
    let found = venv
        .get_or_insert_with(|| match std::env::var_os("JADPO_TEST_VERIFIER_PYTHON") {
            Some(p) => {
                let p = PathBuf::from(p);
                if works(&p) {
                    Ok(p)
                } else {
                    Err(format!(
                        "$JADPO_TEST_VERIFIER_PYTHON ({}) can't import standardwebhooks",
                        p.display()
                    ))
                }
            }
            None => make_venv(),
        })
        .clone();
    drop(venv);
    match found {
        Ok(p) => Some(p),
        Err(why) => {
            jadpo_testing::skip::missing(
                "the official Standard Webhooks verifier (PyPI standardwebhooks)",
                &why,
                "Set JADPO_TEST_VERIFIER_PYTHON to a Python that imports it, or let the test make a virtualenv \
                 (needs python3 -m venv and PyPI)",
            );
            None
        }
    }
}

/// The receiver process, and every line it logged.
struct Receiver {
    child: Child,
    port: u16,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start(python: &PathBuf, secrets: &[&str]) -> Receiver {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/verifier/receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .args(secrets)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the receiver starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port: u16 = lines.next().expect("its port").unwrap().trim().parse().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        Receiver { child, port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The logged requests, once `n` have come.
    async fn requests(&self, n: usize) -> Vec<Value> {
        for _ in 0..500 {
            let seen = self.seen.lock().unwrap().clone();
            if seen.len() >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the receiver logged {:?}", self.seen.lock().unwrap());
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signed(receiver: &Receiver, secret: &str, settings: &str) -> Connections {
    let app = one_connection(&format!("    signing_secret: secret(\"SIGNING\")\n{settings}"));
    resolve(&app, &receiver.url(), &[("SIGNING", secret)])
}

fn to(path: &str, id: &str, body: Value) -> CallRequest {
    CallRequest {
        path: path.into(),
        path_template: path.into(),
        message_id: id.into(),
        ..post(body)
    }
}

fn now_s() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Every form of a secret the libraries accept signs what the verifier,
/// given the same string or another form of it, accepts; bodies of every
/// kind of text, and every call's own id.
#[tokio::test]
async fn every_accepted_secret_form_verifies() {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python, &FORMS);
    let bodies = [
        json!({}),
        json!({"amount_cents": 1200, "note": "café ☕ 𝄞 \u{0}\"\\/\n"}),
        json!({"big": "x".repeat(200_000)}),
    ];
    let mut sent = 0;
    for (f, form) in FORMS.iter().enumerate() {
        let connections = signed(&receiver, form, "");
        for (b, body) in bodies.iter().enumerate() {
            let out = call(
                &connections,
                to(&format!("/secret/{f}"), &format!("msg_{f}_{b}"), body.clone()),
            )
            .await;
            assert_eq!(kind(&out), "ok", "{form}: {out:?}");
            sent += 1;
        }
    }
    let seen = receiver.requests(sent).await;
    for r in &seen {
        assert_eq!(r["verified"], json!([true, true, true, true]), "{r}");
    }
    let ids: std::collections::BTreeSet<&str> = seen.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), sent, "every call its own id");
}

/// During a rotation each message carries a signature per secret: a
/// receiver on the old secret and one on the new both verify it.
#[tokio::test]
async fn two_secrets_during_a_rotation_verify_for_either_receiver() {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python, &[NEW, OLD]);
    let connections = signed(&receiver, &format!("{NEW} {OLD}"), "");
    for path in ["/secret/0", "/secret/1"] {
        let out = call(&connections, to(path, "msg_rotation", json!({"n": 1}))).await;
        assert_eq!(kind(&out), "ok", "{out:?}");
    }
    for r in receiver.requests(2).await {
        assert_eq!(r["verified"], json!([true, true]), "{r}");
    }
    // After the rotation, the old secret alone no longer verifies.
    let connections = signed(&receiver, NEW, "");
    let out = call(&connections, to("/secret/1", "msg_after", json!({}))).await;
    assert_eq!(kind(&out), "unauthorized", "{out:?}");
}

/// A provider too busy to read the first send answers 503 and a
/// Retry-After (1 s here; the wall clock the sends read moves 320 s, as
/// after a `Retry-After: 320`); the connection's resend carries
/// its own timestamp and the same id, and verifies. (The first send's
/// timestamp would be refused as too old.)
#[tokio::test]
async fn a_resend_after_a_long_retry_after_verifies() {
    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python, &[NEW]);
    let mut connections = signed(&receiver, NEW, "    retry: { attempts: 2 }");
    let first = now_s() - 320;
    let reads = Arc::new(std::sync::atomic::AtomicI64::new(0));
    connections.set_wall_clock(Arc::new(move || {
        match reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => first,
            _ => now_s(),
        }
    }));
    let out = call(&connections, to("/busy/0", "msg_busy", json!({"n": 1}))).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    assert_eq!(out.sends, 2);
    let seen = receiver.requests(2).await;
    assert_eq!(seen[0]["status"], 503);
    assert_eq!(seen[1]["status"], 200, "{}", seen[1]);
    assert_eq!(seen[1]["verified"], json!([true]));
    assert_eq!(seen[0]["id"], seen[1]["id"], "a resend is the same message");
    let stamps: Vec<i64> = seen
        .iter()
        .map(|r| r["timestamp"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(stamps[0], first);
    assert!(stamps[1] >= first + 320, "{stamps:?}");
}

/// Through the real engine, a SQLite file and a clock the test moves: an
/// event with two subscribers calling a signed connection. The receiver is
/// too busy for each message's first send, so each delivery fails its first
/// attempt and is retried after its backoff. Every request the receiver
/// reads verifies; a delivery's retry repeats its first attempt's id, and
/// the two deliveries' ids differ.
#[tokio::test]
async fn a_deliverys_retries_verify_and_repeat_its_id() {
    use jadpo_core::{DeliveryState, Timestamp};
    use jadpo_runtime::interpreter::AppExecutor;
    use jadpo_runtime::{Catalog, Engine, ManualClock, WorkerConfig};
    use jadpo_store::{DeliveryFilter, Store};

    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python, &[NEW]);
    let text = r#"
event Paid { id: string }
connection ledger {
    base_url: env("LEDGER_URL")
    signing_secret: secret("LEDGER_SIGNING")
}
action record(id: string) { call ledger.post("/busy/0", body: event) }
subscriber first { on: Paid  run: record(event.id) }
subscriber second { on: Paid  run: record(event.id) }
"#;
    let checked = jadpo_lang::check("app.jadpo", text);
    let rendered = checked.render(text);
    let app = Arc::new(checked.app.unwrap_or_else(|| panic!("{rendered}")));
    let url = receiver.url();
    let env = move |k: &str| match k {
        "LEDGER_URL" => Some(url.clone()),
        "LEDGER_SIGNING" => Some(NEW.to_owned()),
        _ => None,
    };
    let connections = Arc::new(Connections::resolve(&app, &env).unwrap());
    let executor = AppExecutor::new(app.clone(), connections, &env).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store_url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
    let store = Arc::new(jadpo_store::sqlite::SqliteStore::open(&store_url).await.unwrap());
    let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
    let engine = Engine::new(
        store.clone(),
        Arc::new(executor),
        Arc::new(clock.clone()),
        Catalog::from_app(&app),
        WorkerConfig {
            name: "verifier".into(),
            concurrency: 2,
            ..WorkerConfig::default()
        },
    );
    let running = engine.start();
    engine
        .emit(&[jadpo_store::NewEvent {
            name: "Paid".into(),
            payload: r#"{"id":"p1"}"#.into(),
            subscribers: vec!["first".into(), "second".into()],
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        }])
        .await
        .unwrap();
    receiver.requests(2).await;
    // Past the longest first backoff (30 s), moving a second at a time so
    // each retry is claimed as it comes due.
    let succeeded = || async {
        store
            .list(&DeliveryFilter {
                state: Some(DeliveryState::Succeeded),
                ..Default::default()
            })
            .await
            .unwrap()
            .len()
    };
    for _ in 0..200 {
        if succeeded().await == 2 {
            break;
        }
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(succeeded().await, 2);
    running.stop().await;
    let seen = receiver.requests(4).await;
    assert_eq!(seen.len(), 4, "{seen:?}");
    let mut by_id: std::collections::BTreeMap<&str, Vec<&Value>> = Default::default();
    for r in &seen {
        by_id.entry(r["id"].as_str().unwrap()).or_default().push(r);
    }
    assert_eq!(by_id.len(), 2, "one id per delivery: {seen:?}");
    for (id, requests) in by_id {
        assert!(id.starts_with("msg_"), "{id}");
        let statuses: Vec<&Value> = requests.iter().map(|r| &r["status"]).collect();
        assert_eq!(statuses, [&json!(503), &json!(200)], "{id}: {requests:?}");
        assert_eq!(requests[1]["verified"], json!([true]), "{id}");
    }
}

/// An alert and its resend verify like any call: the engine sends an
/// outage's alert to a signed alert route whose receiver is too busy for
/// the first send; the resend after the backoff repeats the id and
/// verifies.
#[tokio::test]
async fn an_alert_and_its_resend_verify() {
    use jadpo_core::BreakerPolicy;
    use jadpo_runtime::alerts::AlertRoute;
    use jadpo_runtime::{Catalog, Engine, FnExecutor, ManualClock, RunContext, WorkerConfig};
    use jadpo_store::conformance::{at, open_breaker};

    let Some(python) = python() else { return };
    let receiver = Receiver::start(&python, &[NEW]);
    let app = one_connection("    signing_secret: secret(\"SIGNING\")\n");
    let connections = Arc::new(resolve(&app, &receiver.url(), &[("SIGNING", NEW)]));
    let store = Arc::new(jadpo_store::SharedMemoryStore::new(BreakerPolicy::DEFAULT));
    open_breaker(&*store, 0).await;
    let clock = ManualClock::new(at(1));
    let route = AlertRoute {
        connections,
        connection: app.connections.keys().next().unwrap().clone(),
        path: "/busy/0".into(),
    };
    let noop = FnExecutor(|_: RunContext| async { Ok::<(), jadpo_core::Failure>(()) });
    let engine = Engine::new(
        store.clone(),
        Arc::new(noop),
        Arc::new(clock.clone()),
        Catalog::new(),
        WorkerConfig::default(),
    )
    .route_alerts(route);
    let running = engine.start();
    receiver.requests(1).await;
    // Past the first backoff's ceiling (5 s), a second at a time.
    for _ in 0..10 {
        if receiver.seen.lock().unwrap().len() >= 2 {
            break;
        }
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = receiver.requests(2).await;
    running.stop().await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (&seen[0]["status"], &seen[1]["status"]),
        (&json!(503), &json!(200)),
        "{seen:?}"
    );
    assert_eq!(seen[0]["id"], seen[1]["id"], "a resend repeats its id");
    assert_eq!(seen[1]["verified"], json!([true]), "{seen:?}");
}
