//! The app's own routes (`route NAME { post: "/..." }`), served under
//! `/app/`: `POST /app/refunds/o1` runs the route `post: "/refunds/{id}"`
//! while the request waits (`Jadpo::run_route`), behind the API's token.
//!
//! - 200 `{"ok": true}` when the action succeeded (its emits written).
//! - A failure answers `{"error": {"code", "message", "kind"}}` with its
//!   kind's status ([`status_of`]), plus the provider's `Retry-After` for
//!   `rate_limited` and `unavailable`: the caller retries, never Jadpo.
//! - 400 for an input its event refuses (the `POST /events/NAME` error),
//!   400 `route.path_segment_invalid` for a path parameter `.` or `..`,
//!   404 `route.not_found`, 405 `route.method_not_allowed` with `Allow`,
//!   503 `store.unavailable` when a success's emits can't be written.
//!
//! Logged: the route's name, the status, the failure's code and kind, the
//! time taken. Never the body, a path parameter or a failure's fields.

use super::ApiState;
use crate::http::error::{event_refused, ApiError};
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderValue, Method as HttpMethod, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use jadpo::{RouteError, RouteOutcome};
use jadpo_core::{Failure, FailureKind};
use jadpo_lang::Method;
use jadpo_runtime::connection::method_name;
use jadpo_store::ScheduleStore;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The status a failure of `kind` answers with. Every kind is named, so a
/// new one must be given its status here.
pub(crate) fn status_of(kind: FailureKind) -> StatusCode {
    match kind {
        FailureKind::NotFound => StatusCode::NOT_FOUND,
        FailureKind::Conflict => StatusCode::CONFLICT,
        FailureKind::Rejected | FailureKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        FailureKind::Unauthorized => StatusCode::FORBIDDEN,
        FailureKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        FailureKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        FailureKind::OutcomeUnknown => StatusCode::BAD_GATEWAY,
        FailureKind::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        // Defects: the app's or Jadpo's, never the caller's.
        FailureKind::InternalFault | FailureKind::LeaseExpired | FailureKind::Overflow => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// `Retry-After` in whole seconds, rounded up so the caller never comes
/// back early.
fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

fn method_of(m: &HttpMethod) -> Option<Method> {
    match *m {
        HttpMethod::GET => Some(Method::Get),
        HttpMethod::POST => Some(Method::Post),
        HttpMethod::PUT => Some(Method::Put),
        HttpMethod::DELETE => Some(Method::Delete),
        _ => None,
    }
}

/// A failed action's answer: its code and kind, never its fields.
fn failed(route: &str, f: &Failure) -> Response {
    let status = status_of(f.kind);
    let message = format!("route `{route}` failed: {} ({})", f.code, f.kind);
    let body = json!({"error": {"code": f.code, "message": message, "kind": f.kind.as_str()}});
    let mut response = (status, Json(body)).into_response();
    if matches!(f.kind, FailureKind::RateLimited | FailureKind::Unavailable) {
        if let Some(wait) = f.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(wait)));
        }
    }
    response
}

/// An input refused, as `POST /events/NAME` refuses a payload.
/// No route answers `method` on `path`: 405 with `Allow` when routes of
/// other methods take the path, 404 otherwise.
fn unrouted(app: &jadpo_lang::App, path: &str) -> Response {
    let mut allowed: Vec<&str> = app
        .routes
        .values()
        .filter(|r| r.path.matches(path).is_some())
        .map(|r| method_name(r.method))
        .collect();
    allowed.sort_unstable();
    allowed.dedup();
    if allowed.is_empty() {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "route.not_found",
            "the app has no route for this path; see its `route` blocks",
        )
        .into_response();
    }
    let allow = allowed.join(", ");
    let mut response = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "route.method_not_allowed",
        format!("this path's routes take {allow}"),
    )
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(header::ALLOW, v);
    }
    response
}

