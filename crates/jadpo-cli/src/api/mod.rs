//! The HTTP API (docs/http-api.md), served by `jadpo dev` and `jadpo serve`.
//!
//! - `POST /events/NAME`: 202 `{"event_id", "public_id", "deliveries", "delivery_ids"}`;
//!   400 `event.invalid` (with `field`), 404 `event.unknown`, 413
//!   `event.too_large`.
//! - `GET /deliveries` (the filters of `jadpo deliveries`),
//!   `GET /deliveries/ID`, `POST /deliveries/ID/retry`,
//!   `POST /deliveries/ID/skip`, `GET /breakers`:
//!   the same JSON as the command line's `--json` ([`crate::views`]).
//! - `GET /alerts`: the alert messages, newest first.
//! - `GET /metrics`: Prometheus text ([`metrics`]).
//! - `GET /healthz`: 200 when the store answers, 503 otherwise.
//! - `GET /livez`, `GET /readyz`: the engines' loops turn; the stores
//!   answer at this build's schema (`health.rs`).
//! - `/app/...`: the app's own routes (`routes.rs`, docs/app-file.md).
//!
//! `crate::http` mounts it beside the console (`/ui`). With a token, every route but the probes
//! (`/healthz`, `/livez`, `/readyz`) requires
//! `Authorization: Bearer TOKEN` (401 otherwise), compared in constant
//! time. Every error is `{"error": {"code", "message"}}`. No payload, token
//! or secret is ever logged or echoed.

mod auth;
mod body;
mod health;
pub(crate) mod metrics;
#[cfg(test)]
mod metrics_tests;
mod prom;
mod routes;

use crate::http::checks::{self, BodyRules};
use crate::http::error::{event_refused, query_invalid, ApiError};
use crate::http::throttle::Throttle;
use crate::views;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use jadpo::{EmitError, Jadpo};
use jadpo_core::{DeliveryId, DeliveryState};
use jadpo_runtime::emit::MAX_PAYLOAD_BYTES;
use jadpo_store::{ScheduleStore, Store, StoreError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What every handler shares.
struct Api<S: ScheduleStore> {
    /// The first store's: the default.
    jadpo: Jadpo<S>,
    /// Every store the process works, by name, the first the default (one
    /// named `default` for an app without `store` blocks).
    stores: Vec<(String, Jadpo<S>)>,
    token: Option<String>,
    /// Failed bearer checks by address, shared with the console's sign-in.
    throttle: Arc<Throttle>,
}

impl<S: ScheduleStore> Api<S> {
    /// The store a request names with `?store=NAME`, else the first.
    fn pick(&self, params: &mut BTreeMap<String, String>) -> Result<&Jadpo<S>, ApiError> {
        self.pick_named(params).map(|(_, j)| j)
    }

    /// As [`Api::pick`], with the store's name.
    fn pick_named(&self, params: &mut BTreeMap<String, String>) -> Result<(&str, &Jadpo<S>), ApiError> {
        let Some(name) = params.remove("store") else {
            return Ok((self.stores[0].0.as_str(), &self.jadpo));
        };
        self.stores
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, j)| (n.as_str(), j))
            .ok_or_else(|| {
                let known: Vec<&str> = self.stores.iter().map(|(n, _)| n.as_str()).collect();
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "store.unknown",
                    format!("no store `{name}`; the stores are {}", known.join(", ")),
                )
            })
    }

    /// The store an event lives in (its `in STORE`, else the first).
    fn of_event(&self, event: &str) -> &Jadpo<S> {
        let home = self.jadpo.app().store_of(event);
        self.stores
            .iter()
            .find(|(n, _)| Some(n.as_str()) == home)
            .map_or(&self.jadpo, |(_, j)| j)
    }

    /// Writes each event in its own store, one transaction per store: the
    /// emits of a route that succeeded.
    async fn emit_each(&self, events: Vec<jadpo_store::NewEvent>) -> Result<Vec<jadpo_store::Emitted>, StoreError> {
        let mut by_store: Vec<(&Jadpo<S>, Vec<jadpo_store::NewEvent>)> = Vec::new();
        for e in events {
            let j = self.of_event(&e.name);
            match by_store.iter_mut().find(|(s, _)| std::ptr::eq(*s, j)) {
                Some((_, list)) => list.push(e),
                None => by_store.push((j, vec![e])),
            }
        }
        let mut emitted = Vec::new();
        for (j, list) in by_store {
            emitted.extend(j.emit_prepared(&list).await?);
        }
        Ok(emitted)
    }
}

