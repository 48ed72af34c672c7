//! `/livez` and `/readyz` over real HTTP to the router served on
//! 127.0.0.1:0, on real SQLite files, with the engines started.

use crate::http::router_of_stores;
use crate::http::server::{Limits, Serving};
use jadpo::Jadpo;
use jadpo_runtime::liveness::Loop;
use jadpo_store::sqlite::SqliteStore;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

const APP: &str = r#"
event Ping { id: string }
connection hooks { base_url: "http://127.0.0.1:9" }
action forward(id: string) { call hooks.post("/p/{id}", body: event) }
subscriber forward { on: Ping  run: forward(event.id) }
"#;

/// A process's API over `names`' stores, each a new SQLite file with its
/// engine built (not started), and the bearer token `token`.
struct Probed {
    base: String,
    stores: Vec<(String, Jadpo<SqliteStore>)>,
    dir: tempfile::TempDir,
    _serving: Serving,
}

impl Probed {
    async fn start(names: &[&str], token: Option<&str>) -> Probed {
        let dir = tempfile::tempdir().unwrap();
        let mut stores = Vec::new();
        for name in names {
            let url = format!("sqlite:{}", dir.path().join(format!("{name}.db")).display());
            let store = SqliteStore::open(&url).await.unwrap();
            let app = jadpo::check_app("app.jadpo", APP).unwrap();
            stores.push((name.to_string(), crate::operator::jadpo(app, store).await.unwrap()));
        }
        let router = router_of_stores(stores.clone(), token.map(str::to_owned), true, &Limits::default());
        let serving = Serving::start(router, Limits::default()).await;
        Probed {
            base: format!("http://{}", serving.addr),
            stores,
            dir,
            _serving: serving,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = reqwest::get(format!("{}{path}", self.base)).await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap())
    }

    /// Starts every store's engine in a span naming it, as `serve` does,
    /// and waits for `/livez` to see each loop move.
    async fn run(&self) -> Vec<jadpo_runtime::Running> {
        let running = self
            .stores
            .iter()
            .map(|(name, j)| tracing::info_span!("engine", store = %name).in_scope(|| j.start()))
            .collect();
        jadpo_testing::wait::eventually("every loop's first beat", async || {
            (self.get("/livez").await.0 == StatusCode::OK).then_some(())
        })
        .await;
        running
    }

    /// Takes the last migration off `name`'s store, as a backup restored
    /// from before it would.
    fn roll_back_one_migration(&self, name: &str) {
        let c = jadpo_store::sqlite::rusqlite::Connection::open(self.dir.path().join(format!("{name}.db"))).unwrap();
        c.execute(
            "DELETE FROM jadpo_migrations WHERE version = (SELECT max(version) FROM jadpo_migrations)",
            [],
        )
        .unwrap();
    }
}

