//! What every request must be before a handler sees it (docs/security.md,
//! "What comes in").
//!
//! - **Loopback only, without a token.** A browser on the developer's
//!   machine can reach `jadpo dev` on 127.0.0.1: any page it opens may send
//!   a `text/plain` POST there (a CORS "simple request" needs no preflight),
//!   and DNS rebinding lets a page read the answers under its own name. So
//!   without an API token, a request is served only when its `Host` is
//!   `127.0.0.1`, `localhost` or `[::1]` (421 `request.host_refused`) and its
//!   `Origin`, if any, is one of those too (403 `request.origin_refused`).
//! - **JSON says it is JSON.** A request to the API with a body must send
//!   `Content-Type: application/json` (415 `request.not_json`), token or
//!   not: no web page can send that cross-site without a preflight.
//! - **The body is bounded in size and time.** A `Content-Length` over the
//!   limit is refused before a byte is read, a longer chunked body when it
//!   passes it (413), and a body that takes longer than the body timeout
//!   is 408 `request.timeout`, the connection closed.

use super::error::{self, ApiError};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jadpo_runtime::emit::MAX_PAYLOAD_BYTES;
use std::time::Duration;

/// Whether `host` (a `Host` header's value, or an origin's host and port)
/// names this machine's loopback interface.
pub(super) fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]` or `[::1]:7420`
        Some(rest) => match rest.split_once(']') {
            Some((inside, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(valid_port) => {
                return inside == "::1"
            }
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if valid_port(port) => name,
            Some(_) => return false,
            None => host,
        },
    };
    name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost")
}

fn valid_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// Whether an `Origin` header's value is a page served from loopback.
pub(super) fn loopback_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false; // `null`, from a sandboxed frame or a file
    };
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !rest.contains('/')
        && loopback_host(rest)
}

/// Without a token: only requests that name loopback, from no page or a
/// loopback page.
pub(super) async fn loopback_only(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host.is_some_and(loopback_host) {
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "request.host_refused",
            "without JADPO_API_TOKEN this server answers only requests for 127.0.0.1, localhost or [::1]; \
             set a token to serve other names",
        )
        .into_response();
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        if !origin.to_str().is_ok_and(loopback_origin) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "request.origin_refused",
                "without JADPO_API_TOKEN this server refuses requests from web pages not served from \
                 127.0.0.1, localhost or [::1]",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// The body rules of a router: its time limit, and whether a body must be
/// JSON.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyRules {
    pub timeout: Duration,
    /// The API's routes: a body must say `Content-Type: application/json`.
    pub json: bool,
}

/// Reads the whole body within the rules, or answers for it; the handler
/// then gets it in full. Bodies here are small (at most 256 KiB).
pub(crate) async fn read_body(State(rules): State<BodyRules>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let has_body =
        parts.headers.contains_key(header::TRANSFER_ENCODING) || content_length(&parts.headers).is_some_and(|n| n > 0);
    if !has_body {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let too_large = || over_limit(parts.uri.path());
    if content_length(&parts.headers).is_some_and(|n| n > MAX_PAYLOAD_BYTES as u64) {
        return closing(too_large().into_response());
    }
    if rules.json && parts.method != Method::GET && !is_json(parts.headers.get(header::CONTENT_TYPE)) {
        return closing(
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "request.not_json",
                "a request body must be JSON and say so: `Content-Type: application/json`",
            )
            .into_response(),
        );
    }
    let read = tokio::time::timeout(rules.timeout, axum::body::to_bytes(body, MAX_PAYLOAD_BYTES)).await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) if is_length_limit(&e) => return closing(too_large().into_response()),
        Ok(Err(_)) => {
            return closing(
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "request.invalid",
                    "the request body could not be read",
                )
                .into_response(),
            )
        }
        Err(_) => {
            return closing(
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request.timeout",
                    format!(
                        "the request body did not arrive within {} s",
                        rules.timeout.as_secs_f64()
                    ),
                )
                .into_response(),
            )
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// Events and routes keep the code their callers already know.
fn over_limit(path: &str) -> ApiError {
    if path.starts_with("/events/") || path.starts_with("/app/") {
        error::too_large()
    } else {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request.too_large",
            format!("the request body is over {MAX_PAYLOAD_BYTES} bytes"),
        )
    }
}

fn content_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// `application/json`, with parameters or not, or a `+json` type.
fn is_json(value: Option<&HeaderValue>) -> bool {
    let Some(Ok(value)) = value.map(|v| v.to_str()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The rest of a refused body is not read, so the connection cannot carry
/// another request.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_with_or_without_a_port() {
        for yes in [
            "127.0.0.1",
            "127.0.0.1:7420",
            "localhost",
            "LOCALHOST:80",
            "[::1]",
            "[::1]:7420",
        ] {
            assert!(loopback_host(yes), "{yes}");
        }
        for no in [
            "",
            "attacker.example",
            "attacker.example:7420",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example:7420",
            "127.0.0.2",
            "0.0.0.0:7420",
            "[::1]x",
            "[::2]:7420",
            "127.0.0.1:",
            "127.0.0.1:port",
            "127.0.0.1:7420:1",
            "localhost:123456",
            "x@127.0.0.1",
        ] {
            assert!(!loopback_host(no), "{no}");
        }
    }

    #[test]
    fn loopback_origins() {
        for yes in [
            "http://127.0.0.1:7420",
            "http://localhost",
            "https://[::1]:7420",
            "HTTP://localhost:1",
        ] {
            assert!(loopback_origin(yes), "{yes}");
        }
        for no in [
            "null",
            "http://evil.example",
            "http://127.0.0.1.evil.example:7420",
            "file://",
            "ftp://127.0.0.1",
            "http://127.0.0.1:7420/path",
            "127.0.0.1:7420",
        ] {
            assert!(!loopback_origin(no), "{no}");
        }
    }

    #[test]
    fn json_content_types() {
        let v = |s: &'static str| Some(HeaderValue::from_static(s));
        assert!(is_json(v("application/json").as_ref()));
        assert!(is_json(v("Application/JSON; charset=utf-8").as_ref()));
        assert!(is_json(v("application/vnd.acme+json").as_ref()));
        assert!(!is_json(v("text/plain").as_ref()));
        assert!(!is_json(v("application/x-www-form-urlencoded").as_ref()));
        assert!(!is_json(v("multipart/form-data; boundary=x").as_ref()));
        assert!(!is_json(v("text/json+x").as_ref()));
        assert!(!is_json(None));
    }
}
