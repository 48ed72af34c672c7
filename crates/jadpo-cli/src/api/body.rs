//! A request's body as JSON: what an event's emit and an app route's call
//! both read, with the same codes.

use crate::http::error::{too_large, ApiError};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde_json::Value;

/// The body as read by axum, as JSON: 413 `event.too_large` over the
/// events' size limit, 400 `request.invalid` if it could not be read, 400
/// `event.invalid` if it is not JSON.
pub(super) fn json(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "request.invalid",
                "the request body could not be read",
            )
        }
    })?;
    // serde_json's message names a line and column, never the text.
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "event.invalid",
            format!("the body is not JSON: {e}"),
        )
    })
}
