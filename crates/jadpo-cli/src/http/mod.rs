//! The HTTP server of `jadpo dev` and `jadpo serve`: the API
//! ([`crate::api`], docs/http-api.md) at `/` and the console
//! ([`crate::console`], docs/console.md) at `/ui`, mounted side by side.
//!
//! What both need lives here, so neither imports the other: the error
//! answers ([`error`]), the checks every request passes before a handler
//! ([`checks`]: loopback only without a token, JSON bodies, bounded
//! bodies), the throttle of wrong tokens that the API's bearer check and
//! the console's sign-in share ([`throttle`]), and the listener that bounds
//! what each client may hold ([`server`]).

pub(crate) mod checks;
pub(crate) mod error;
pub(crate) mod server;
pub(crate) mod throttle;

use axum::http::StatusCode;
use axum::middleware;
use axum::routing::get;
use axum::Router;
use error::ApiError;
use jadpo::Jadpo;
use jadpo_store::ScheduleStore;
use std::sync::Arc;

/// The API and console over one store, as `router_of_stores` with the
/// default limits.
#[cfg(test)]
pub(crate) fn router<S: ScheduleStore>(jadpo: Jadpo<S>, token: Option<String>, loopback: bool) -> Router {
    router_of_stores(
        vec![(crate::store_url::DEFAULT_NAME.to_owned(), jadpo)],
        token,
        loopback,
        &server::Limits::default(),
    )
}

/// The API over every store of a process (the first the default) and the
/// console at `/ui` over the first. With `token`, every route but the
/// probes (`/healthz`, `/livez`, `/readyz`) requires `Authorization: Bearer TOKEN`, and the console its
/// sign-in; without one, only loopback clients are served
/// ([`checks::loopback_only`]). `loopback` says the server listens on
/// loopback only, so the console's cookie need not be `Secure`.
pub(crate) fn router_of_stores<S: ScheduleStore>(
    stores: Vec<(String, Jadpo<S>)>,
    token: Option<String>,
    loopback: bool,
    limits: &server::Limits,
) -> Router {
    let token = token.filter(|t| !t.is_empty());
    let open = token.is_none();
    let throttle = Arc::new(throttle::Throttle::new(limits.throttle_first_wait));
    let console_body = checks::BodyRules {
        timeout: limits.body_timeout,
        json: false,
    };
    let console = crate::console::router(stores[0].1.clone(), token.clone(), !loopback, throttle.clone())
        .layer(middleware::from_fn_with_state(console_body, checks::read_body));
    let all = crate::api::router(stores, token, throttle, limits.body_timeout)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .nest("/ui", console)
        .route("/ui/", get(|| async { axum::response::Redirect::permanent("/ui") }));
    if open {
        all.layer(middleware::from_fn(checks::loopback_only))
    } else {
        all
    }
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "api.not_found",
        "no such route; see docs/http-api.md",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "api.method_not_allowed",
        "this route does not take that method; see docs/http-api.md",
    )
}

#[cfg(test)]
mod edge_tests;
