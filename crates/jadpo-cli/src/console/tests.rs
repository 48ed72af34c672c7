//! The console's pages and actions over real HTTP, on a real SQLite file:
//! sign-in, CSRF, each page, filters, paging, retry and bulk retry.

use crate::api::tests::Server;
use jadpo_core::{DeliveryState, FailureKind, FailureRecord, Outcome};
use jadpo_store::Store;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{redirect, StatusCode};

const TOKEN: &str = "s3cret-token";

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .unwrap()
}

struct Page {
    status: StatusCode,
    location: Option<String>,
    set_cookie: Option<String>,
    body: String,
}

async fn send(r: reqwest::RequestBuilder) -> Page {
    let r = r.send().await.unwrap();
    let header = |n| {
        r.headers()
            .get(n)
            .map(|v: &reqwest::header::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let (status, location, set_cookie) = (r.status(), header(LOCATION), header(SET_COOKIE));
    Page {
        status,
        location,
        set_cookie,
        body: r.text().await.unwrap(),
    }
}

async fn get(s: &Server, path: &str, cookie: Option<&str>) -> Page {
    let mut r = client().get(s.url(path));
    if let Some(c) = cookie {
        r = r.header(COOKIE, c);
    }
    send(r).await
}

async fn post_form(s: &Server, path: &str, form: &[(&str, &str)], cookie: Option<&str>) -> Page {
    let mut r = client().post(s.url(path)).form(form);
    if let Some(c) = cookie {
        r = r.header(COOKIE, c);
    }
    send(r).await
}

/// Signs in with the token and returns the `Cookie` header to send.
async fn sign_in(s: &Server) -> String {
    let p = post_form(s, "/ui/login", &[("token", TOKEN)], None).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    let set = p.set_cookie.expect("a session cookie");
    set.split(';').next().unwrap().to_owned()
}

/// The CSRF token a page's forms carry.
fn csrf_of(body: &str) -> String {
    let at = body.find(r#"name="csrf" value=""#).expect("a form with its CSRF token") + 19;
    body[at..at + 64].to_owned()
}

#[tokio::test]
async fn without_a_cookie_a_page_asks_to_sign_in_and_a_wrong_token_is_401() {
    let s = Server::start(Some(TOKEN)).await;
    let p = get(&s, "/ui", None).await;
    assert_eq!(
        (p.status, p.location.as_deref()),
        (StatusCode::SEE_OTHER, Some("/ui/login"))
    );
    let p = get(&s, "/ui/deliveries", None).await;
    assert_eq!(p.location.as_deref(), Some("/ui/login"));
    let p = get(&s, "/ui/login", None).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(r#"name="token""#));
    let p = post_form(&s, "/ui/login", &[("token", "wrong")], None).await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED);
    assert!(p.body.contains("login-error") && p.set_cookie.is_none());
    let p = get(&s, "/ui", Some("jadpo_console=forged")).await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED);
    // A post without a session is refused too, not redirected.
    let p = post_form(&s, "/ui/retry", &[("state", "failed")], None).await;
    assert_eq!(p.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_session_cookie_is_http_only_strict_and_never_the_token() {
    let s = Server::start(Some(TOKEN)).await;
    let p = post_form(&s, "/ui/login", &[("token", TOKEN)], None).await;
    let set = p.set_cookie.unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/ui"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "bound to loopback: {set}");
    assert!(!set.contains(TOKEN), "{set}");
    let cookie = set.split(';').next().unwrap();
    let p = get(&s, "/ui", Some(cookie)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(!p.body.contains(TOKEN));
    // Bound beyond loopback, the cookie is Secure.
    let public = Server::start_on(Some(TOKEN), false).await;
    let p = post_form(&public, "/ui/login", &[("token", TOKEN)], None).await;
    assert!(p.set_cookie.unwrap().contains("; Secure"));
    // Signing out needs the CSRF token and clears the cookie.
    let page = get(&s, "/ui", Some(cookie)).await;
    let p = post_form(&s, "/ui/logout", &[], Some(cookie)).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    let csrf = csrf_of(&page.body);
    let p = post_form(&s, "/ui/logout", &[("csrf", &csrf)], Some(cookie)).await;
    assert_eq!(p.location.as_deref(), Some("/ui/login"));
    assert!(p.set_cookie.unwrap().contains("Max-Age=0"));
}

fn secret_of(cookie: &str) -> &str {
    cookie.split_once('=').unwrap().1
}

/// Each sign-in is a session of its own, kept by the store for 12 hours of
/// real time; signing out ends it, the old cookie is refused after, and the
/// other session lives on.
#[tokio::test]
async fn each_sign_in_is_its_own_session_which_sign_out_ends() {
    let s = Server::start(Some(TOKEN)).await;
    let p = post_form(&s, "/ui/login", &[("token", TOKEN)], None).await;
    assert!(
        p.set_cookie.as_deref().unwrap().contains("Max-Age=43200"),
        "{:?}",
        p.set_cookie
    );
    let first = p.set_cookie.unwrap().split(';').next().unwrap().to_owned();
    let second = sign_in(&s).await;
    assert_ne!(first, second, "a session per sign-in");
    let now = jadpo_core::Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
    let hash = super::session_hash(TOKEN, secret_of(&first));
    assert_ne!(hash, secret_of(&first), "the store keeps a hash, not the secret");
    let hour = std::time::Duration::from_secs(3600);
    assert!(s.store.session_alive(&hash, now.plus(11 * hour)).await.unwrap());
    assert!(
        !s.store.session_alive(&hash, now.plus(13 * hour)).await.unwrap(),
        "12 h"
    );

    let page = get(&s, "/ui", Some(&first)).await;
    let p = post_form(&s, "/ui/logout", &[("csrf", &csrf_of(&page.body))], Some(&first)).await;
    assert_eq!(p.location.as_deref(), Some("/ui/login"));
    let after = get(&s, "/ui/deliveries", Some(&first)).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED, "a signed-out cookie is refused");
    assert_eq!(get(&s, "/ui/deliveries", Some(&second)).await.status, StatusCode::OK);
}

/// The console asks the store for every page: a session another process
/// ended (its sign-out) or one that expired is refused here too.
#[tokio::test]
async fn a_session_ended_elsewhere_or_expired_is_refused() {
    let s = Server::start(Some(TOKEN)).await;
    let cookie = sign_in(&s).await;
    assert_eq!(get(&s, "/ui", Some(&cookie)).await.status, StatusCode::OK);
    s.store
        .end_session(&super::session_hash(TOKEN, secret_of(&cookie)))
        .await
        .unwrap();
    assert_eq!(get(&s, "/ui", Some(&cookie)).await.status, StatusCode::UNAUTHORIZED);

    let now = jadpo_core::Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
    let secret = "ab".repeat(32);
    let hash = super::session_hash(TOKEN, &secret);
    s.store
        .start_session(&hash, now.plus(std::time::Duration::from_secs(60)), now)
        .await
        .unwrap();
    let cookie = format!("{}={secret}", super::COOKIE);
    assert_eq!(get(&s, "/ui", Some(&cookie)).await.status, StatusCode::OK);
    s.store.end_session(&hash).await.unwrap();
    s.store
        .start_session(
            &hash,
            now.minus(std::time::Duration::from_secs(1)),
            now.minus(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(
        get(&s, "/ui", Some(&cookie)).await.status,
        StatusCode::UNAUTHORIZED,
        "expired"
    );
}

#[tokio::test]
async fn retry_needs_its_csrf_token_and_gives_a_fresh_budget() {
    let s = Server::start(Some(TOKEN)).await;
    let cookie = sign_in(&s).await;
    let id = s
        .finished(Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)))
        .await;
    let page = get(&s, &format!("/ui/deliveries/{}", id.0), Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains(r#"id="state" class="state-failed""#),
        "{}",
        page.body
    );
    assert!(page.body.contains("http.400 (rejected)"));
    assert!(
        page.body.contains(r#"id="retry""#),
        "a Retry button for a failed delivery"
    );
    let path = format!("/ui/deliveries/{}/retry", id.0);
    let p = post_form(&s, &path, &[], Some(&cookie)).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    let p = post_form(&s, &path, &[("csrf", "0".repeat(64).as_str())], Some(&cookie)).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert_eq!(
        s.store.delivery(id).await.unwrap().unwrap().state,
        DeliveryState::Failed
    );
    let csrf = csrf_of(&page.body);
    let p = post_form(&s, &path, &[("csrf", &csrf)], Some(&cookie)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("Retried: due now"), "{}", p.body);
    assert!(!p.body.contains(r#"id="retry""#), "no button once it is due");
    let d = s.store.delivery(id).await.unwrap().unwrap();
    assert_eq!((d.state, d.attempts), (DeliveryState::Due, 0));
}

#[tokio::test]
async fn skip_needs_its_csrf_token_and_records_the_name_given() {
    let s = Server::start(Some(TOKEN)).await;
    let cookie = sign_in(&s).await;
    let id = s
        .finished(Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)))
        .await;
    let page = get(&s, &format!("/ui/deliveries/{}", id.0), Some(&cookie)).await;
    assert!(
        page.body.contains(r#"id="skip""#),
        "a Skip button for a failed delivery"
    );
    let path = format!("/ui/deliveries/{}/skip", id.0);
    let p = post_form(&s, &path, &[("by", "ana")], Some(&cookie)).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert_eq!(s.store.delivery(id).await.unwrap().unwrap().skipped, None);
    let csrf = csrf_of(&page.body);
    let p = post_form(&s, &path, &[("csrf", &csrf), ("by", " ana ")], Some(&cookie)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("Skipped by ana"), "{}", p.body);
    assert!(p.body.contains("skipped by ana at"), "the record says so: {}", p.body);
    assert!(!p.body.contains(r#"id="skip""#), "no button once skipped");
    assert!(p.body.contains(r#"id="retry""#), "it may still be retried");
    let d = s.store.delivery(id).await.unwrap().unwrap();
    assert_eq!(
        (d.state, d.skipped.map(|s| s.by)),
        (DeliveryState::Failed, Some("ana".into()))
    );
    let other = s
        .finished(Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected)))
        .await;
    let path = format!("/ui/deliveries/{}/skip", other.0);
    post_form(&s, &path, &[("csrf", &csrf), ("by", "")], Some(&cookie)).await;
    let by = s.store.delivery(other).await.unwrap().unwrap().skipped.map(|s| s.by);
    assert_eq!(by.as_deref(), Some("console"), "no name given");
}

#[tokio::test]
async fn an_unknown_delivery_is_404_and_a_bad_filter_400() {
    let s = Server::start(None).await;
    assert_eq!(get(&s, "/ui/deliveries/999", None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(get(&s, "/ui/deliveries/abc", None).await.status, StatusCode::NOT_FOUND);
    assert_eq!(get(&s, "/ui/nothing", None).await.status, StatusCode::NOT_FOUND);
    let p = get(&s, "/ui/deliveries?state=lost", None).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("query.invalid"));
    let p = get(&s, "/ui/deliveries?id=12", None).await;
    assert_eq!(
        p.location.as_deref(),
        Some("/ui/deliveries/12"),
        "the search opens the delivery"
    );
}

#[tokio::test]
async fn the_list_filters_and_pages_newest_first() {
    let s = Server::start(None).await;
    for i in 0..30 {
        let body = format!(r#"{{"payment_id": "p{i}", "amount_cents": 1}}"#);
        assert_eq!(s.post("/events/PaymentReceived", &body).await.0, StatusCode::ACCEPTED);
    }
    let ids = |body: &str| -> Vec<i64> {
        body.match_indices("data-id=\"")
            .map(|(at, _)| {
                let rest = &body[at + 9..];
                rest[..rest.find('"').unwrap()].parse().unwrap()
            })
            .collect()
    };
    let first = get(&s, "/ui/deliveries", None).await;
    assert_eq!(first.status, StatusCode::OK);
    let page1 = ids(&first.body);
    assert_eq!(page1.len(), 50);
    assert_eq!(page1[0], 60, "newest first");
    assert!(first.body.contains("/ui/deliveries?before=11"), "{}", first.body);
    let second = get(&s, "/ui/deliveries?before=11", None).await;
    assert_eq!(ids(&second.body), (1..=10).rev().collect::<Vec<_>>());
    assert!(!second.body.contains("next-page"));
    let audit = get(&s, "/ui/deliveries?subscriber=audit&limit=5", None).await;
    let audit_ids = ids(&audit.body);
    assert_eq!(audit_ids.len(), 5);
    assert!(audit.body.matches(">audit<").count() == 5, "only audit's");
    assert!(audit.body.contains(r#"value="audit""#), "the form keeps the filter");
    let one_event = get(&s, "/ui/deliveries?event=3", None).await;
    assert_eq!(ids(&one_event.body), vec![6, 5]);
    let due = get(&s, "/ui/deliveries?state=due&limit=3", None).await;
    assert_eq!(ids(&due.body).len(), 3);
    assert!(due.body.contains(r#"<option value="due" selected>"#));
}

/// The list filters by key, and a delivery's page links its key's list,
/// the key percent-encoded in the link and escaped on the page.
#[tokio::test]
async fn the_list_filters_by_key_and_a_delivery_links_its_keys_list() {
    let app = crate::api::tests::APP.replace(
        "run: notify(event.payment_id) }",
        "run: notify(event.payment_id)  key: event.payment_id }",
    );
    let s = Server::start_with(&app, None, true, None).await;
    for id in ["a&b <c>", "other", "a&b <c>"] {
        let body = serde_json::json!({"payment_id": id, "amount_cents": 1}).to_string();
        assert_eq!(s.post("/events/PaymentReceived", &body).await.0, StatusCode::ACCEPTED);
    }
    let list = get(&s, "/ui/deliveries?key=a%26b+%3Cc%3E", None).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_eq!(list.body.matches("data-id=\"").count(), 2, "{}", list.body);
    assert!(
        list.body.contains(r#"value="a&#38;b &#60;c&#62;""#),
        "the form keeps the key: {}",
        list.body
    );
    let keyed = s.get("/deliveries?key=other").await.1;
    let page = get(&s, &format!("/ui/deliveries/{}", keyed[0]["id"]), None).await;
    assert!(
        page.body
            .contains(r#"<dd id="key"><a href="/ui/deliveries?key=other">other</a></dd>"#),
        "{}",
        page.body
    );
    let first = s.get("/deliveries?key=a%26b%20%3Cc%3E&limit=1").await.1;
    let page = get(&s, &format!("/ui/deliveries/{}", first[0]["id"]), None).await;
    assert!(page.body.contains("key=a%26b%20%3Cc%3E"), "{}", page.body);
    assert!(page.body.contains(">a&#38;b &#60;c&#62;</a>"), "{}", page.body);
}

/// A bulk retry by key counts and retries that key's deliveries only.
#[tokio::test]
async fn bulk_retry_by_key_takes_that_keys_deliveries_only() {
    let s = Server::start(None).await;
    let failed = || Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected));
    let mine = [
        s.finished_with_key(failed(), Some("c-42")).await,
        s.finished_with_key(failed(), Some("c-42")).await,
    ];
    let other = s.finished_with_key(failed(), Some("c-7")).await;
    let p = get(&s, "/ui/retry?preview=1&state=failed&key=c-42", None).await;
    assert!(p.body.contains("<strong>2</strong> deliveries match"), "{}", p.body);
    assert!(
        p.body.contains(r#"<input type="hidden" name="key" value="c-42">"#),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(r#"<input name="key" value="c-42">"#),
        "the form keeps the key"
    );
    let csrf = csrf_of(&p.body);
    let done = post_form(
        &s,
        "/ui/retry",
        &[("csrf", &csrf), ("state", "failed"), ("key", "c-42")],
        None,
    )
    .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER);
    for id in mine {
        assert_eq!(s.store.delivery(id).await.unwrap().unwrap().state, DeliveryState::Due);
    }
    assert_eq!(
        s.store.delivery(other).await.unwrap().unwrap().state,
        DeliveryState::Failed
    );
}

#[tokio::test]
async fn bulk_retry_counts_first_then_retries_what_matched() {
    let s = Server::start(None).await;
    let failed = FailureRecord::new("http.400", FailureKind::Rejected);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(s.finished(Outcome::Failed(failed.clone())).await);
    }
    let parked = s
        .finished(Outcome::Parked(FailureRecord::new(
            "http.timeout",
            FailureKind::OutcomeUnknown,
        )))
        .await;
    let p = get(&s, "/ui/retry?preview=1&state=failed&subscriber=audit", None).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("<strong>3</strong> deliveries match"), "{}", p.body);
    assert!(p
        .body
        .contains(r#"<input type="hidden" name="subscriber" value="audit">"#));
    for id in &ids {
        assert_eq!(
            s.store.delivery(*id).await.unwrap().unwrap().state,
            DeliveryState::Failed,
            "a dry run"
        );
    }
    let p = get(&s, "/ui/retry?preview=1&state=due", None).await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    let form = get(&s, "/ui/retry?preview=1&state=failed", None).await;
    let csrf = csrf_of(&form.body);
    let p = post_form(&s, "/ui/retry", &[("state", "failed")], None).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    let p = post_form(&s, "/ui/retry", &[("csrf", &csrf), ("state", "failed")], None).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "post, redirect, get");
    let watch = p.location.unwrap();
    assert_eq!(watch, "/ui/retry?retried=3&state=failed");
    let p = get(&s, &watch, None).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("Retried 3 deliveries"), "{}", p.body);
    assert!(
        p.body
            .contains(r#"<td id="progress-remaining">0</td><td id="progress-due">3</td>"#),
        "{}",
        p.body
    );
    assert!(p.body.contains(r#"data-live="5""#), "the progress refreshes itself");
    for id in &ids {
        let d = s.store.delivery(*id).await.unwrap().unwrap();
        assert_eq!((d.state, d.attempts), (DeliveryState::Due, 0), "a fresh budget");
    }
    assert_eq!(
        s.store.delivery(parked).await.unwrap().unwrap().state,
        DeliveryState::Parked
    );
}

#[tokio::test]
async fn overview_and_breakers_show_the_outage() {
    use jadpo_store::conformance::{at, open_breaker, LEASE};
    let s = Server::start(None).await;
    let p = get(&s, "/ui", None).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(
        p.body.contains("No alerts raised") && p.body.contains("breakers are closed"),
        "{}",
        p.body
    );
    open_breaker(&s.store, 0).await;
    s.store.sweep(at(1), LEASE).await.unwrap();
    let p = get(&s, "/ui", None).await;
    assert!(p.body.contains(r#"<tr data-connection="payments">"#), "{}", p.body);
    assert!(p.body.contains("connection_unavailable"));
    let p = get(&s, "/ui/breakers", None).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains(r#"class="state state-open">open<"#), "{}", p.body);
    assert!(
        p.body.contains(r#"<tr data-connection="mailer">"#),
        "a connection with no row yet shows closed"
    );
    // Every page is HTML that no other site may frame.
    let r = client().get(s.url("/ui/breakers")).send().await.unwrap();
    assert!(r.headers()[CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    assert_eq!(r.headers()["x-frame-options"], "DENY");
}

#[test]
fn a_connections_limits_in_words() {
    let v = serde_json::json!({"rate": "10/s", "concurrency": 2, "tokens": 1, "slots_in_use": 1, "waiting": 40,
                               "paused_until": "2026-12-01T10:00:30Z", "slowed_until": null});
    assert_eq!(
        super::pages::limits_text(&v),
        "10/s, 1 tokens; 1 of 2 slots in use; 40 waiting; paused until 2026-12-01T10:00:30Z"
    );
    let none = serde_json::json!({"rate": null, "concurrency": null, "tokens": null, "slots_in_use": 0,
                                  "paused_until": null, "slowed_until": null});
    assert_eq!(super::pages::limits_text(&none), "");
}

/// Under a store's scaled clock every time on a page is engine time, ahead
/// of the wall clock: the header says so. A real-time store's does not.
#[tokio::test]
async fn the_header_says_when_the_stores_clock_is_scaled() {
    let s = Server::start_scaled(Some(TOKEN), 600).await;
    let cookie = sign_in(&s).await;
    let p = get(&s, "/ui", Some(&cookie)).await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(p.body.contains("(engine clock scaled 600x since "), "{}", p.body);
    let s = Server::start(Some(TOKEN)).await;
    let cookie = sign_in(&s).await;
    let p = get(&s, "/ui", Some(&cookie)).await;
    assert!(
        p.body.contains("As of") && !p.body.contains("engine clock"),
        "{}",
        p.body
    );
}

/// A new API token (a rotation after a leak) ends every session signed in
/// under the old one, though their rows are still in the store.
#[tokio::test]
async fn a_new_token_ends_the_old_tokens_sessions() {
    let s = Server::start(Some(TOKEN)).await;
    let cookie = sign_in(&s).await;
    let old = super::session_hash(TOKEN, secret_of(&cookie));
    let rotated = super::session_hash("another-token", secret_of(&cookie));
    assert_ne!(old, rotated);
    let now = jadpo_core::Timestamp::from_millis(jiff::Timestamp::now().as_millisecond());
    assert!(s.store.session_alive(&old, now).await.unwrap());
    assert!(
        !s.store.session_alive(&rotated, now).await.unwrap(),
        "not alive under the new token"
    );
}

/// A queued delivery says what it waits for, over the API and on its
/// page, which links to that delivery.
#[tokio::test]
async fn a_queued_delivery_says_and_links_what_it_waits_for() {
    let app = format!(
        "{}\nevent Order {{ id: string  customer: string }}\n\
         subscriber charge {{ on: Order  run: record_payment(event.id)  key: event.customer  order: fifo }}\n",
        crate::api::tests::APP
    );
    let s = Server::start_with(&app, Some(TOKEN), true, None).await;
    let mut ids = Vec::new();
    for id in ["o1", "o2"] {
        let body = format!(r#"{{"id":"{id}","customer":"c-42"}}"#);
        let (status, v) = s
            .post_with("/events/Order", &body, &[("authorization", &format!("Bearer {TOKEN}"))])
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{v}");
        ids.push(v["delivery_ids"][0].as_i64().unwrap());
    }
    let (status, v) = s
        .client
        .get(format!("{}/deliveries/{}", s.base, ids[1]))
        .bearer_auth(TOKEN)
        .send()
        .await
        .map(|r| (r.status(), r))
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = v.json().await.unwrap();
    assert_eq!(
        (&v["state"], &v["key_rule"], &v["waits_for_delivery"]),
        (
            &serde_json::json!("queued"),
            &serde_json::json!("fifo"),
            &serde_json::json!(ids[0])
        )
    );
    let cookie = sign_in(&s).await;
    let page = get(&s, &format!("/ui/deliveries/{}", ids[1]), Some(&cookie)).await;
    let link = format!(
        r#"<a href="/ui/deliveries/{}">waits for delivery {}, earlier for key c-42</a>"#,
        ids[0], ids[0]
    );
    assert!(page.body.contains(&link), "{}", page.body);
}
