//! The console's bulk retry: a filter of failed or parked deliveries, its
//! dry run, the confirmed retry (the rules of `jadpo retry --state`), and
//! the page that watches it go through.

use super::pages::{chrome, csrf_refused, query_string, Chrome, Filter, Refusal};
use super::{api_error, render, ConsoleState};
use crate::http::error::{query_invalid, ApiError};
use crate::output::duration_short;
use crate::views::{self, DeliveryQuery};
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use jadpo_core::{DeliveryId, DeliveryState};
use jadpo_store::ScheduleStore;
use std::collections::BTreeMap;
use std::time::Duration;

/// The window a bulk retry is spread over, as `jadpo retry`'s default.
const SPREAD: Duration = jadpo::RETRY_SPREAD;

#[derive(Template)]
#[template(path = "console/retry.html")]
struct BulkRetry {
    chrome: Chrome,
    f: Filter,
    /// The filter's fields, for the confirmation's hidden inputs.
    hidden: Vec<(&'static str, String)>,
    /// The dry run: how many match, when asked.
    matching: Option<usize>,
    /// After the retry: how many were retried.
    retried: Option<usize>,
    /// After the retry, refreshed live: how many of the filter's deliveries
    /// are still failed or parked, due, and running.
    progress: Option<Progress>,
    spread: String,
    max: usize,
}

pub(crate) struct Progress {
    pub remaining: usize,
    pub due: usize,
    pub running: usize,
}

/// The filter of a bulk retry: `state` (failed or parked), `subscriber`,
/// `connection`, `key`.
fn bulk_query(params: &BTreeMap<String, String>) -> Result<DeliveryQuery, Refusal> {
    let mut keep: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, v)| matches!(k.as_str(), "state" | "subscriber" | "connection" | "key") && !v.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    keep.entry("state".into()).or_insert_with(|| "failed".into());
    let mut q = views::parse_query(&keep).map_err(query_invalid)?;
    if !matches!(q.state, Some(DeliveryState::Failed | DeliveryState::Parked)) {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            code: "query.invalid",
            message: "A bulk retry takes failed or parked deliveries.".into(),
        });
    }
    q.limit = views::MAX_LIMIT;
    Ok(q)
}

fn bulk_filter(params: &BTreeMap<String, String>) -> Filter {
    let mut f = Filter::of(params);
    f.event.clear();
    if f.state.is_empty() {
        f.state = "failed".into();
    }
    f
}

/// The bulk retry's form, and with `preview` its dry run: how many match.
pub(crate) async fn bulk_form<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    let mut matching = None;
    let retried: Option<usize> = params.get("retried").and_then(|n| n.parse().ok());
    let mut progress = None;
    if retried.is_some() {
        let q = match bulk_query(&params) {
            Ok(q) => q,
            Err(r) => return r.into_response(),
        };
        let (store, app) = (c.jadpo.store().as_ref(), Some(c.jadpo.app()));
        let count = |state| {
            let q = DeliveryQuery {
                state: Some(state),
                ..q.clone()
            };
            async move { views::list(store, app, &q).await.map(|l| l.len()) }
        };
        let state = q.state.unwrap_or(DeliveryState::Failed);
        match tokio::try_join!(count(state), count(DeliveryState::Due), count(DeliveryState::Running)) {
            Ok((remaining, due, running)) => {
                progress = Some(Progress {
                    remaining,
                    due,
                    running,
                })
            }
            Err(e) => return api_error(ApiError::store(e)),
        }
    }
    if params.contains_key("preview") {
        let q = match bulk_query(&params) {
            Ok(q) => q,
            Err(r) => return r.into_response(),
        };
        match views::list(c.jadpo.store().as_ref(), Some(c.jadpo.app()), &q).await {
            Ok(list) => matching = Some(list.len()),
            Err(e) => return api_error(ApiError::store(e)),
        }
    }
    let f = bulk_filter(&params);
    let page = BulkRetry {
        chrome: chrome(&c),
        hidden: f.fields(),
        f,
        matching,
        retried,
        progress,
        spread: duration_short(SPREAD),
        max: views::MAX_LIMIT,
    };
    render(StatusCode::OK, &page)
}

/// The confirmed bulk retry: the same rules as `jadpo retry --state`, a
/// fresh budget for each, due at random within the spread.
pub(crate) async fn bulk_retry<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    if !c.csrf_ok(form.get("csrf")) {
        return csrf_refused();
    }
    let q = match bulk_query(&form) {
        Ok(q) => q,
        Err(r) => return r.into_response(),
    };
    let store = c.jadpo.store().as_ref();
    let list = match views::list(store, Some(c.jadpo.app()), &q).await {
        Ok(list) => list,
        Err(e) => return api_error(ApiError::store(e)),
    };
    let ids: Vec<DeliveryId> = list.iter().map(|d| d.id).collect();
    let retried = match c.jadpo.retry(&ids, SPREAD).await {
        Ok(r) => r.len(),
        Err(e) => return api_error(ApiError::store(e)),
    };
    // Post, then redirect, then get: the page that watches the progress
    // can be reloaded without retrying again.
    let mut params: BTreeMap<String, String> = bulk_filter(&form)
        .fields()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    params.insert("retried".into(), retried.to_string());
    Redirect::to(&format!("/ui/retry{}", query_string(&params))).into_response()
}
