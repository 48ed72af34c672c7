//! Resolving connections at start, keeping secrets out of Debug and logs,
//! and replacing a connection by a fake or a recording.

mod connection_support;

use connection_support::*;
use jadpo_core::CallVerdict::Unavailable;
use jadpo_lang::Method;
use jadpo_runtime::connection::{Answer, CallRequest, Connections, Double, Fake, Recording, UnknownConnection};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_testing::logs::LogBuffer;
use serde_json::json;

const TWO: &str = r#"
connection payments {
    driver: http
    base_url: env("PAYMENTS_URL")
    headers: { "Authorization": secret("PAYMENTS_TOKEN"), "X-Region": env("REGION") }
}
connection mailer {
    driver: http
    base_url: env("MAILER_URL")
    signing_secret: secret("MAILER_SIGNING")
    retry: { attempts: 3 }
}
"#;

fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

#[test]
fn every_missing_variable_is_reported_at_once() {
    let errors = Connections::resolve(&app(TWO), env_of(&[("REGION", "eu")])).unwrap_err();
    let got: Vec<(&str, &str, Option<&str>)> = errors
        .iter()
        .map(|e| (e.code(), e.connection().unwrap_or_default(), e.variable()))
        .collect();
    assert_eq!(
        got,
        [
            ("connection.env_missing", "mailer", Some("MAILER_URL")),
            ("connection.secret_missing", "mailer", Some("MAILER_SIGNING")),
            ("connection.env_missing", "payments", Some("PAYMENTS_URL")),
            ("connection.secret_missing", "payments", Some("PAYMENTS_TOKEN")),
        ]
    );
    let first = errors[0].to_string();
    assert!(first.contains("mailer") && first.contains("MAILER_URL"), "{first}");
    assert!(
        !first.contains("error["),
        "the code is `code`, not in the text: {first}"
    );
}

