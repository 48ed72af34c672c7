//! The delivery page's buttons: *Retry* (as `jadpo retry ID`) and *Skip*
//! (as `jadpo deliveries skip ID`). Each form carries the session's CSRF
//! token and answers with the delivery's page and a notice.

use super::pages::{csrf_refused, delivery_page, parse_id};
use super::{api_error, ConsoleState};
use crate::http::error::ApiError;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Form;
use jadpo_store::ScheduleStore;
use std::collections::BTreeMap;
use std::time::Duration;

/// A button's post: its CSRF token checked, then its delivery's id read.
fn posted<S: ScheduleStore>(
    c: &ConsoleState<S>,
    form: &BTreeMap<String, String>,
    id: &str,
) -> Result<jadpo_core::DeliveryId, Box<Response>> {
    if !c.csrf_ok(form.get("csrf")) {
        return Err(Box::new(csrf_refused()));
    }
    parse_id(id).map_err(|r| Box::new(r.into_response()))
}

/// The *Retry* button: a fresh budget, due now, as `jadpo retry ID`.
pub(crate) async fn retry_one<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    Path(id): Path<String>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    let id = match posted(&c, &form, &id) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let notice = match c.jadpo.retry(&[id], Duration::ZERO).await {
        Ok(done) if done.contains(&id) => "Retried: due now, with a fresh budget.".to_owned(),
        Ok(_) => "Not retried: only failed and parked deliveries are.".to_owned(),
        Err(e) => return api_error(ApiError::store(e)),
    };
    delivery_page(&c, id, Some(notice)).await
}

/// The *Skip* button: recorded as skipped by the name typed beside it (or
/// `console`), nothing called; a `strict` key it blocked goes on.
pub(crate) async fn skip_one<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    Path(id): Path<String>,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    let id = match posted(&c, &form, &id) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let by = form
        .get("by")
        .map(|b| b.trim())
        .filter(|b| !b.is_empty())
        .unwrap_or("console");
    let notice = match c.jadpo.skip(&[id], by).await {
        Ok(done) if done.contains(&id) => format!("Skipped by {by}: nothing was called, and its key goes on."),
        Ok(_) => "Not skipped: only failed and parked deliveries not skipped yet are.".to_owned(),
        Err(jadpo::SkipError::By(e)) => format!("Not skipped: {e}."),
        Err(jadpo::SkipError::Store(e)) => return api_error(ApiError::store(e)),
        Err(e) => format!("Not skipped: {e}."),
    };
    delivery_page(&c, id, Some(notice)).await
}
