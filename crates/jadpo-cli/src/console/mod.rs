//! The operator's console (docs/console.md): HTML pages at `/ui`, served
//! by `jadpo dev` and `jadpo serve` beside the API.
//!
//! Pages are rendered on the server from askama templates (checked at
//! compile time, `templates/console/`); a small script of our own
//! (`console.js`) refreshes a page's numbers every few seconds and is not
//! needed to read anything. Every page reads the store the way the API
//! does, through bounded queries.
//!
//! **Sign-in.** With an API token (always for `serve`), `/ui/login` asks
//! for it once and sets a session cookie: `HttpOnly`, `SameSite=Strict`,
//! `Path=/ui`, and `Secure` unless the server is bound to loopback. Each
//! sign-in is a session of its own: the cookie holds a random secret, the
//! store keeps an HMAC of it under the token until it expires ([`SESSION_TTL`], real time) or
//! is signed out, and every process serving the console asks the store, so
//! a sign-out anywhere is a sign-out everywhere (docs/security.md). Without
//! a cookie a page redirects to the sign-in; with a wrong, expired or
//! signed-out one it is 401.
//!
//! **Forms that change anything** (retry, skip, bulk retry, sign-out) carry a
//! CSRF token, an HMAC of the token (or, without one, of a key made at
//! start): a post without it is 403.

mod actions;
mod bulk;
mod charts;
mod pages;
#[cfg(test)]
mod tests;

use crate::http::error::{throttled, ApiError};
use crate::http::throttle::Throttle;
use askama::Template;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use hmac::{Hmac, Mac};
use jadpo::Jadpo;
use jadpo_store::ScheduleStore;
use sha2::Sha256;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "jadpo_console";

/// How long a sign-in lasts, in real time: a working day, after which an
/// operator signs in again.
pub(crate) const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// What every console handler shares.
pub(crate) struct Console<S: ScheduleStore> {
    pub jadpo: Jadpo<S>,
    /// The API token, when the server has one: then every page needs the
    /// session cookie it signs.
    pub token: Option<String>,
    /// The key CSRF tokens are HMACs under: the token, or a random key
    /// made at start.
    key: Vec<u8>,
    /// Set `Secure` on the cookie: the server is not bound to loopback.
    pub secure: bool,
    /// Failed sign-ins by address, shared with the API's bearer checks.
    throttle: Arc<Throttle>,
}

pub(crate) type ConsoleState<S> = Arc<Console<S>>;

impl<S: ScheduleStore> Console<S> {
    fn mac(&self, purpose: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(b"jadpo-console/");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The token every form that changes something carries.
    pub(crate) fn csrf(&self) -> String {
        self.mac("csrf")
    }

    fn csrf_ok(&self, given: Option<&String>) -> bool {
        given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(self.csrf().as_bytes())))
    }
}

/// The console's routes, to be nested at `/ui`.
pub(crate) fn router<S: ScheduleStore>(
    jadpo: Jadpo<S>,
    token: Option<String>,
    secure: bool,
    throttle: Arc<Throttle>,
) -> Router {
    let key = match &token {
        Some(t) => t.as_bytes().to_vec(),
        None => rand::random::<[u8; 32]>().to_vec(),
    };
    let state: ConsoleState<S> = Arc::new(Console {
        jadpo,
        token,
        key,
        secure,
        throttle,
    });
    let guarded = Router::new()
        .route("/", get(pages::overview::<S>))
        .route("/deliveries", get(pages::deliveries::<S>))
        .route("/deliveries/{id}", get(pages::delivery::<S>))
        .route("/deliveries/{id}/retry", post(actions::retry_one::<S>))
        .route("/deliveries/{id}/skip", post(actions::skip_one::<S>))
        .route("/breakers", get(pages::breakers::<S>))
        .route("/retry", get(bulk::bulk_form::<S>).post(bulk::bulk_retry::<S>))
        .route("/logout", post(logout::<S>))
        .route_layer(middleware::from_fn_with_state(state.clone(), signed_in::<S>));
    Router::new()
        .route("/login", get(login_form::<S>).post(login::<S>))
        .route("/console.js", get(script))
        .route("/console.css", get(style))
        .merge(guarded)
        .fallback(pages::not_found)
        .with_state(state)
}

/// A page's answer: its HTML, with the headers every console page has.
pub(crate) fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, Html(body)).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    );
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    r
}

pub(crate) fn render(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => html(status, body),
        Err(e) => {
            tracing::error!(error = %e, "console.render_failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered").into_response()
        }
    }
}