/// A handler's query as sent, every pair kept: a map would keep one of a
/// repeated name's values without a word.
type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// Reads a handler's query, `?store=` and all. A name given twice is
/// refused: which of `state=held&state=failed` was meant?
fn query(params: Params) -> Result<BTreeMap<String, String>, ApiError> {
    let Query(pairs) = params.map_err(|e| query_invalid(format!("the query can't be read: {}", e.body_text())))?;
    let mut map = BTreeMap::new();
    for (name, value) in pairs {
        if map.contains_key(&name) {
            return Err(query_invalid(format!("`{name}` is given more than once")));
        }
        map.insert(name, value);
    }
    Ok(map)
}

/// What every handler and the token check share.
type ApiState<S> = Arc<Api<S>>;

type ApiResult = Result<Response, ApiError>;

/// The API over every store of a process, the first the default:
/// `POST /events/NAME` writes to the event's store, the other routes read
/// the store `?store=NAME` names. With `token`, every route but the probes
/// (`/healthz`, `/livez`, `/readyz`) requires `Authorization: Bearer TOKEN`; wrong tokens count in
/// `throttle`, shared with the console's sign-in. Bodies are read within
/// `body_timeout` ([`checks`]).
pub(crate) fn router<S: ScheduleStore>(
    stores: Vec<(String, Jadpo<S>)>,
    token: Option<String>,
    throttle: Arc<Throttle>,
    body_timeout: Duration,
) -> Router {
    let jadpo = stores[0].1.clone();
    let state: ApiState<S> = Arc::new(Api {
        jadpo,
        stores,
        token,
        throttle,
    });
    let body = BodyRules {
        timeout: body_timeout,
        json: true,
    };
    let guarded = Router::new()
        .route(
            "/events/{name}",
            post(emit::<S>).layer(DefaultBodyLimit::max(MAX_PAYLOAD_BYTES)),
        )
        .route("/deliveries", get(deliveries::<S>))
        .route("/deliveries/{id}", get(delivery::<S>))
        .route("/deliveries/{id}/retry", post(retry::<S>))
        .route("/deliveries/{id}/skip", post(skip::<S>))
        .route("/breakers", get(breakers::<S>))
        .route("/alerts", get(alerts::<S>))
        .route("/metrics", get(metrics_text::<S>))
        .route(
            "/app/",
            any(routes::app_route::<S>).layer(DefaultBodyLimit::max(MAX_PAYLOAD_BYTES)),
        )
        .route(
            "/app/{*path}",
            any(routes::app_route::<S>).layer(DefaultBodyLimit::max(MAX_PAYLOAD_BYTES)),
        )
        // Layers run last-added first: the token before the body is read.
        .route_layer(middleware::from_fn_with_state(body, checks::read_body))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::authorize::<S>));
    Router::new()
        .route("/healthz", get(healthz::<S>))
        .route("/livez", get(health::livez::<S>))
        .route("/readyz", get(health::readyz::<S>))
        .merge(guarded)
        .with_state(state)
}

async fn emit<S: ScheduleStore>(
    State(api): State<ApiState<S>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let payload = body::json(body)?;
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "event.idempotency_key_invalid",
                "the Idempotency-Key header must be visible ASCII",
            )
        })?),
    };
    let mut options = jadpo::EmitOptions::default();
    options.idempotency_key = key.map(str::to_owned);
    options.trace = trace_of(&headers);
    let emitted = api.of_event(&name).emit_with(&name, &payload, &options).await;
    match emitted {
        Ok(emitted) => {
            let ids: Vec<i64> = emitted.deliveries.iter().map(|d| d.0).collect();
            let mut body = json!({
                "event_id": emitted.event_id.0,
                "public_id": emitted.public_id,
                "deliveries": ids.len(),
                "delivery_ids": ids,
            });
            // The first answer again, marked: nothing was made this time.
            if emitted.duplicate {
                body["duplicate"] = json!(true);
                return Ok((StatusCode::OK, Json(body)).into_response());
            }
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
        Err(EmitError::Event(e)) => Err(event_refused(e)),
        Err(EmitError::Store(e)) => Err(ApiError::store(e)),
        Err(e) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.code(), e.to_string())),
    }
}

