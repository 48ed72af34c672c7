//! The console's pages: overview, deliveries, one delivery, breakers (the
//! bulk retry's are in `bulk.rs`). Each reads the store through bounded queries (the API's own) and
//! renders a template of `templates/console/`.

use super::{api_error, charts, render, ConsoleState};
use crate::http::error::{query_invalid, ApiError};
use crate::output::{duration_short, time_short};
use crate::views;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use jadpo_core::{Budget, Delivery, DeliveryId, DeliveryState, Timestamp};
use jadpo_store::{AttemptRecord, ScheduleStore};
use std::collections::BTreeMap;

/// A list's filter as its form shows it: empty for none.
#[derive(Default)]
pub(crate) struct Filter {
    pub state: String,
    pub subscriber: String,
    pub connection: String,
    pub event: String,
    pub key: String,
}

impl Filter {
    pub(super) fn of(params: &BTreeMap<String, String>) -> Filter {
        let get = |k: &str| params.get(k).cloned().unwrap_or_default();
        Filter {
            state: get("state"),
            subscriber: get("subscriber"),
            connection: get("connection"),
            event: get("event"),
            key: get("key"),
        }
    }

    /// The filter's fields that are set, as hidden inputs carry them.
    pub(super) fn fields(&self) -> Vec<(&'static str, String)> {
        [
            ("state", &self.state),
            ("subscriber", &self.subscriber),
            ("connection", &self.connection),
            ("key", &self.key),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, v.clone()))
        .collect()
    }
}

/// The overview counts each state up to this many, so it answers fast
/// whatever the store holds (a SQLite file of a million deliveries counts
/// 100,000 succeeded in about 90 ms, 10,000 in a tenth of that). It is also
/// the most one bulk retry takes.
pub(super) const COUNT_CAP: u64 = views::MAX_LIMIT as u64;

/// Deliveries on one page of the list.
pub(super) const PAGE: usize = 50;

/// What every page's layout shows.
pub(crate) struct Chrome {
    pub csrf: String,
    pub signed_in: bool,
    pub now: String,
    /// `scaled 600x since ...` when the store's clock is scaled: every time
    /// on the page is engine time, ahead of the wall clock.
    pub scaled: Option<String>,
}

