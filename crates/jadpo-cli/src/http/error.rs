//! The error answers of the API and the console alike,
//! `{"error": {"code", "message"}}`: apart from both, so neither imports
//! the other.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use jadpo_runtime::emit::MAX_PAYLOAD_BYTES;
use jadpo_store::StoreError;
use serde_json::json;
use std::time::Duration;

/// An error answer: `{"error": {"code", "message"}}` (and `field` when one
/// is at fault).
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    /// Seconds, for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    pub(crate) fn store(e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound(id) => {
                ApiError::new(StatusCode::NOT_FOUND, "delivery.not_found", format!("no delivery {id}"))
            }
            StoreError::Unavailable(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store.unavailable",
                "the store is unavailable; try again later",
            ),
            e @ StoreError::IdempotencyConflict(_) => {
                ApiError::new(StatusCode::CONFLICT, "event.idempotency_conflict", e.to_string())
            }
            other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store.failed", other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(field) = self.field {
            error["field"] = field.into();
        }
        let mut response = (self.status, Json(json!({ "error": error }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// An event the intake refused: 404 for an unknown one, 413 for one too
/// large, 400 for the rest, naming the field at fault.
pub(crate) fn event_refused(e: jadpo_runtime::emit::EventError) -> ApiError {
    let status = match e.code() {
        "event.unknown" => StatusCode::NOT_FOUND,
        "event.too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError {
        field: e.field().map(str::to_owned),
        ..ApiError::new(status, e.code(), e.message().to_owned())
    }
}

/// 400 `query.invalid`: a query parameter that can't be read.
pub(crate) fn query_invalid(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "query.invalid", message)
}

/// 429 `auth.throttled`, with `Retry-After` in whole seconds (rounded up).
pub(crate) fn throttled(wait: Duration) -> ApiError {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    ApiError {
        retry_after: Some(secs),
        ..ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "auth.throttled",
            format!("too many wrong tokens from this address; try again in {secs} s"),
        )
    }
}

/// A body over the events' size limit: events and app routes answer 413
/// `event.too_large`, the code their callers know.
pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "event.too_large",
        format!("the payload is over {MAX_PAYLOAD_BYTES} bytes"),
    )
}
