//! An app's routes (`route NAME { post: "/..." ... }`): its own synchronous
//! endpoints, whose action runs while the request waits.
//!
//! A route is its caller's call, not Jadpo's: it makes no delivery, is never
//! retried or held by an open breaker, and its calls never count for one.
//! What it emits is written only when it succeeds, all in one transaction.

use crate::{Jadpo, StoreError};
use jadpo_core::{Failure, FailureKind};
use jadpo_runtime::emit::{self, EventError};
use jadpo_runtime::run::{CallLog, EmitLog, RunContext, RunKind};
use jadpo_store::{Emitted, ScheduleStore};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// How a route's run ended: either way, the request's answer.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display())).await?;
/// use jadpo::core::{Failure, FailureKind};
/// use jadpo::RouteOutcome;
/// use std::collections::BTreeMap;
/// const APP: &str = r#"
/// event RefundRequest { amount_cents: int }
/// action refund(order_id: string, amount_cents: int)
/// route refund { post: "/refunds/{order_id}"  input: RefundRequest  run: refund(path.order_id, input.amount_cents) }
/// "#;
/// #[derive(serde::Deserialize)]
/// struct Refund { order_id: String, amount_cents: i64 }
/// let jadpo = jadpo::builder()
///     .app_source("app.jadpo", APP)?
///     .typed_action("refund", |r: Refund, _| async move {
///         if r.amount_cents > 0 { Ok(()) } else { Err(Failure::new("refund.empty", FailureKind::Invalid)) }
///     })
///     .build(store)
///     .await?;
/// let path = BTreeMap::from([("order_id".to_string(), "o-1".to_string())]);
/// let ok = jadpo.run_route("refund", path.clone(), serde_json::json!({"amount_cents": 500})).await?;
/// assert!(matches!(ok, RouteOutcome::Succeeded(_)));
/// let failed = jadpo.run_route("refund", path, serde_json::json!({"amount_cents": 0})).await?;
/// assert!(matches!(failed, RouteOutcome::Failed(f) if f.code == "refund.empty"));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub enum RouteOutcome {
    /// The action succeeded; the events it emitted, if any, are written.
    Succeeded(Vec<Emitted>),
    /// The action failed (or ran past the route's `timeout:`): nothing it
    /// emitted was written. Its `fields` are the action's, never the
    /// caller's to see.
    Failed(Failure),
}

/// Why a route's action did not run, or its success could not be kept.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let store = jadpo::store::sqlite::SqliteStore::open(&format!("sqlite:{}", dir.path().join("j.db").display())).await?;
/// use jadpo::core::{Failure, FailureKind};
/// use std::collections::BTreeMap;
/// const APP: &str = r#"
/// event RefundRequest { amount_cents: int }
/// action refund(order_id: string, amount_cents: int)
/// route refund { post: "/refunds/{order_id}"  input: RefundRequest  run: refund(path.order_id, input.amount_cents) }
/// "#;
/// #[derive(serde::Deserialize)]
/// struct Refund { order_id: String, amount_cents: i64 }
/// let jadpo = jadpo::builder()
///     .app_source("app.jadpo", APP)?
///     .typed_action("refund", |r: Refund, _| async move {
///         if r.amount_cents > 0 { Ok(()) } else { Err(Failure::new("refund.empty", FailureKind::Invalid)) }
///     })
///     .build(store)
///     .await?;
/// let path = BTreeMap::from([("order_id".to_string(), "o-1".to_string())]);
/// let bad = jadpo.run_route("refund", path, serde_json::json!({"amount_cents": "5"})).await.unwrap_err();
/// assert_eq!(bad.code(), "event.invalid");
/// let unknown = jadpo.run_route("nope", BTreeMap::new(), serde_json::Value::Null).await.unwrap_err();
/// assert_eq!(unknown.code(), "route.unknown");
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RouteError {
    /// `route.unknown`: the app declares no route of that name.
    Unknown(String),
    /// The input does not fit the route's `input:` event, refused as an
    /// emit's payload would be (same code and field); nothing ran.
    Input(EventError),
    /// The action succeeded but the events it emitted could not be
    /// written: none was.
    Store(StoreError),
}

