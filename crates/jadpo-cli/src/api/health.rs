//! The probes beside `/healthz`: `GET /livez` (every store's engine's loops
//! turn) and `GET /readyz` (every store answers and its schema is this
//! build's). Like `/healthz` they need no token: an orchestrator's probes
//! carry none (docs/decisions.md, "Probes without a token"), and they say
//! nothing a caller could use: loop names, times and schema versions.

use super::ApiState;
use crate::http::error::ApiError;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use jadpo_core::Timestamp;
use jadpo_runtime::liveness::LoopHealth;
use jadpo_store::ScheduleStore;
use serde_json::{json, Value};
use std::time::Duration;

/// How long `/readyz` waits for a store, as `/healthz` does.
const STORE_WAIT: Duration = Duration::from_secs(5);

/// 200 while every loop of every store's engine has moved within its
/// allowance; 503 `engine.stalled` naming each that has not (stalled,
/// stopped, or never started) and since when.
pub(super) async fn livez<S: ScheduleStore>(State(api): State<ApiState<S>>) -> Response {
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let mut loops = Vec::new();
    let mut down = Vec::new();
    for (store, jadpo) in &api.stores {
        for health in jadpo.liveness().report() {
            let line = loop_json(store, &health, now_ms);
            if !health.alive() {
                down.push(describe(store, api.stores.len(), &health, &line));
            }
            loops.push(line);
        }
    }
    if down.is_empty() {
        return Json(json!({"status": "ok", "loops": loops})).into_response();
    }
    let mut body = error_body("engine.stalled", down.join("; "));
    body["loops"] = Value::from(loops);
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// One loop: its store, name, state, and when it last moved.
fn loop_json(store: &str, h: &LoopHealth, now_ms: i64) -> Value {
    let state = match (h.quiet, h.stopped) {
        (None, _) => "not_started",
        (Some(_), true) => "stopped",
        (Some(_), false) if h.alive() => "alive",
        (Some(_), false) => "stalled",
    };
    let mut line = json!({
        "store": store,
        "loop": h.name,
        "state": state,
        "stalled_after_ms": h.stalled_after.as_millis() as u64,
    });
    if let Some(quiet) = h.quiet {
        let quiet_ms = quiet.as_millis() as i64;
        line["since"] = jadpo_runtime::rfc3339(Timestamp::from_millis(now_ms - quiet_ms)).into();
        line["quiet_ms"] = quiet_ms.into();
    }
    line
}

fn describe(store: &str, stores: usize, h: &LoopHealth, line: &Value) -> String {
    let of = if stores == 1 {
        String::new()
    } else {
        format!(" of store `{store}`")
    };
    match line["since"].as_str() {
        None => format!("the {}{of} has not started", h.name),
        Some(since) if h.stopped => format!("the {}{of} stopped at {since}", h.name),
        Some(since) => format!("the {}{of} has not moved since {since}", h.name),
    }
}

/// 200 when every store answers and its schema is this build's; 503 with
/// the first that is not: `store.unavailable`, `store.schema_older` or
/// `store.schema_newer`.
pub(super) async fn readyz<S: ScheduleStore>(State(api): State<ApiState<S>>) -> Response {
    let mut stores = Vec::new();
    for (name, jadpo) in &api.stores {
        let ready = match tokio::time::timeout(STORE_WAIT, jadpo.readiness()).await {
            Ok(ready) => ready,
            Err(_) => Err(jadpo::Unready::Unavailable),
        };
        match ready {
            Ok(standing) => stores.push(json!({"store": name, "schema": standing.store, "build": standing.build})),
            Err(e) => {
                let message = if api.stores.len() == 1 {
                    e.to_string()
                } else {
                    format!("the store `{name}`: {e}")
                };
                return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.code(), message).into_response();
            }
        }
    }
    Json(json!({"status": "ok", "stores": stores})).into_response()
}

fn error_body(code: &str, message: String) -> Value {
    json!({"error": {"code": code, "message": message}})
}
