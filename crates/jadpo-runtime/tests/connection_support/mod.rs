//! Shared by the `connection_*` tests: an app with one connection to a
//! test provider, and calls to it.
#![allow(dead_code)]

use jadpo_lang::{App, Method};
use jadpo_runtime::connection::{CallOutcome, CallRequest, Connections};
use std::time::Duration;
use tokio::time::Instant;

pub(crate) const NOW_S: i64 = 1_790_000_000;

/// Checks an app file, panicking with its diagnostics.
pub(crate) fn app(source: &str) -> App {
    let checked = jadpo_lang::check("test.jadpo", source);
    match checked.app {
        Some(app) => app,
        None => panic!("{}", checked.render(source)),
    }
}

/// One connection `p` with its base URL from `env("P_URL")` and these
/// extra settings, one per line.
pub(crate) fn one_connection(settings: &str) -> App {
    app(&format!(
        "connection p {{\n    driver: http\n    base_url: env(\"P_URL\")\n{settings}\n}}\n"
    ))
}

/// Resolves `app` with `P_URL` set to `url` and the other variables given.
pub(crate) fn resolve(app: &App, url: &str, vars: &[(&str, &str)]) -> Connections {
    let url = url.to_owned();
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Connections::resolve(app, move |name| {
        if name == "P_URL" {
            return Some(url.clone());
        }
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .expect("the connections resolve")
}

pub(crate) fn request(method: Method, path: &str) -> CallRequest {
    CallRequest {
        connection: "p".into(),
        method,
        path: path.into(),
        path_template: path.into(),
        body: None,
        idempotency_key: None,
        message_id: "msg_1".into(),
        trace: None,
        spans: Default::default(),
    }
}

pub(crate) fn post(body: serde_json::Value) -> CallRequest {
    CallRequest {
        body: Some(body),
        ..request(Method::Post, "/things")
    }
}

pub(crate) fn within(d: Duration) -> Instant {
    Instant::now() + d
}

/// Calls with a 30 s deadline and a fixed seed.
pub(crate) async fn call(connections: &Connections, req: CallRequest) -> CallOutcome {
    connections.call(req, within(Duration::from_secs(30)), 7).await
}

/// The failure's kind name, or "ok".
pub(crate) fn kind(outcome: &CallOutcome) -> &'static str {
    match &outcome.result {
        Ok(_) => "ok",
        Err(f) => f.kind.as_str(),
    }
}

pub(crate) fn code(outcome: &CallOutcome) -> String {
    match &outcome.result {
        Ok(_) => "ok".into(),
        Err(f) => f.code.clone(),
    }
}