/// How a call ended: its answer and its log line.
enum Ended {
    Succeeded,
    /// The action failed (or ran past its timeout).
    Failed(Failure),
    /// Refused before the run (its input), or its emits not written.
    Refused(ApiError),
}

/// `/app/PATH`: the route of the app for the method and `/PATH`.
pub(super) async fn app_route<S: ScheduleStore>(State(api): State<ApiState<S>>, request: Request) -> Response {
    let started = Instant::now();
    let app = api.jadpo.app();
    // The raw path, still percent-encoded: the route's match decodes each
    // segment once, so an encoded `/` stays inside its parameter.
    let path = request.uri().path().strip_prefix("/app").unwrap_or("/").to_owned();
    let found = method_of(request.method()).and_then(|m| app.route_for(m, &path));
    let Some((route, params)) = found else {
        return unrouted(app, &path);
    };
    let name = route.name.clone();
    // `..` or `%2E%2E` as a parameter is no id: whatever the action makes
    // of it, a call may not move up a path with it (docs/http-api.md).
    if params.values().any(|v| !jadpo_core::path::is_segment(v)) {
        let refused = ApiError::new(
            StatusCode::BAD_REQUEST,
            "route.path_segment_invalid",
            "a path parameter may not be `.` or `..`, nor empty",
        );
        return answered(&name, Ended::Refused(refused), started);
    }
    let trace = super::trace_of(request.headers());
    let ended = match route.input {
        Some(_) => match read_input(request, &api).await {
            Ok(input) => run(&api, &name, params, input, trace).await,
            Err(e) => Ended::Refused(e),
        },
        None => run(&api, &name, params, Value::Null, trace).await,
    };
    answered(&name, ended, started)
}

async fn run<S: ScheduleStore>(
    api: &ApiState<S>,
    name: &str,
    params: std::collections::BTreeMap<String, String>,
    input: Value,
    trace: Option<jadpo_core::TraceContext>,
) -> Ended {
    let written = api
        .jadpo
        .run_route_in_trace(name, params, input, trace, |events| api.emit_each(events));
    match written.await {
        Ok(RouteOutcome::Succeeded(_)) => Ended::Succeeded,
        Ok(RouteOutcome::Failed(f)) => Ended::Failed(f),
        Err(RouteError::Input(e)) => Ended::Refused(event_refused(e)),
        Err(RouteError::Store(_)) => Ended::Refused(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store.unavailable",
            "the route succeeded but the events it emitted could not be written (none was); try again later",
        )),
        Err(RouteError::Unknown(_)) => Ended::Refused(ApiError::new(
            StatusCode::NOT_FOUND,
            "route.not_found",
            "the app has no such route",
        )),
        Err(e) => Ended::Refused(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.code(), e.to_string())),
    }
}

/// The body as JSON, within the events' size limit.
async fn read_input<S: ScheduleStore>(request: Request, api: &ApiState<S>) -> Result<Value, ApiError> {
    super::body::json(Bytes::from_request(request, api).await)
}

/// Logs the call (its route, status, code and kind, time taken; never the
/// body, a path parameter or a failure's fields) and makes its answer.
fn answered(route: &str, ended: Ended, started: Instant) -> Response {
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match ended {
        Ended::Succeeded => {
            tracing::info!(route, status = 200, duration_ms, "route.succeeded");
            (StatusCode::OK, Json(json!({"ok": true}))).into_response()
        }
        Ended::Failed(f) => {
            let response = failed(route, &f);
            let status = response.status().as_u16();
            tracing::warn!(route, status, code = %f.code, kind = %f.kind, duration_ms, "route.failed");
            response
        }
        Ended::Refused(e) => {
            let (status, code) = (e.status.as_u16(), e.code);
            if e.status.is_server_error() {
                tracing::warn!(route, status, code, duration_ms, "route.refused");
            } else {
                tracing::info!(route, status, code, duration_ms, "route.refused");
            }
            e.into_response()
        }
    }
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
