//! Connections to a broker (`driver: amqp | nats | redis | mqtt`) and
//! `call NAME.publish(...)`: what each becomes, and every way to get one
//! wrong, with its code and the words that say what to fix.

use jadpo_core::publish::Broker;
use jadpo_lang::{Code, Driver, Expr, PathPart, Statement, Value};

/// Every diagnostic of `src` as (code, message).
fn diagnostics(src: &str) -> Vec<(Code, String)> {
    let checked = jadpo_lang::check("app.jadpo", src);
    checked
        .diagnostics
        .iter()
        .map(|d| (d.code, d.message.clone()))
        .collect()
}

fn app(src: &str) -> jadpo_lang::App {
    let checked = jadpo_lang::check("app.jadpo", src);
    checked.app.unwrap_or_else(|| panic!("refused: {:?}", diagnostics(src)))
}

/// Refused with exactly one diagnostic, of `code`, whose message holds
/// `words`.
fn refused(src: &str, code: Code, words: &str) {
    let d = diagnostics(src);
    assert_eq!(d.len(), 1, "{src}\n{d:?}");
    assert_eq!(d[0].0, code, "{src}\n{d:?}");
    assert!(d[0].1.contains(words), "{:?} lacks {words:?}", d[0].1);
}

const EVENT: &str = "event PaymentSettled { payment_id: string  amount: int  tenant: string }\n";

/// An app with the connection `bus` of `settings`, an action publishing
/// with `publish`, and a subscriber running it.
fn with_publish(settings: &str, publish: &str) -> String {
    format!(
        "{EVENT}connection bus {{ {settings} }}\n\
         action announce(payment_id: string, tenant: string) {{ {publish} }}\n\
         subscriber s {{ on: PaymentSettled  run: announce(event.payment_id, event.tenant) }}\n"
    )
}

