//! What the command line's tests share: the real binary, a folder of its
//! own with an app file and a SQLite store, and deliveries put in every
//! state through the store's own interface (emit, claim, finish), without
//! sleeping.

#![allow(dead_code)]

use jadpo_core::{Budget, CallVerdict, DeliveryId, EventId, FailureKind, FailureRecord, Outcome, Timestamp};
use jadpo_store::{ClaimRequest, Finish, NewEvent, Route, Routes, Store};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The app of the tests: `record` calls `payments` (whose settings come
/// from an environment the tests never set), `audit` and `pinged` call
/// `mailer` through Rust code nobody supplies.
pub(crate) const APP: &str = r#"
event PaymentReceived {
    payment_id: string
    amount_cents: int
}
event Ping { id: string }

connection payments {
    base_url: env("PAYMENTS_URL")
    headers: { "Authorization": secret("PAYMENTS_TOKEN") }
}
connection mailer { base_url: "http://127.0.0.1:9" }

action record_payment(payment_id: string) {
    call payments.post("/payments/{payment_id}", body: event)
}
action notify(id: string) uses mailer

subscriber record { on: PaymentReceived  run: record_payment(event.payment_id) }
subscriber audit { on: PaymentReceived  run: notify(event.payment_id) }
subscriber pinged { on: Ping  run: notify(event.id) }
"#;

/// A folder for one test, removed at its end.
pub(crate) struct Folder {
    pub dir: tempfile::TempDir,
}

impl Folder {
    /// An empty folder.
    pub(crate) fn empty() -> Folder {
        Folder {
            dir: tempfile::Builder::new().prefix("jadpo-cli-").tempdir().unwrap(),
        }
    }

    /// A folder holding [`APP`] as `app.jadpo`.
    pub(crate) fn with_app() -> Folder {
        let f = Folder::empty();
        f.write("app.jadpo", APP);
        f
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path().join(name), text).unwrap();
    }

    /// The SQLite store's URL in this folder (absolute).
    pub(crate) fn store_url(&self) -> String {
        format!("sqlite:{}", self.path().join("jadpo.db").display())
    }

    /// Runs `jadpo ARGS` in this folder, with no `JADPO_STORE` and none of
    /// the app's variables.
    pub(crate) fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[], None)
    }

    pub(crate) fn run_with(&self, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_jadpo"));
        cmd.args(args)
            .current_dir(self.path())
            .env_remove("JADPO_STORE")
            .env_remove("PAYMENTS_URL")
            .env_remove("PAYMENTS_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("jadpo runs");
        if let Some(text) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        Run(child.wait_with_output().unwrap())
    }
}

/// A finished run of the binary.
#[derive(Debug)]
pub(crate) struct Run(pub Output);

impl Run {
    pub(crate) fn code(&self) -> i32 {
        self.0.status.code().expect("exited, not killed")
    }

    pub(crate) fn stdout(&self) -> String {
        String::from_utf8(self.0.stdout.clone()).unwrap()
    }

    pub(crate) fn stderr(&self) -> String {
        String::from_utf8(self.0.stderr.clone()).unwrap()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.0.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            )
        })
    }

    /// Asserts the exit code and, for a failure, the error's code on stderr.
    #[track_caller]
    pub(crate) fn expect(&self, code: i32, error: Option<&str>) -> &Run {
        assert_eq!(
            self.code(),
            code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
        if let Some(e) = error {
            assert!(
                self.stderr().contains(&format!("error[{e}]")),
                "expected error[{e}] on stderr:\n{}",
                self.stderr()
            );
        }
        self
    }
}

pub(crate) fn now() -> Timestamp {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
    Timestamp::from_millis(ms as i64)
}

