//! Who may call the API: `Authorization: Bearer TOKEN`, compared in
//! constant time, behind the per-address throttle of wrong tokens
//! ([`crate::http::throttle`]; docs/security.md, "Guessing the token").

use super::ApiState;
use crate::http::error::{throttled, ApiError};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jadpo_store::ScheduleStore;
use subtle::ConstantTimeEq;

pub(super) async fn authorize<S: ScheduleStore>(
    State(api): State<ApiState<S>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &api.token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme is case-insensitive (RFC 9110, 11.1): `BEARER` too.
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let Some(given) = given else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "api.unauthorized",
            "this API requires `Authorization: Bearer TOKEN` (the server's JADPO_API_TOKEN)",
        )
        .into_response();
    };
    let client = peer(&request);
    let now = std::time::Instant::now();
    if let Some(wait) = client.and_then(|ip| api.throttle.refused(ip, now)) {
        return throttled(wait).into_response();
    }
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        if let Some(ip) = client {
            api.throttle.succeeded(ip);
        }
        return next.run(request).await;
    }
    if let Some(ip) = client {
        api.throttle.failed(ip, now);
    }
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "api.unauthorized",
        "the bearer token is not valid",
    )
    .into_response()
}

/// The client's address, as the server saw it.
pub(crate) fn peer(request: &Request) -> Option<std::net::IpAddr> {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}