impl RouteError {
    /// The stable error code, as its message shows it.
    pub fn code(&self) -> &'static str {
        match self {
            RouteError::Unknown(_) => "route.unknown",
            RouteError::Input(e) => e.code(),
            RouteError::Store(e) => e.code(),
        }
    }
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Unknown(name) => write!(f, "the app declares no route `{name}`"),
            RouteError::Input(e) => e.fmt(f),
            RouteError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RouteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RouteError::Unknown(_) => None,
            RouteError::Input(e) => Some(e),
            RouteError::Store(e) => Some(e),
        }
    }
}

impl<S: ScheduleStore> Jadpo<S> {
    /// Runs the route `name` for one request, under its `timeout:`: `path`
    /// its path parameters, `input` the request's body (ignored when the
    /// route declares no `input:`). On success, what the action emitted is
    /// written (depth 0: a new chain) and this process's workers woken.
    pub async fn run_route(
        &self,
        name: &str,
        path: BTreeMap<String, String>,
        input: Value,
    ) -> Result<RouteOutcome, RouteError> {
        self.run_route_with(name, path, input, |events| async move {
            self.engine.emit_owned(events).await
        })
        .await
    }

    /// [`Jadpo::run_route`], with what the action emitted written by
    /// `write` (all of it, or an error): a process working several stores
    /// writes each event in its own store.
    pub async fn run_route_with<F, Fut>(
        &self,
        name: &str,
        path: BTreeMap<String, String>,
        input: Value,
        write: F,
    ) -> Result<RouteOutcome, RouteError>
    where
        F: FnOnce(Vec<jadpo_store::NewEvent>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Emitted>, StoreError>>,
    {
        self.run_route_in_trace(name, path, input, None, write).await
    }

    /// [`Jadpo::run_route_with`] in the caller's trace: the action's calls
    /// carry it on (`traceparent`), and its emits join it.
    pub async fn run_route_in_trace<F, Fut>(
        &self,
        name: &str,
        path: BTreeMap<String, String>,
        input: Value,
        trace: Option<jadpo_core::TraceContext>,
        write: F,
    ) -> Result<RouteOutcome, RouteError>
    where
        F: FnOnce(Vec<jadpo_store::NewEvent>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Emitted>, StoreError>>,
    {
        let route = self
            .app
            .routes
            .get(name)
            .ok_or_else(|| RouteError::Unknown(name.to_owned()))?;
        let payload = match &route.input {
            Some(event) => {
                emit::prepare(&self.app, event, &input).map_err(RouteError::Input)?;
                input
            }
            None => Value::Null,
        };
        // The request's span, in its caller's trace: the action's calls and
        // emits hang under it.
        let mut span = self.engine.span_recorder().route(
            jadpo_runtime::connection::method_name(route.method),
            &format!("/app{}", route.path),
            trace.as_ref(),
        );
        let trace = span.context().or(trace);
        let emits = EmitLog::default();
        let ctx = RunContext {
            kind: RunKind::Route,
            subscriber: route.name.clone(),
            event_name: route.input.clone().unwrap_or_default(),
            // Each request is new (its caller's to repeat), so its calls'
            // `webhook-id`s must never repeat another's.
            event_public_id: jadpo_store::new_public_id(),
            payload,
            started_at: self.clock.now(),
            deadline: (std::time::Instant::now() + route.timeout).into(),
            // Read by no one: a route's calls never count for a breaker.
            calls: CallLog::default(),
            path,
            depth: 0,
            emits: emits.clone(),
            trace: trace.clone(),
            spans: self.engine.span_recorder().clone(),
        };
        if let Err(failure) = self.engine.execute(ctx, route.timeout).await {
            span.failed(&failure.code);
            return Ok(RouteOutcome::Failed(failure));
        }
        // Checked again as any emit is, for the subscribers to deliver to;
        // one the event refuses is the app's defect, and nothing is written.
        let events = emits
            .take()
            .iter()
            .map(|(event, payload)| {
                // What the route emits joins its caller's trace.
                emit::prepare(&self.app, event, payload).map(|e| jadpo_store::NewEvent {
                    trace: trace.clone(),
                    ..e
                })
            })
            .collect::<Result<Vec<_>, _>>();
        let events = match events {
            Ok(events) => events,
            Err(e) => {
                let code = format!("emit.{}", e.code().trim_start_matches("event."));
                return Ok(RouteOutcome::Failed(Failure::new(code, FailureKind::InternalFault)));
            }
        };
        if events.is_empty() {
            return Ok(RouteOutcome::Succeeded(Vec::new()));
        }
        let emitted = write(events).await.map_err(RouteError::Store)?;
        Ok(RouteOutcome::Succeeded(emitted))
    }
}
