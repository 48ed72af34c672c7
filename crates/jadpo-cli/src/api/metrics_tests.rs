//! `/metrics` over real HTTP on a real SQLite file, on a clock the test
//! moves: each subscriber's oldest due delivery, the histograms of a known
//! attempt and claim, and counts that stop at the cap.

use crate::http::router;
use crate::http::server::{Limits, Serving};
use jadpo_core::{Budget, FailureKind, FailureRecord, Outcome, Timestamp};
use jadpo_runtime::provider::TestProvider;
use jadpo_runtime::ManualClock;
use jadpo_store::sqlite::SqliteStore;
use jadpo_store::{ClaimRequest, Finish, NewEvent, Route, Routes, Store};
use std::sync::Arc;
use std::time::Duration;

const APP: &str = r#"
event Paid { id: string }
event Quiet { id: string }
connection payments { base_url: env("PAYMENTS_URL") }
action charge(id: string) { call payments.post("/p/{id}", body: event) }
subscriber record { on: Paid  run: charge(event.id) }
subscriber audit { on: Paid  run: charge(event.id) }
subscriber idle { on: Quiet  run: charge(event.id) }
"#;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn at(s: u64) -> Timestamp {
    T0.plus(Duration::from_secs(s))
}

struct Served {
    jadpo: jadpo::Jadpo<SqliteStore>,
    store: SqliteStore,
    clock: ManualClock,
    base: String,
    _serving: Serving,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start(provider: &TestProvider) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("jadpo.db").display());
        let store = SqliteStore::open(&url).await.unwrap();
        let clock = ManualClock::new(T0);
        let provider_url = provider.url();
        let jadpo = jadpo::builder()
            .app_source("app.jadpo", APP)
            .unwrap()
            .env(move |k| (k == "PAYMENTS_URL").then(|| provider_url.clone()))
            .clock(Arc::new(clock.clone()))
            .build(store.clone())
            .await
            .unwrap();
        let serving = Serving::start(router(jadpo.clone(), None, true), Limits::default()).await;
        Served {
            jadpo,
            store,
            clock,
            base: format!("http://{}", serving.addr),
            _serving: serving,
            _dir: dir,
        }
    }

    async fn metrics(&self) -> String {
        let r = reqwest::get(format!("{}/metrics", self.base)).await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        r.text().await.unwrap()
    }

    /// `n` deliveries to `subscriber`, emitted at `now`.
    async fn emit(&self, subscriber: &str, n: usize, now: Timestamp) {
        let events: Vec<NewEvent> = (0..n)
            .map(|i| NewEvent {
                name: "Paid".into(),
                payload: format!(r#"{{"id":"{i}"}}"#),
                subscribers: vec![subscriber.into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect();
        self.store.emit(&events, now).await.unwrap();
    }
}

fn has(text: &str, line: &str) {
    assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The age of each subscriber's oldest due delivery, in engine time: a
/// delivery waiting out its backoff is not late, and a subscriber with
/// nothing due shows 0.
#[tokio::test]
async fn the_oldest_due_delivery_of_each_subscriber_ages_in_engine_time() {
    let provider = TestProvider::start().await;
    let s = Served::start(&provider).await;
    s.emit("audit", 1, at(0)).await;
    let mut routes = Routes::new();
    routes.insert(
        "audit",
        Route {
            budget: Budget::DEFAULT,
            connections: vec!["payments".into()],
        },
    );
    let request = ClaimRequest {
        worker: "t",
        routes: &routes,
        now: at(0),
        limit: 10,
        lease: Duration::from_secs(60),
    };
    let claimed = s.store.claim(&request).await.unwrap().claimed;
    let retry = Outcome::Retry {
        at: at(1000),
        failure: FailureRecord::new("http.503", FailureKind::Unavailable),
    };
    let finish = Finish {
        claimed: None,
        ..claimed[0].finish(retry, at(0), at(0))
    };
    s.store.finish(&finish).await.unwrap();
    s.emit("record", 1, at(20)).await;

    s.clock.set(at(80));
    let text = s.metrics().await;
    has(&text, "# TYPE jadpo_oldest_due_age_seconds gauge");
    has(&text, "jadpo_oldest_due_age_seconds{subscriber=\"record\"} 60");
    has(&text, "jadpo_oldest_due_age_seconds{subscriber=\"audit\"} 0");
    has(&text, "jadpo_oldest_due_age_seconds{subscriber=\"idle\"} 0");

    s.clock.set(at(1030));
    let text = s.metrics().await;
    has(&text, "jadpo_oldest_due_age_seconds{subscriber=\"audit\"} 30");
    has(&text, "jadpo_oldest_due_age_seconds{subscriber=\"record\"} 1010");
}

/// One delivery emitted 2 s (engine time) before the worker starts: its
/// first attempt lands in the 2.5 s bucket of emit-to-start, the attempt
/// under the connection it called, and the claims in their histogram.
#[tokio::test]
async fn the_histograms_count_a_known_attempt_and_claim() {
    let provider = TestProvider::start().await;
    let s = Served::start(&provider).await;
    let text = s.metrics().await;
    has(&text, "# TYPE jadpo_attempt_duration_seconds histogram");
    has(&text, "jadpo_attempt_duration_seconds_count{connection=\"payments\"} 0");
    has(&text, "jadpo_emit_to_start_seconds_count 0");
    has(&text, "jadpo_claim_duration_seconds_count 0");

    s.emit("record", 1, at(0)).await;
    s.clock.advance(Duration::from_secs(2));
    let running = s.jadpo.start();
    let mut text = String::new();
    // Polls for the attempt's end, never for a time: the clock stands still.
    for _ in 0..3000 {
        text = s.metrics().await;
        if value(&text, "jadpo_attempt_duration_seconds_count{connection=\"payments\"}") == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.stop().await;
    assert_eq!(provider.calls(), 1);
    has(
        &text,
        "jadpo_attempt_duration_seconds_bucket{connection=\"payments\",le=\"+Inf\"} 1",
    );
    has(
        &text,
        "jadpo_attempt_duration_seconds_bucket{connection=\"payments\",le=\"3600\"} 1",
    );
    has(&text, "jadpo_attempt_duration_seconds_count{connection=\"none\"} 0");

    has(&text, "# TYPE jadpo_emit_to_start_seconds histogram");
    has(&text, "jadpo_emit_to_start_seconds_bucket{le=\"1\"} 0");
    has(&text, "jadpo_emit_to_start_seconds_bucket{le=\"2.5\"} 1");
    has(&text, "jadpo_emit_to_start_seconds_bucket{le=\"+Inf\"} 1");
    has(&text, "jadpo_emit_to_start_seconds_sum 2.000000");
    has(&text, "jadpo_emit_to_start_seconds_count 1");

    // The summary stays beside the histogram, both fed by every claim.
    has(&text, "# TYPE jadpo_claim_seconds summary");
    has(&text, "# TYPE jadpo_claim_duration_seconds histogram");
    let claims = value(&text, "jadpo_claim_duration_seconds_count").unwrap();
    assert!(claims >= 1.0, "{text}");
    let under_an_hour = value(&text, "jadpo_claim_duration_seconds_bucket{le=\"3600\"}");
    assert_eq!(under_an_hour, Some(claims), "{text}");
}

/// With more due deliveries than the cap, the count stops at the cap and
/// says so.
#[tokio::test]
async fn counts_stop_at_the_cap() {
    let provider = TestProvider::start().await;
    let s = Served::start(&provider).await;
    let cap = super::metrics::COUNT_CAP as usize;
    for _ in 0..cap / 1000 {
        s.emit("record", 1000, at(0)).await;
    }
    s.emit("record", 1, at(0)).await;
    let text = s.metrics().await;
    has(&text, &format!("jadpo_deliveries{{state=\"due\"}} {cap}"));
    for name in ["jadpo_deliveries", "jadpo_breaker_held"] {
        let help = text
            .lines()
            .find(|l| l.starts_with(&format!("# HELP {name} ")))
            .unwrap();
        assert!(help.contains(&format!("{cap} or more")), "{help}");
    }
}

/// The Grafana dashboard in `deploy/grafana/jadpo.json` uses only metrics
/// `/metrics` exports: each name in its queries (a histogram's by its
/// family) has its `# TYPE` line, on a store with nothing in it yet, or is
/// one of the process's counters, which `serve` and `dev` add.
#[tokio::test]
async fn the_dashboard_uses_only_exported_metrics() {
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../../deploy/grafana/jadpo.json")).unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"].as_str() {
            exprs.push(query.to_owned());
        }
    }
    let mut used = std::collections::BTreeSet::new();
    for expr in &exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("jadpo_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            used.insert(family.to_owned());
        }
    }
    assert!(used.len() >= 10, "{used:?}");
    let provider = TestProvider::start().await;
    let text = Served::start(&provider).await.metrics().await;
    let missing: Vec<&String> = used
        .iter()
        .filter(|m| !text.lines().any(|l| l.starts_with(&format!("# TYPE {m} "))))
        .filter(|m| !super::metrics::PROCESS_COUNTERS.iter().any(|(name, _)| name == m))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard uses {missing:?}, which /metrics does not export:\n{text}"
    );
}