/// The caller's trace (W3C Trace Context): `traceparent`, and `tracestate`
/// when sent, its headers joined. A `traceparent` sent twice or that does
/// not parse is ignored, as the specification asks of a receiver: the
/// event is still taken, in no trace.
pub(crate) fn trace_of(headers: &HeaderMap) -> Option<jadpo_core::TraceContext> {
    let mut parents = headers.get_all("traceparent").iter();
    let parent = parents.next()?.to_str().ok()?;
    if parents.next().is_some() {
        return None;
    }
    let states: Vec<&str> = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let state = (!states.is_empty()).then(|| states.join(","));
    jadpo_core::TraceContext::parse(parent, state.as_deref()).ok()
}

async fn deliveries<S: ScheduleStore>(State(api): State<ApiState<S>>, params: Params) -> ApiResult {
    let mut params = query(params)?;
    let jadpo = api.pick(&mut params)?;
    let q = views::parse_query(&params).map_err(query_invalid)?;
    let store = jadpo.store().as_ref();
    let list = views::list(store, Some(jadpo.app()), &q)
        .await
        .map_err(ApiError::store)?;
    let names = views::event_names(store, &list).await.map_err(ApiError::store)?;
    Ok(Json(views::deliveries_json(&list, &names)).into_response())
}

fn parse_id(id: &str) -> Result<DeliveryId, ApiError> {
    id.parse().map(DeliveryId).map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "delivery.not_found",
            format!("{id:?} is not a delivery id (a number)"),
        )
    })
}

async fn detail<S: Store>(store: &S, id: DeliveryId) -> Result<Value, ApiError> {
    let d = store
        .delivery(id)
        .await
        .map_err(ApiError::store)?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "delivery.not_found", format!("no delivery {id}")))?;
    let attempts = store.attempts(id).await.map_err(ApiError::store)?;
    let event = store.event(d.event_id).await.map_err(ApiError::store)?;
    let waits_for = store.waits_for(id).await.map_err(ApiError::store)?;
    Ok(views::delivery_detail_json(&d, event.as_ref(), &attempts, waits_for))
}

async fn delivery<S: ScheduleStore>(
    State(api): State<ApiState<S>>,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult {
    let jadpo = api.pick(&mut query(params)?)?;
    let id = parse_id(&id)?;
    Ok(Json(detail(jadpo.store().as_ref(), id).await?).into_response())
}

/// An operator's retry of one failed or parked delivery: a fresh budget,
/// due now. 200 with the delivery as it is now; 409 when it is in another
/// state.
async fn retry<S: ScheduleStore>(State(api): State<ApiState<S>>, Path(id): Path<String>, params: Params) -> ApiResult {
    let jadpo = api.pick(&mut query(params)?)?;
    let id = parse_id(&id)?;
    let store = jadpo.store().as_ref();
    let d = store
        .delivery(id)
        .await
        .map_err(ApiError::store)?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "delivery.not_found", format!("no delivery {id}")))?;
    let not_retryable = |state: DeliveryState| {
        ApiError::new(
            StatusCode::CONFLICT,
            "delivery.not_retryable",
            format!("delivery {id} is {state}: only failed and parked deliveries are retried"),
        )
    };
    if !d.retryable_by_operator() {
        return Err(not_retryable(d.state));
    }
    // As `Jadpo::retry` does for one delivery (due now), written here because
    // that future is not `Send` (it keeps a thread-local random source
    // across an await), which a handler's future must be.
    let now = jadpo.clock().now();
    let retried = store.retry(&[(id, now)], now).await.map_err(ApiError::store)?;
    if !retried.contains(&id) {
        let now = store.delivery(id).await.map_err(ApiError::store)?;
        return Err(not_retryable(now.map_or(d.state, |d| d.state)));
    }
    jadpo.wake();
    Ok(Json(detail(store, id).await?).into_response())
}