/// Deliveries in every state, made through the store.
#[derive(Clone, Debug)]
pub(crate) struct Seeded {
    /// `record`'s five attempts that found `payments` unavailable: due again
    /// in an hour. Together they opened its breaker.
    pub retrying: Vec<DeliveryId>,
    /// `record`'s sixth, held by the open breaker.
    pub held: DeliveryId,
    /// `audit`: failed with `http.400` (rejected).
    pub failed: DeliveryId,
    /// `audit`: parked with `http.timeout_after_send` (outcome_unknown).
    pub parked: DeliveryId,
    /// `pinged`: succeeded.
    pub succeeded: DeliveryId,
    /// `pinged`: due, never claimed.
    pub due: DeliveryId,
    pub held_event: EventId,
}

fn routes() -> Routes {
    let mut routes = Routes::new();
    let route = |c: &str| Route {
        budget: Budget::DEFAULT,
        connections: vec![c.to_owned()],
    };
    routes.insert("record", route("payments"));
    routes.insert("audit", route("mailer"));
    routes.insert("pinged", route("mailer"));
    routes
}

async fn emit_one<S: Store>(
    s: &S,
    event: &str,
    payload: &str,
    subscriber: &str,
    now: Timestamp,
) -> (EventId, DeliveryId) {
    let e = s
        .emit(
            &[NewEvent {
                name: event.into(),
                payload: payload.into(),
                subscribers: vec![subscriber.into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            }],
            now,
        )
        .await
        .unwrap();
    (e[0].event_id, e[0].deliveries[0])
}

async fn claim<S: Store>(s: &S, routes: &Routes, now: Timestamp) -> jadpo_store::ClaimReport {
    s.claim(&ClaimRequest {
        worker: "test",
        routes,
        now,
        limit: 100,
        lease: Duration::from_secs(60),
    })
    .await
    .unwrap()
}

async fn finish_one<S: Store>(
    s: &S,
    routes: &Routes,
    now: Timestamp,
    outcome: Outcome,
    calls: Vec<(String, CallVerdict)>,
) -> DeliveryId {
    let report = claim(s, routes, now).await;
    assert_eq!(report.claimed.len(), 1, "{report:?}");
    let c = &report.claimed[0];
    s.finish(&Finish {
        calls,
        claimed: None,
        ..c.finish(outcome, now, now)
    })
    .await
    .unwrap();
    c.delivery.id
}

/// Puts deliveries in every state (see [`Seeded`]).
pub(crate) async fn seed<S: Store>(s: &S) -> Seeded {
    let routes = routes();
    let now = now();
    let payment = r#"{"payment_id":"p1","amount_cents":100}"#;
    let unavailable = FailureRecord::new("http.503", FailureKind::Unavailable);

    // Five attempts finding `payments` down open its breaker.
    for _ in 0..5 {
        emit_one(s, "PaymentReceived", payment, "record", now).await;
    }
    let report = claim(s, &routes, now).await;
    assert_eq!(report.claimed.len(), 5);
    let mut retrying = Vec::new();
    for c in &report.claimed {
        s.finish(&Finish {
            calls: vec![("payments".into(), CallVerdict::Unavailable)],
            claimed: None,
            ..c.finish(
                Outcome::Retry {
                    at: now.plus(Duration::from_secs(3600)),
                    failure: unavailable.clone(),
                },
                now,
                now,
            )
        })
        .await
        .unwrap();
        retrying.push(c.delivery.id);
    }
    // The next one is held at its claim.
    let (held_event, held) = emit_one(s, "PaymentReceived", payment, "record", now).await;
    let report = claim(s, &routes, now).await;
    assert_eq!(report.held, vec![held], "{report:?}");

    emit_one(s, "PaymentReceived", payment, "audit", now).await;
    let failed = finish_one(
        s,
        &routes,
        now,
        Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)),
        vec![("mailer".into(), CallVerdict::Answered)],
    )
    .await;
    emit_one(s, "PaymentReceived", payment, "audit", now).await;
    let parked = finish_one(
        s,
        &routes,
        now,
        Outcome::Parked(FailureRecord::new(
            "http.timeout_after_send",
            FailureKind::OutcomeUnknown,
        )),
        vec![("mailer".into(), CallVerdict::Unavailable)],
    )
    .await;
    emit_one(s, "Ping", r#"{"id":"x"}"#, "pinged", now).await;
    let succeeded = finish_one(s, &routes, now, Outcome::Succeeded, vec![]).await;
    let (_, due) = emit_one(s, "Ping", r#"{"id":"y"}"#, "pinged", now).await;
    Seeded {
        retrying,
        held,
        failed,
        parked,
        succeeded,
        due,
        held_event,
    }
}

/// Two `pinged` deliveries while `mailer` takes one call at a time: the
/// first runs, the second waits for its slot. Returns (running, waiting).
pub(crate) fn seed_waiting_sqlite(url: &str) -> (DeliveryId, DeliveryId) {
    block_on(async {
        let s = jadpo_store::sqlite::SqliteStore::open(url).await.unwrap();
        let mut routes = routes();
        routes.limit(
            "mailer",
            jadpo_core::limit::Limits {
                rate: None,
                concurrency: Some(1),
            },
        );
        let now = now();
        let (_, first) = emit_one(&s, "Ping", r#"{"id":"a"}"#, "pinged", now).await;
        let (_, second) = emit_one(&s, "Ping", r#"{"id":"b"}"#, "pinged", now).await;
        let report = claim(&s, &routes, now).await;
        assert_eq!(report.claimed.len(), 1, "{report:?}");
        assert_eq!(report.waiting.len(), 1, "{report:?}");
        (first, second)
    })
}

/// A runtime for the store calls of a test.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Seeds a SQLite store at `url`.
pub(crate) fn seed_sqlite(url: &str) -> Seeded {
    block_on(async {
        let store = jadpo_store::sqlite::SqliteStore::open(url).await.unwrap();
        seed(&store).await
    })
}

/// The object of `list` whose `id` is `id`.
pub(crate) fn by_id(list: &Value, id: DeliveryId) -> &Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id.0)
        .unwrap_or_else(|| panic!("no delivery {id} in {list:#}"))
}

/// `n` deliveries of `audit` failed with `http.400`, newest last.
/// One failed `audit` delivery per key, keyed so.
pub(crate) fn seed_failed_keyed_sqlite(url: &str, keys: &[&str]) -> Vec<DeliveryId> {
    block_on(async {
        let s = jadpo_store::sqlite::SqliteStore::open(url).await.unwrap();
        let (routes, now) = (routes(), now());
        let mut ids = Vec::new();
        for key in keys {
            let key = jadpo_core::key::Key::new(jadpo_core::key::KeyValue::Str(key)).unwrap();
            s.emit(
                &[NewEvent {
                    name: "PaymentReceived".into(),
                    payload: r#"{"payment_id":"p1","amount_cents":1}"#.into(),
                    subscribers: vec!["audit".into()],
                    idempotency_key: None,
                    trace: None,
                    keys: [("audit".to_string(), key.into())].into(),
                }],
                now,
            )
            .await
            .unwrap();
            let failed = Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected));
            let calls = vec![("mailer".into(), CallVerdict::Answered)];
            ids.push(finish_one(&s, &routes, now, failed, calls).await);
        }
        ids
    })
}

pub(crate) fn seed_failed_sqlite(url: &str, n: usize) -> Vec<DeliveryId> {
    block_on(async {
        let s = jadpo_store::sqlite::SqliteStore::open(url).await.unwrap();
        let (routes, now) = (routes(), now());
        let mut ids = Vec::new();
        for _ in 0..n {
            emit_one(
                &s,
                "PaymentReceived",
                r#"{"payment_id":"p1","amount_cents":1}"#,
                "audit",
                now,
            )
            .await;
            let failed = Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected));
            let calls = vec![("mailer".into(), CallVerdict::Answered)];
            ids.push(finish_one(&s, &routes, now, failed, calls).await);
        }
        ids
    })
}