#[test]
fn every_driver_is_a_broker_with_its_own_settings() {
    let table: &[(&str, Driver)] = &[
        (
            r#"driver: amqp  url: "amqp://guest:guest@127.0.0.1:5672/%2f""#,
            Driver::Amqp {
                exchange: String::new(),
            },
        ),
        (
            r#"driver: amqp  url: env("AMQP_URL")  exchange: "orders""#,
            Driver::Amqp {
                exchange: "orders".into(),
            },
        ),
        (r#"driver: nats  url: "nats://127.0.0.1:4222""#, Driver::Nats),
        (
            r#"driver: redis  url: "redis://127.0.0.1:6379""#,
            Driver::Redis { max_len: None },
        ),
        (
            r#"driver: redis  url: secret("REDIS_URL")  max_len: 100000"#,
            Driver::Redis { max_len: Some(100_000) },
        ),
        (r#"driver: "mqtt"  url: "mqtt://127.0.0.1:1883""#, Driver::Mqtt),
    ];
    for (settings, driver) in table {
        let a = app(&with_publish(
            settings,
            r#"call bus.publish("payments.{payment_id}", body: event)"#,
        ));
        let bus = &a.connections["bus"];
        assert_eq!(&bus.driver, driver, "{settings}");
        assert!(bus.driver.broker().is_some());
    }
    let a = app(&with_publish(
        r#"driver: nats  url: env("NATS_URL")"#,
        r#"call bus.publish("x")"#,
    ));
    assert_eq!(a.connections["bus"].url, Value::Env("NATS_URL".into()));
    assert_eq!(a.connections["bus"].driver.broker(), Some(Broker::Nats));
    assert_eq!(a.connections["bus"].driver.name(), "nats");
}

#[test]
fn a_publish_keeps_its_target_body_headers_and_key() {
    let a = app(&with_publish(
        r#"driver: nats  url: "nats://127.0.0.1:4222"  headers: { "Source": "jadpo" }"#,
        r#"call bus.publish("payments.{tenant}.settled", body: event, headers: { "Tenant": tenant, "Kind": "settled" }, idempotency_key: payment_id)"#,
    ));
    let action = &a.actions["announce"];
    assert!(
        action.connections().contains("bus"),
        "a publish's connection holds its deliveries"
    );
    let jadpo_lang::ActionBody::Statements(body) = &action.body else {
        panic!("a body")
    };
    let Statement::Publish(p) = &body[0] else {
        panic!("a publish: {body:?}")
    };
    assert_eq!(p.connection, "bus");
    assert_eq!(
        p.target.parts(),
        vec![
            PathPart::Literal("payments.".into()),
            PathPart::Param("tenant".into()),
            PathPart::Literal(".settled".into())
        ]
    );
    assert_eq!(p.body, Some(Expr::Event));
    assert_eq!(
        p.headers,
        vec![
            ("Tenant".to_owned(), Expr::Param("tenant".into())),
            ("Kind".to_owned(), Expr::String("settled".into()))
        ]
    );
    assert_eq!(p.idempotency_key, Some(Expr::Param("payment_id".into())));
    assert_eq!(a.connections["bus"].headers["Source"], Value::String("jadpo".into()));
}

#[test]
fn a_broker_connection_may_fill_a_capability() {
    let a = app(&format!(
        "{EVENT}capability announce(payment_id: string)\n\
         connection bus {{ driver: redis  url: \"redis://127.0.0.1:6379\"\n\
           fills announce {{ call bus.publish(\"payments\", body: {{ id: payment_id }}, idempotency_key: payment_id) }} }}\n\
         subscriber s {{ on: PaymentSettled  run: announce(event.payment_id) }}\n"
    ));
    assert!(matches!(a.capabilities["announce"].body[0], Statement::Publish(_)));
}

#[test]
fn a_driver_is_one_of_five() {
    refused(
        &with_publish(r#"driver: kafka  url: "x""#, ""),
        Code::ValueInvalid,
        "`driver:` takes http, amqp, nats, redis or mqtt; found `kafka`",
    );
}

#[test]
fn each_driver_takes_its_own_keys_only() {
    refused(
        &with_publish(r#"driver: nats  base_url: "nats://h""#, ""),
        Code::KeyUnknown,
        "has no key `base_url:`; `driver: nats` names where it connects with `url:`",
    );
    refused(
        &with_publish(r#"url: "http://h""#, ""),
        Code::KeyUnknown,
        "has no key `url:`; `driver: http` names where it connects with `base_url:`",
    );
    refused(
        &with_publish(r#"driver: nats  url: "nats://h"  exchange: "x""#, ""),
        Code::KeyUnknown,
        "has no key `exchange:`",
    );
    refused(
        &with_publish(r#"driver: amqp  url: "amqp://h"  max_len: 5"#, ""),
        Code::KeyUnknown,
        "has no key `max_len:`",
    );
    refused(
        &with_publish(r#"driver: mqtt"#, ""),
        Code::KeyMissing,
        "needs `url:`, as in `url: env(\"BROKER_URL\")`",
    );
}

#[test]
fn a_literal_url_has_its_drivers_scheme() {
    for (driver, schemes) in [
        ("amqp", "amqp:// or amqps://"),
        ("nats", "nats:// or tls://"),
        ("redis", "redis:// or rediss://"),
        ("mqtt", "mqtt:// or mqtts://"),
    ] {
        refused(
            &with_publish(&format!(r#"driver: {driver}  url: "http://h""#), ""),
            Code::ValueInvalid,
            &format!("`url:` starts with {schemes}"),
        );
    }
}

#[test]
fn an_exchange_and_a_max_len_are_checked() {
    refused(
        &with_publish(r#"driver: amqp  url: "amqp://h"  exchange: "a b""#, ""),
        Code::ValueInvalid,
        "`exchange:` takes an exchange's name",
    );
    for bad in ["0", "-1", "1.5", "\"10\"", "5000000000"] {
        refused(
            &with_publish(&format!(r#"driver: redis  url: "redis://h"  max_len: {bad}"#), ""),
            Code::ValueInvalid,
            "`max_len:` takes a whole number of entries",
        );
    }
}

#[test]
fn a_method_needs_http_and_publish_needs_a_broker() {
    refused(
        &with_publish(r#"base_url: "http://h""#, r#"call bus.publish("x")"#),
        Code::CallMethodUnknown,
        "`bus` is an HTTP connection; `publish` is for a broker connection",
    );
    refused(
        &with_publish(r#"driver: nats  url: "nats://h""#, r#"call bus.post("/x")"#),
        Code::CallMethodUnknown,
        "`bus` publishes to a broker (`driver: nats`), it takes no HTTP method; write `call bus.publish(\"target\", body: ...)`",
    );
}

#[test]
fn a_target_names_one_place() {
    let nats = r#"driver: nats  url: "nats://h""#;
    let mqtt = r#"driver: mqtt  url: "mqtt://h""#;
    let table: &[(&str, &str, &str)] = &[
        (nats, r#"call bus.publish("")"#, "a publish's target is empty"),
        (nats, r#"call bus.publish("a b")"#, "no spaces or control characters"),
        (nats, r#"call bus.publish("payments.*")"#, "`*` is a wildcard on nats"),
        (nats, r#"call bus.publish("payments.>")"#, "`>` is a wildcard on nats"),
        (mqtt, r#"call bus.publish("payments/+")"#, "`+` is a wildcard on mqtt"),
        (mqtt, r#"call bus.publish("payments/#")"#, "`#` is a wildcard on mqtt"),
        (
            nats,
            r#"call bus.publish("p.{nope}")"#,
            "`{nope}` in the target is not a parameter of action `announce`",
        ),
        (
            nats,
            r#"call bus.publish(payment_id)"#,
            "a call's first argument is its target in quotes, as in \"payments.{payment_id}\"",
        ),
        (
            nats,
            r#"call bus.publish(body: event)"#,
            "a publish needs its target first",
        ),
        (nats, r#"call bus.publish("x", "y")"#, "name this argument or remove it"),
        (
            nats,
            r#"call bus.publish("x", method: "post")"#,
            "a publish has no argument `method:`",
        ),
        (
            nats,
            r#"call bus.publish("x", body: event, body: event)"#,
            "`body:` is given twice",
        ),
    ];
    for (settings, publish, words) in table {
        refused(&with_publish(settings, publish), Code::CallArgumentsInvalid, words);
    }
    let long = "x".repeat(256);
    refused(
        &with_publish(nats, &format!(r#"call bus.publish("{long}")"#)),
        Code::CallArgumentsInvalid,
        "at most 255 bytes",
    );
}

#[test]
fn a_publish_headers_are_an_object_of_names_jadpo_does_not_set() {
    let nats = r#"driver: nats  url: "nats://h""#;
    let table: &[(&str, &str)] = &[
        (r#"headers: "x""#, "a publish's `headers:` takes an object"),
        (r#"headers: { "a b": "x" }"#, "header `a b` is not a header name"),
        (
            r#"headers: { "Nats-Msg-Id": "x" }"#,
            "header `Nats-Msg-Id` is set by Jadpo",
        ),
        (
            r#"headers: { "traceparent": "x" }"#,
            "header `traceparent` is set by Jadpo",
        ),
        (
            r#"headers: { "Idempotency-Key": "x" }"#,
            "header `Idempotency-Key` is set by Jadpo",
        ),
        (r#"headers: { "body": "x" }"#, "header `body` is set by Jadpo"),
        (r#"headers: { "A": "x", "a": "y" }"#, "header `a` is given twice"),
    ];
    for (headers, words) in table {
        refused(
            &with_publish(nats, &format!(r#"call bus.publish("x", {headers})"#)),
            Code::CallArgumentsInvalid,
            words,
        );
    }
}

#[test]
fn alerts_go_to_an_http_connection() {
    refused(
        r#"connection bus { driver: nats  url: "nats://h" }
           alerts { connection: bus  path: "/alerts" }"#,
        Code::ValueInvalid,
        "alerts are posted over HTTP, and `bus` publishes to a broker (`driver: nats`)",
    );
}