/// An operator's skip of one failed or parked delivery
/// (`Jadpo::skip`): `?by=NAME` is recorded as who skipped it (`api`
/// without it). 200 with the delivery as it is now; 409 when it is in
/// another state or was skipped already.
async fn skip<S: ScheduleStore>(State(api): State<ApiState<S>>, Path(id): Path<String>, params: Params) -> ApiResult {
    let mut params = query(params)?;
    let jadpo = api.pick(&mut params)?;
    let by = params.remove("by").unwrap_or_else(|| "api".into());
    if let Some(name) = params.keys().next() {
        return Err(query_invalid(format!(
            "unknown parameter `{name}`; this route takes `by` and `store`"
        )));
    }
    jadpo_core::delivery::check_operator_name(&by).map_err(|e| query_invalid(format!("`by`: {e}")))?;
    let id = parse_id(&id)?;
    let store = jadpo.store().as_ref();
    let not_skippable = |d: &jadpo_core::Delivery| {
        let why = match &d.skipped {
            Some(s) => format!("was skipped already, by {}", s.by),
            None => format!("is {}: only failed and parked deliveries are skipped", d.state),
        };
        ApiError::new(
            StatusCode::CONFLICT,
            "delivery.not_skippable",
            format!("delivery {id} {why}"),
        )
    };
    let not_found = || ApiError::new(StatusCode::NOT_FOUND, "delivery.not_found", format!("no delivery {id}"));
    let d = store
        .delivery(id)
        .await
        .map_err(ApiError::store)?
        .ok_or_else(not_found)?;
    if !d.skippable_by_operator() {
        return Err(not_skippable(&d));
    }
    let skipped = jadpo.skip(&[id], &by).await.map_err(|e| match e {
        jadpo::SkipError::Store(e) => ApiError::store(e),
        jadpo::SkipError::By(e) => query_invalid(format!("`by`: {e}")),
        e => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.code(), e.to_string()),
    })?;
    if !skipped.contains(&id) {
        let now = store
            .delivery(id)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(not_found)?;
        return Err(not_skippable(&now));
    }
    Ok(Json(detail(store, id).await?).into_response())
}

/// The alerts raised, newest first (at most 1,000).
async fn alerts<S: ScheduleStore>(State(api): State<ApiState<S>>, params: Params) -> ApiResult {
    let jadpo = api.pick(&mut query(params)?)?;
    let list = jadpo.store().alerts(1_000).await.map_err(ApiError::store)?;
    Ok(Json(views::alerts_json(&list)).into_response())
}

async fn breakers<S: ScheduleStore>(State(api): State<ApiState<S>>, params: Params) -> ApiResult {
    let jadpo = api.pick(&mut query(params)?)?;
    let store = jadpo.store().as_ref();
    let list = views::breakers(store, Some(jadpo.app()))
        .await
        .map_err(ApiError::store)?;
    let limits = views::limits(store, Some(jadpo.app()), jadpo.clock().now())
        .await
        .map_err(ApiError::store)?;
    Ok(Json(views::breakers_with_limits_json(&list, &limits)).into_response())
}

async fn metrics_text<S: ScheduleStore>(State(api): State<ApiState<S>>, params: Params) -> ApiResult {
    let (name, jadpo) = api.pick_named(&mut query(params)?)?;
    // Events outside any engine's span count with the first store's.
    let first = name == api.stores[0].0;
    let counted: &[&str] = if first { &[name, ""] } else { &[name] };
    let process = metrics::ProcessPart {
        claims: jadpo.claims(),
        timings: jadpo.timings(),
        counted,
    };
    let text = metrics::render(jadpo.store().as_ref(), jadpo.app(), jadpo.clock().now(), &process)
        .await
        .map_err(ApiError::store)?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok((headers, text).into_response())
}

/// 200 when every store answers a read, 503 otherwise.
async fn healthz<S: ScheduleStore>(State(api): State<ApiState<S>>) -> Response {
    for (name, jadpo) in &api.stores {
        // One small read that proves the store answers: never a count,
        // which grows with the rows held.
        let read = tokio::time::timeout(Duration::from_secs(5), jadpo.store().schema_standing()).await;
        if !matches!(read, Ok(Ok(_))) {
            let message = if api.stores.len() == 1 {
                "the store does not answer".to_owned()
            } else {
                format!("the store `{name}` does not answer")
            };
            return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store.unavailable", message).into_response();
        }
    }
    Json(json!({"status": "ok"})).into_response()
}

#[cfg(test)]
mod health_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod trace_tests;