fn cookie_of<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// What the store keeps of a session's secret: an HMAC of it under the
/// API token, so whoever reads the store cannot sign in with it, and a new
/// token (a rotation after a leak) ends every session made under the old.
pub(crate) fn session_hash(token: &str, secret: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(b"jadpo-console/session/");
    mac.update(secret.as_bytes());
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A session's expiry is real time, whatever the engine's clock: it
/// measures how long an operator's browser stays trusted.
fn wall_now() -> jadpo_core::Timestamp {
    jadpo_runtime::Clock::now(&jadpo_runtime::SystemClock)
}

/// Lets a request through when the server has no token, or its session
/// cookie names a session the store keeps, unexpired. No cookie: a page
/// redirects to the sign-in (a post is 401); a wrong, expired or
/// signed-out one: 401.
async fn signed_in<S: ScheduleStore>(State(c): State<ConsoleState<S>>, request: Request, next: Next) -> Response {
    let Some(token) = &c.token else {
        return next.run(request).await;
    };
    let Some(secret) = cookie_of(request.headers(), COOKIE) else {
        if request.method() == Method::GET {
            return Redirect::to("/ui/login").into_response();
        }
        return sign_in_again();
    };
    match c
        .jadpo
        .store()
        .session_alive(&session_hash(token, secret), wall_now())
        .await
    {
        Ok(true) => next.run(request).await,
        Ok(false) => sign_in_again(),
        Err(e) => api_error(ApiError::store(e)),
    }
}

fn sign_in_again() -> Response {
    pages::refuse(
        StatusCode::UNAUTHORIZED,
        "Sign in again",
        "This page needs the server's API token: sign in at /ui/login.",
    )
}

#[derive(Template)]
#[template(path = "console/login.html")]
struct Login {
    error: Option<String>,
}

async fn login_form<S: ScheduleStore>(State(c): State<ConsoleState<S>>) -> Response {
    if c.token.is_none() {
        return Redirect::to("/ui").into_response();
    }
    render(StatusCode::OK, &Login { error: None })
}

async fn login<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    let Some(token) = &c.token else {
        return Redirect::to("/ui").into_response();
    };
    let client = client.map(|Extension(ConnectInfo(a))| a.ip());
    let now = std::time::Instant::now();
    if let Some(wait) = client.and_then(|ip| c.throttle.refused(ip, now)) {
        let secs = throttled(wait).retry_after.unwrap_or(1);
        let error = Some(format!(
            "Too many wrong tokens from this address: try again in {secs} seconds."
        ));
        let mut r = render(StatusCode::TOO_MANY_REQUESTS, &Login { error });
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    let given = form.get("token").map(|t| t.trim()).unwrap_or_default();
    if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        if let Some(ip) = client {
            c.throttle.failed(ip, now);
        }
        let error = Some("That is not the server's API token.".to_owned());
        return render(StatusCode::UNAUTHORIZED, &Login { error });
    }
    if let Some(ip) = client {
        c.throttle.succeeded(ip);
    }
    let secret: String = rand::random::<[u8; 32]>().iter().map(|b| format!("{b:02x}")).collect();
    let now = wall_now();
    if let Err(e) = c
        .jadpo
        .store()
        .start_session(&session_hash(token, &secret), now.plus(SESSION_TTL), now)
        .await
    {
        return api_error(ApiError::store(e));
    }
    let secure = if c.secure { "; Secure" } else { "" };
    let cookie = format!(
        "{COOKIE}={secret}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        SESSION_TTL.as_secs()
    );
    let mut r = Redirect::to("/ui").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a cookie of hex"),
    );
    r
}

async fn logout<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    headers: HeaderMap,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    if !c.csrf_ok(form.get("csrf")) {
        return pages::csrf_refused();
    }
    if let (Some(token), Some(secret)) = (&c.token, cookie_of(&headers, COOKIE)) {
        if let Err(e) = c.jadpo.store().end_session(&session_hash(token, secret)).await {
            return api_error(ApiError::store(e));
        }
    }
    let secure = if c.secure { "; Secure" } else { "" };
    let cookie = format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}");
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("a plain cookie"),
    );
    r
}

async fn script() -> Response {
    static_file("text/javascript; charset=utf-8", include_str!("console.js"))
}

async fn style() -> Response {
    static_file("text/css; charset=utf-8", include_str!("console.css"))
}

fn static_file(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    r
}

/// An API error as a console page, for what both share (store errors).
pub(crate) fn api_error(e: ApiError) -> Response {
    pages::Refusal::from(e).into_response()
}