pub(super) fn chrome<S: ScheduleStore>(c: &ConsoleState<S>) -> Chrome {
    Chrome {
        csrf: c.csrf(),
        signed_in: c.token.is_some(),
        now: time_short(c.jadpo.clock().now()),
        scaled: crate::views::scaled_note(c.jadpo.clock()),
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    title: String,
    message: String,
}

/// A page that says why it refused: 401, 403, 404, 400, 503.
pub(crate) fn refuse(status: StatusCode, title: &str, message: &str) -> Response {
    render(
        status,
        &ErrorPage {
            title: title.to_owned(),
            message: message.to_owned(),
        },
    )
}

pub(crate) fn csrf_refused() -> Response {
    refuse(
        StatusCode::FORBIDDEN,
        "ui.csrf_invalid",
        "This form is missing its CSRF token, or it is from another page: reload the page and try again.",
    )
}

pub(crate) async fn not_found() -> Response {
    refuse(StatusCode::NOT_FOUND, "ui.not_found", "There is no such console page.")
}

fn time_of(t: Option<Timestamp>) -> String {
    t.map(time_short).unwrap_or_default()
}

/// One delivery as a row of the list.
pub(crate) struct Row {
    pub id: i64,
    pub event_id: i64,
    pub event: String,
    pub subscriber: String,
    pub state: &'static str,
    pub attempts: u32,
    pub when: String,
    pub held_on: String,
    pub failure: String,
}

fn row(d: &Delivery, names: &BTreeMap<jadpo_core::EventId, String>) -> Row {
    let when = match d.state {
        DeliveryState::Due => match &d.waiting {
            Some(w) => format!("due {}, {}", time_short(d.due_at), crate::views::waiting_text(w)),
            None => format!("due {}", time_short(d.due_at)),
        },
        DeliveryState::Held => format!("held since {}", time_of(d.held.as_ref().map(|h| h.since))),
        DeliveryState::Running => format!("running until {}", time_of(d.lease.as_ref().map(|l| l.until))),
        DeliveryState::Queued => format!("queued behind key {}", d.key.as_ref().map_or("", |k| k.as_str())),
        _ => format!("finished {}", time_of(d.finished_at)),
    };
    Row {
        id: d.id.0,
        event_id: d.event_id.0,
        event: names.get(&d.event_id).cloned().unwrap_or_default(),
        subscriber: d.subscriber.clone(),
        state: d.state.as_str(),
        attempts: d.attempts,
        when,
        held_on: d.held.as_ref().map(|h| h.connection.clone()).unwrap_or_default(),
        failure: d
            .last_failure
            .as_ref()
            .map(|f| format!("{} ({})", f.code, f.kind))
            .unwrap_or_default(),
    }
}

/// A breaker as a row.
pub(crate) struct BreakerRow {
    pub connection: String,
    pub state: &'static str,
    pub consecutive_unavailable: u32,
    pub pause: String,
    pub since: String,
    pub next_probe: String,
    pub probe: String,
    pub held: u64,
    pub alert_raised: bool,
    /// Its limits and their state now, in words; empty without limits.
    pub limits: String,
}

fn breaker_rows(list: &[jadpo_store::BreakerView]) -> Vec<BreakerRow> {
    list.iter()
        .map(|v| {
            let b = &v.breaker;
            let open = !b.is_closed();
            BreakerRow {
                connection: b.connection.clone(),
                state: b.state.as_str(),
                consecutive_unavailable: b.consecutive_unavailable,
                pause: if open { duration_short(b.pause) } else { String::new() },
                since: time_of(b.outage_since.filter(|_| open)),
                next_probe: time_of(b.probe_due_at()),
                probe: b.probe.map(|p| p.delivery.0.to_string()).unwrap_or_default(),
                held: v.held,
                alert_raised: b.alert_raised,
                limits: String::new(),
            }
        })
        .collect()
}

/// A connection's limits as `views::limits` gives them, in words.
pub(crate) fn limits_text(v: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    if let Some(rate) = v["rate"].as_str() {
        parts.push(format!("{rate}, {} tokens", v["tokens"].as_u64().unwrap_or(0)));
    }
    if let Some(n) = v["concurrency"].as_u64() {
        parts.push(format!(
            "{} of {n} slots in use",
            v["slots_in_use"].as_u64().unwrap_or(0)
        ));
    }
    if let Some(n) = v["waiting"].as_u64().filter(|n| *n > 0) {
        parts.push(format!("{n} waiting"));
    }
    if let Some(t) = v["paused_until"].as_str() {
        parts.push(format!("paused until {t}"));
    }
    if let Some(t) = v["slowed_until"].as_str() {
        parts.push(format!("half rate until {t}"));
    }
    parts.join("; ")
}

/// An alert message as a row.
pub(crate) struct AlertRow {
    pub raised_at: String,
    pub alert: String,
    pub status: &'static str,
    pub subject: String,
    pub since: String,
    pub send: String,
}

fn alert_rows(list: &[jadpo_store::AlertRecord]) -> Vec<AlertRow> {
    list.iter()
        .map(|a| {
            let m = &a.message;
            AlertRow {
                raised_at: time_short(m.raised_at),
                alert: m.alert.clone(),
                status: m.kind.as_str(),
                subject: m.connection.clone().or_else(|| m.schedule.clone()).unwrap_or_default(),
                since: time_short(m.since),
                send: a.sends.state().as_str().to_owned(),
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct Overview {
    chrome: Chrome,
    /// Each state and its count, `10000+` at the cap.
    counts: Vec<(&'static str, String)>,
    /// Deliveries per minute by outcome, the last hour, as SVG.
    chart: String,
    legend: Vec<(&'static str, &'static str)>,
    open: Vec<BreakerRow>,
    breakers: usize,
    alerts: Vec<AlertRow>,
}

pub(crate) async fn overview<S: ScheduleStore>(State(c): State<ConsoleState<S>>) -> Response {
    let store = c.jadpo.store().as_ref();
    let now = c.jadpo.clock().now();
    let read = async {
        let counts = store.counts_up_to(COUNT_CAP).await?;
        let breakers = views::breakers(store, Some(c.jadpo.app())).await?;
        let alerts = store.alerts(10).await?;
        let minutes = store.minutes(charts::since(now)).await?;
        Ok::<_, jadpo_store::StoreError>((counts, breakers, alerts, minutes))
    };
    let (counts, breakers, alerts, minutes) = match read.await {
        Ok(r) => r,
        Err(e) => return api_error(ApiError::store(e)),
    };
    let counts = DeliveryState::ALL
        .iter()
        .map(|s| {
            let n = counts.get(s).copied().unwrap_or(0);
            let shown = if n >= COUNT_CAP {
                format!("{COUNT_CAP}+")
            } else {
                n.to_string()
            };
            (s.as_str(), shown)
        })
        .collect();
    let rows = breaker_rows(&breakers);
    let page = Overview {
        chrome: chrome(&c),
        counts,
        chart: charts::outcomes(&minutes, now),
        legend: charts::OUTCOMES.to_vec(),
        breakers: rows.len(),
        open: rows.into_iter().filter(|b| b.state != "closed").collect(),
        alerts: alert_rows(&alerts),
    };
    render(StatusCode::OK, &page)
}

#[derive(Template)]
#[template(path = "console/deliveries.html")]
struct Deliveries {
    chrome: Chrome,
    f: Filter,
    /// Each state, and whether the filter has it.
    states: Vec<(&'static str, bool)>,
    rows: Vec<Row>,
    /// The query of the next page, when there may be one.
    next: Option<String>,
}

pub(super) fn query_string(params: &BTreeMap<String, String>) -> String {
    let mut out = url_encoded(params);
    if out.is_empty() {
        out.push('?');
    } else {
        out.insert(0, '?');
    }
    out
}

fn url_encoded(params: &BTreeMap<String, String>) -> String {
    params
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The list with the command line's filters (`state`, `subscriber`,
/// `connection`, `event`, `key`), newest first, [`PAGE`] at a time (`before`), and
/// a search by delivery id (`id`) that opens it.
pub(crate) async fn deliveries<S: ScheduleStore>(
    State(c): State<ConsoleState<S>>,
    Query(mut params): Query<BTreeMap<String, String>>,
) -> Response {
    params.retain(|_, v| !v.trim().is_empty());
    if let Some(id) = params.remove("id") {
        return match id.trim().parse::<i64>() {
            Ok(id) => Redirect::to(&format!("/ui/deliveries/{id}")).into_response(),
            Err(_) => refuse(
                StatusCode::BAD_REQUEST,
                "query.invalid",
                &format!("A delivery id is a number, not {id:?}."),
            ),
        };
    }
    let mut q = match views::parse_query(&params).map_err(query_invalid) {
        Ok(q) => q,
        Err(e) => return api_error(e),
    };
    if !params.contains_key("limit") {
        q.limit = PAGE;
    }
    let store = c.jadpo.store().as_ref();
    let list = match views::list(store, Some(c.jadpo.app()), &q).await {
        Ok(l) => l,
        Err(e) => return api_error(ApiError::store(e)),
    };
    let names = match views::event_names(store, &list).await {
        Ok(n) => n,
        Err(e) => return api_error(ApiError::store(e)),
    };
    let next = (list.len() == q.limit).then(|| {
        let mut p = params.clone();
        p.insert("before".into(), list.last().map_or(0, |d| d.id.0).to_string());
        query_string(&p)
    });
    let f = Filter::of(&params);
    let page = Deliveries {
        chrome: chrome(&c),
        states: DeliveryState::ALL
            .iter()
            .map(|s| (s.as_str(), f.state == s.as_str()))
            .collect(),
        f,
        rows: list.iter().map(|d| row(d, &names)).collect(),
        next,
    };
    render(StatusCode::OK, &page)
}

/// An attempt as a row of a delivery's history.
pub(crate) struct AttemptRow {
    pub attempt: u32,
    pub started_at: String,
    pub duration: String,
    pub state: &'static str,
    pub code: String,
    pub kind: String,
}

#[derive(Template)]
#[template(path = "console/delivery.html")]
struct DeliveryPage {
    chrome: Chrome,
    d: Row,
    fields: Vec<(&'static str, String)>,
    history: Vec<AttemptRow>,
    retryable: bool,
    /// Failed or parked and not skipped: the *Skip* button is shown.
    skippable: bool,
    notice: Option<String>,
    /// Its key, and the query of the list of the key's deliveries.
    key: Option<(String, String)>,
    /// Queued: what it waits for, said, and the delivery, linked.
    waits_for: Option<(String, Option<i64>)>,
}

/// Why a page was refused, before it is rendered.
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        refuse(self.status, self.code, &self.message)
    }
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal {
            status: e.status,
            code: e.code,
            message: e.message,
        }
    }
}

pub(super) fn parse_id(id: &str) -> Result<DeliveryId, Refusal> {
    id.parse().map(DeliveryId).map_err(|_| Refusal {
        status: StatusCode::NOT_FOUND,
        code: "delivery.not_found",
        message: format!("{id:?} is not a delivery id."),
    })
}

pub(super) async fn delivery_page<S: ScheduleStore>(
    c: &ConsoleState<S>,
    id: DeliveryId,
    notice: Option<String>,
) -> Response {
    let store = c.jadpo.store().as_ref();
    let d = match store.delivery(id).await {
        Ok(Some(d)) => d,
        Ok(None) => {
            return refuse(
                StatusCode::NOT_FOUND,
                "delivery.not_found",
                &format!("There is no delivery {id}."),
            )
        }
        Err(e) => return api_error(ApiError::store(e)),
    };
    let (attempts, event, waits_for) =
        match tokio::try_join!(store.attempts(id), store.event(d.event_id), store.waits_for(id)) {
            Ok(r) => r,
            Err(e) => return api_error(ApiError::store(e)),
        };
    let names: BTreeMap<_, _> = event.iter().map(|e| (e.id, e.name.clone())).collect();
    let budget = c.jadpo.app().subscribers.get(&d.subscriber).map(|s| s.budget);
    let page = DeliveryPage {
        chrome: chrome(c),
        retryable: d.retryable_by_operator(),
        skippable: d.skippable_by_operator(),
        d: row(&d, &names),
        fields: delivery_fields(&d, budget),
        history: attempts.iter().map(attempt_row).collect(),
        notice,
        key: d.key.as_ref().map(|k| (k.to_string(), key_query(k.as_str()))),
        waits_for: (d.state == DeliveryState::Queued)
            .then(|| (crate::views::queued_text(&d, waits_for), waits_for.map(|w| w.0))),
    };
    render(StatusCode::OK, &page)
}

/// `key=K`, percent-encoded: a key is any text.
fn key_query(key: &str) -> String {
    url_encoded(&BTreeMap::from([("key".to_owned(), key.to_owned())]))
}

/// The delivery's facts, what it waits for first: held, then due, then its
/// budget. The budget's end and attempts left need the subscriber's budget,
/// which an app changed since may no longer have.
fn delivery_fields(d: &Delivery, budget: Option<Budget>) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("attempts", d.attempts.to_string()),
        ("budget from", time_short(d.budget_from)),
        ("held for in all", duration_short(d.held_for)),
        ("created", time_short(d.created_at)),
        ("updated", time_short(d.updated_at)),
    ];
    if let Some(b) = budget {
        fields.insert(
            1,
            ("attempts left", b.attempts().saturating_sub(d.attempts).to_string()),
        );
        fields.insert(2, ("budget ends", time_short(b.deadline(d.budget_from, d.held_for))));
    }
    if d.state == DeliveryState::Due {
        if let Some(w) = &d.waiting {
            fields.insert(0, ("waiting", crate::views::waiting_text(w)));
        }
        fields.insert(0, ("due", time_short(d.due_at)));
    }
    if let Some(h) = &d.held {
        fields.insert(
            0,
            ("held since", format!("{} on {}", time_short(h.since), h.connection)),
        );
    }
    if let Some(f) = &d.last_failure {
        fields.push(("last failure", format!("{} ({})", f.code, f.kind)));
    }
    if let Some(s) = &d.skipped {
        fields.insert(0, ("skipped", crate::views::skipped_text(s)));
    }
    fields
}

fn attempt_row(a: &AttemptRecord) -> AttemptRow {
    AttemptRow {
        attempt: a.attempt,
        started_at: time_short(a.started_at),
        duration: duration_short(a.ended_at.since(a.started_at)),
        state: a.state.as_str(),
        code: a.failure.as_ref().map(|f| f.code.clone()).unwrap_or_default(),
        kind: a
            .failure
            .as_ref()
            .map(|f| f.kind.as_str().to_owned())
            .unwrap_or_default(),
    }
}

pub(crate) async fn delivery<S: ScheduleStore>(State(c): State<ConsoleState<S>>, Path(id): Path<String>) -> Response {
    match parse_id(&id) {
        Ok(id) => delivery_page(&c, id, None).await,
        Err(r) => r.into_response(),
    }
}

#[derive(Template)]
#[template(path = "console/breakers.html")]
struct Breakers {
    chrome: Chrome,
    rows: Vec<BreakerRow>,
    /// Each connection's hour: calls per minute and breaker changes, SVG.
    timelines: Vec<(String, String)>,
    alerts: Vec<AlertRow>,
}

pub(crate) async fn breakers<S: ScheduleStore>(State(c): State<ConsoleState<S>>) -> Response {
    let store = c.jadpo.store().as_ref();
    let now = c.jadpo.clock().now();
    let read = async {
        Ok::<_, jadpo_store::StoreError>((
            views::breakers(store, Some(c.jadpo.app())).await?,
            store.alerts(50).await?,
            store.minutes(charts::since(now)).await?,
            views::limits(store, Some(c.jadpo.app()), now).await?,
        ))
    };
    match read.await {
        Ok((list, alerts, minutes, limits)) => render(
            StatusCode::OK,
            &Breakers {
                chrome: chrome(&c),
                timelines: list
                    .iter()
                    .map(|v| {
                        let name = v.breaker.connection.clone();
                        let svg = charts::timeline(&minutes, &name, now);
                        (name, svg)
                    })
                    .collect(),
                rows: breaker_rows(&list)
                    .into_iter()
                    .map(|mut r| {
                        r.limits = limits.get(&r.connection).map(limits_text).unwrap_or_default();
                        r
                    })
                    .collect(),
                alerts: alert_rows(&alerts),
            },
        ),
        Err(e) => api_error(ApiError::store(e)),
    }
}