#[test]
fn invalid_settings_are_named_without_their_values() {
    let vars = [
        ("PAYMENTS_URL", "http://admin:hunter2@pay.example?x=1"),
        ("PAYMENTS_TOKEN", "Bearer s3cret\nInjected: yes"),
        ("REGION", "eu"),
        ("MAILER_URL", "ftp://mail.example"),
        ("MAILER_SIGNING", "whsec_!!not-base64!!"),
    ];
    let errors = Connections::resolve(&app(TWO), env_of(&vars)).unwrap_err();
    let codes: Vec<&str> = errors.iter().map(|e| e.code()).collect();
    assert_eq!(
        codes,
        [
            "connection.base_url_invalid",
            "connection.signing_secret_invalid",
            "connection.base_url_invalid",
            "connection.header_invalid",
        ]
    );
    for e in &errors {
        let shown = format!("{e} {e:?}");
        for secret in ["hunter2", "s3cret", "not-base64", "mail.example", "pay.example"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
    assert_eq!(errors[3].variable(), Some("PAYMENTS_TOKEN"));
    assert!(errors[0].to_string().contains("`base_url:`"), "{}", errors[0]);
    assert!(errors[0].to_string().contains("MAILER_URL"), "{}", errors[0]);
}

#[test]
fn debug_of_resolved_connections_shows_no_secret() {
    let vars = [
        ("PAYMENTS_URL", "https://admin:hunter2@pay.example/v1"),
        ("PAYMENTS_TOKEN", "Bearer sk_live_abcdef"),
        ("REGION", "eu-west"),
        ("MAILER_URL", "https://mail.example"),
        ("MAILER_SIGNING", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
    ];
    let connections = Connections::resolve(&app(TWO), env_of(&vars)).unwrap();
    let shown = format!("{connections:?} {connections:#?}");
    for secret in ["hunter2", "sk_live_abcdef", "eu-west", "MfKQ9r8G", "admin"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.contains("authorization: <redacted>"), "{shown}");
    assert!(shown.contains("https://pay.example/v1"), "{shown}");
    let mailer = connections.http("mailer").unwrap();
    assert!(mailer.is_signed());
    assert_eq!(mailer.attempts(), 3);
    assert_eq!(connections.names().collect::<Vec<_>>(), ["mailer", "payments"]);
}

#[tokio::test]
async fn logs_name_the_call_but_never_its_secrets_body_or_path() {
    let captured = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(captured.clone())
        .finish();
    // Global, not scoped to this thread: a callsite first hit by another
    // test's thread while no subscriber listened would be skipped here.
    // Only this test sets one, and the other tests' lines hold no secrets.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let provider = TestProvider::start().await;
    let app = one_connection(
        "    headers: { \"Authorization\": secret(\"TOKEN\") }\n    signing_secret: secret(\"SIGNING\")",
    );
    let connections = resolve(
        &app,
        &provider.url(),
        &[
            ("TOKEN", "Bearer sk_live_zzz"),
            ("SIGNING", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        ],
    );
    let req = CallRequest {
        path: "/customers/ada%40example.org".into(),
        path_template: "/customers/{email}".into(),
        idempotency_key: Some("idem-secret-key".into()),
        ..post(json!({"card_holder": "Ada Lovelace"}))
    };
    provider.set(Behaviour::Down);
    let out = call(&connections, req.clone()).await;
    assert_eq!(kind(&out), "unavailable");
    provider.set(Behaviour::Up);
    call(&connections, req).await;

    let logs = captured.text();
    assert!(logs.contains("call failed"), "{logs}");
    assert!(logs.contains("call answered"), "{logs}");
    assert!(logs.contains("/customers/{email}"), "{logs}");
    assert!(logs.contains("\"kind\":\"unavailable\""), "{logs}");
    assert!(logs.contains("\"status\":503"), "{logs}");
    for secret in [
        "sk_live_zzz",
        "MfKQ9r8G",
        "Ada Lovelace",
        "ada%40example.org",
        "idem-secret-key",
        "v1,",
    ] {
        assert!(!logs.contains(secret), "{secret} in {logs}");
    }
}

#[tokio::test]
async fn a_fake_needs_no_environment_and_touches_no_breaker() {
    let fake = Fake::new(Answer::json(201, &json!({"id": "r1"})))
        .then(Answer::status(503).with_header("retry-after", "0"))
        .then(Answer::status(404));
    let connections = Connections::resolve_with_doubles(
        &app(TWO),
        env_of(&[
            ("PAYMENTS_URL", "https://pay.example"),
            ("PAYMENTS_TOKEN", "t"),
            ("REGION", "eu"),
        ]),
        [("mailer".to_owned(), Double::from(fake.clone()))],
    )
    .unwrap();
    assert!(connections.is_double("mailer"));
    assert!(connections.http("mailer").is_none());
    let to_mailer = |body| CallRequest {
        connection: "mailer".into(),
        ..post(body)
    };

    // 503, resent by the connection's retry: 404. Classified, no verdict.
    let out = call(&connections, to_mailer(json!({"n": 1}))).await;
    assert_eq!(kind(&out), "not_found");
    assert_eq!((out.sends, out.verdict), (2, None));
    // Then the default.
    let out = call(&connections, to_mailer(json!({"n": 2}))).await;
    let response = out.result.unwrap();
    assert_eq!(response.status, 201);
    assert_eq!(response.json::<serde_json::Value>().unwrap()["id"], "r1");
    assert_eq!(out.verdict, None);

    let received = fake.received();
    assert_eq!(received.len(), 3);
    assert_eq!(received[2].body, Some(json!({"n": 2})));
    assert_eq!(received[2].path, "/things");
    assert_eq!(received[2].method, "POST");
}

#[tokio::test]
async fn a_fakes_timeouts_and_refusals_are_classified_without_a_verdict() {
    let provider = TestProvider::start().await;
    let mut connections = resolve(&one_connection(""), &provider.url(), &[]);
    let fake = Fake::ok()
        .then(Answer::TimedOut)
        .then(Answer::TimedOut)
        .then(Answer::NeverLeft);
    connections.replace("p", fake).unwrap();
    let out = call(&connections, post(json!({}))).await;
    assert_eq!((kind(&out), out.verdict), ("outcome_unknown", None));
    let out = call(&connections, request(Method::Put, "/x")).await;
    assert_eq!((kind(&out), out.verdict), ("unavailable", None));
    let out = call(&connections, post(json!({}))).await;
    assert_eq!((code(&out), out.verdict), ("http.never_left".into(), None));
    let out = call(&connections, post(json!({}))).await;
    assert_eq!((kind(&out), out.verdict), ("ok", None));
    // The real provider heard nothing.
    assert_eq!(provider.calls(), 0);
    // A real call to the same outage would have counted.
    let mut real = resolve(&one_connection(""), &provider.url(), &[]);
    provider.set(Behaviour::Refuse);
    assert_eq!(call(&real, post(json!({}))).await.verdict, Some(Unavailable));
    assert_eq!(real.replace("nope", Fake::ok()), Err(UnknownConnection("nope".into())));
}

#[tokio::test]
async fn a_recording_replays_by_method_and_path() {
    let file = std::env::temp_dir().join(format!("jadpo-recording-{}-{}.jsonl", std::process::id(), line!()));
    std::fs::write(
        &file,
        concat!(
            r#"{"method": "POST", "path": "/payments/p1/record", "status": 503, "headers": {"retry-after": "0"}}"#,
            "\n",
            r#"{"method": "POST", "path": "/payments/p1/record", "status": 200, "body": {"recorded": true}}"#,
            "\n",
            r#"{"method": "GET", "path": "/payments/p1", "status": 409}"#,
            "\n"
        ),
    )
    .unwrap();
    let recording = Recording::from_file(&file).unwrap();
    std::fs::remove_file(&file).unwrap();

    let app = one_connection("    retry: { attempts: 2 }");
    let connections =
        Connections::resolve_with_doubles(&app, |_| None, [("p".to_owned(), Double::from(recording))]).unwrap();
    let record = CallRequest {
        path: "/payments/p1/record".into(),
        ..post(json!({}))
    };
    let out = call(&connections, record).await;
    assert_eq!(kind(&out), "ok", "{out:?}");
    assert_eq!((out.sends, out.verdict), (2, None));
    assert_eq!(
        out.result.unwrap().json::<serde_json::Value>().unwrap(),
        json!({"recorded": true})
    );

    let out = call(&connections, request(Method::Get, "/payments/p1")).await;
    assert_eq!((kind(&out), out.verdict), ("conflict", None));

    let out = call(&connections, request(Method::Get, "/payments/p2")).await;
    assert_eq!(kind(&out), "internal_fault");
    assert_eq!(code(&out), "recording.unmatched");
    assert_eq!(out.verdict, None);
}

#[test]
fn a_double_for_an_unknown_connection_is_a_startup_error() {
    let errors = Connections::resolve_with_doubles(
        &one_connection(""),
        |_| Some("http://127.0.0.1:1".into()),
        [("mailer".to_owned(), Double::from(Fake::ok()))],
    )
    .unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].code(), "connection.double_unknown");
}

#[test]
fn a_missing_recording_file_is_a_clear_error() {
    let e = Recording::from_file("/nonexistent/recording.jsonl").unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.to_string().contains("recording.jsonl"), "{e}");
}