/// The loops `/livez` lists in `state`, as `store/loop`.
fn in_state(body: &Value, state: &str) -> Vec<String> {
    body["loops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["state"] == state)
        .map(|l| format!("{}/{}", l["store"].as_str().unwrap(), l["loop"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn livez_is_ok_while_every_loop_of_every_store_moves() {
    let p = Probed::start(&["main", "audit"], None).await;
    let (status, body) = p.get("/livez").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "engines not started yet: {body}"
    );
    assert_eq!(body["error"]["code"], "engine.stalled");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the worker of store `main` has not started"),
        "{body}"
    );
    let running = p.run().await;
    let (status, body) = p.get("/livez").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ok");
    let mut alive = in_state(&body, "alive");
    alive.sort();
    assert_eq!(
        alive,
        [
            "audit/completer",
            "audit/tick",
            "audit/worker",
            "main/completer",
            "main/tick",
            "main/worker"
        ]
    );
    for l in body["loops"].as_array().unwrap() {
        assert!(l["since"].as_str().unwrap().ends_with('Z'), "{l}");
        assert_eq!(l["stalled_after_ms"], 30_000, "{l}");
    }
    for r in running {
        r.stop().await;
    }
    let (status, body) = p.get("/livez").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(in_state(&body, "stopped").len(), 6, "{body}");
}

#[tokio::test]
async fn livez_names_a_stalled_loop_and_since_when() {
    let p = Probed::start(&["main", "audit"], None).await;
    let _running = p.run().await;
    // The audit store's completer stops beating, and that engine's view of
    // the process's time moves on an hour: no test waits that long.
    let liveness = p.stores[1].1.liveness();
    liveness.freeze(Loop::Completer);
    liveness.skew(Duration::from_secs(3_600));
    // The other loops beat again within a second of real time.
    let body = jadpo_testing::wait::eventually("only the frozen loop stalled", async || {
        let (status, body) = p.get("/livez").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        (in_state(&body, "stalled") == ["audit/completer"]).then_some(body)
    })
    .await;
    assert_eq!(body["error"]["code"], "engine.stalled");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the completer of store `audit` has not moved since "),
        "{message}"
    );
    let stalled = body["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["state"] == "stalled")
        .unwrap();
    assert!(stalled["quiet_ms"].as_i64().unwrap() >= 3_600_000, "{stalled}");
    let since = stalled["since"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    let ago = jiff::Timestamp::now().duration_since(since);
    assert!(ago >= jiff::SignedDuration::from_secs(3_600), "{ago:?}");
    assert!(message.ends_with(stalled["since"].as_str().unwrap()), "{message}");
}

#[tokio::test]
async fn readyz_is_503_for_a_store_behind_this_builds_migrations() {
    let p = Probed::start(&["main", "audit"], None).await;
    let (status, body) = p.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ok");
    let build = body["stores"][1]["build"].as_i64().unwrap();
    assert!(build > 1, "{body}");
    assert_eq!(body["stores"][1]["store"], "audit");
    assert_eq!(body["stores"][1]["schema"], build);
    assert_eq!(body["stores"][1]["build"], build);
    p.roll_back_one_migration("audit");
    let (status, body) = p.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "store.schema_older");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the store `audit`: the store's schema is at version {}, older than this jadpo's {build}",
            build - 1
        )),
        "{message}"
    );
}

#[tokio::test]
async fn readyz_is_503_when_the_store_does_not_answer() {
    let p = Probed::start(&["main"], None).await;
    let path = p.dir.path().join("main.db");
    for suffix in ["", "-wal", "-shm"] {
        let f = format!("{}{suffix}", path.display());
        if std::path::Path::new(&f).exists() {
            std::fs::write(&f, vec![b'x'; 8192]).unwrap();
        }
    }
    let (status, body) = p.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "store.unavailable");
    assert_eq!(body["error"]["message"], "the store does not answer");
}

#[tokio::test]
async fn the_probes_need_no_token_where_metrics_does() {
    let p = Probed::start(&["main"], Some("a-token-of-thirty-two-characters-at-least")).await;
    let _running = p.run().await;
    assert_eq!(p.get("/livez").await.0, StatusCode::OK);
    assert_eq!(p.get("/readyz").await.0, StatusCode::OK);
    assert_eq!(p.get("/metrics").await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn readyz_is_503_for_a_postgres_store_behind_this_builds_migrations() {
    use jadpo_store::postgres::testing::TestSchema;
    let Some(schema) = TestSchema::create().await else {
        return;
    };
    let store = schema.store(jadpo_store::postgres::Options::default()).await;
    let app = jadpo::check_app("app.jadpo", APP).unwrap();
    let jadpo = crate::operator::jadpo(app, store).await.unwrap();
    let router = router_of_stores(vec![("default".into(), jadpo)], None, true, &Limits::default());
    let serving = Serving::start(router, Limits::default()).await;
    let get = async || {
        let r = reqwest::get(format!("http://{}/readyz", serving.addr)).await.unwrap();
        (r.status(), r.json::<Value>().await.unwrap())
    };
    let (status, body) = get().await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let build = body["stores"][0]["build"].as_i64().unwrap();
    assert_eq!(body["stores"][0]["schema"], build);
    schema
        .client()
        .await
        .batch_execute("DELETE FROM jadpo_migrations WHERE version = (SELECT max(version) FROM jadpo_migrations)")
        .await
        .unwrap();
    let (status, body) = get().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "store.schema_older");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the store's schema is at version {}, older than this jadpo's {build}",
            build - 1
        )),
        "{message}"
    );
}
