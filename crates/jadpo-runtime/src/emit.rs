//! Checking an event's payload against its declaration before it is emitted.
//!
//! `jadpo emit`, `POST /events/NAME` and the embedded API all come through
//! here, so a malformed event is refused the same way everywhere: with a
//! stable code and the field at fault, before anything is written.

use jadpo_lang::{App, Type};
use jadpo_store::NewEvent;
use std::fmt;

/// The largest payload accepted, in bytes of JSON.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventError {
    /// `event.unknown`, `event.invalid` or `event.too_large`.
    pub code: &'static str,
    /// The field at fault, if one is.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)
    }
}

impl std::error::Error for EventError {}

fn invalid(field: &str, message: String) -> EventError {
    EventError {
        code: "event.invalid",
        field: Some(field.to_owned()),
        message,
    }
}

fn type_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(n) if n.is_i64() => "int",
        // Above i64's range: a whole number, but not an `int`.
        serde_json::Value::Number(n) if n.is_u64() => "a number above int's range",
        serde_json::Value::Number(_) => "float",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "list",
        serde_json::Value::Object(_) => "object",
    }
}

fn fits(ty: Type, v: &serde_json::Value) -> bool {
    match ty {
        Type::String => v.is_string(),
        // 64-bit signed (docs/app-file.md): above i64::MAX is refused.
        Type::Int => v.is_i64(),
        Type::Float => v.is_number(),
        Type::Bool => v.is_boolean(),
        Type::Object => v.is_object(),
        Type::List => v.is_array(),
    }
}

/// Checks an idempotency key: 1 to 255 bytes of visible ASCII, space
/// included (`event.idempotency_key_invalid`). The one rule for every key:
/// an emit's (the API's header, `jadpo emit`, the embedded API) and a
/// call's `Idempotency-Key`, which a receiver must be able to read back
/// as the same header.
pub fn idempotency_key(key: &str) -> Result<String, EventError> {
    let refused = |why: String| EventError {
        code: "event.idempotency_key_invalid",
        field: None,
        message: format!(
            "an idempotency key is 1 to {} bytes of visible ASCII; {why}",
            jadpo_store::MAX_IDEMPOTENCY_KEY
        ),
    };
    if key.is_empty() || key.len() > jadpo_store::MAX_IDEMPOTENCY_KEY {
        return Err(refused(format!("this one is {} bytes", key.len())));
    }
    // Never the key itself in the message: it may come from an event's field.
    if let Some(at) = key.bytes().position(|b| !(b' '..=b'~').contains(&b)) {
        return Err(refused(format!("byte {} of this one is not", at + 1)));
    }
    Ok(key.to_owned())
}

/// Checks `payload` against the event `name` of `app` and returns the event
/// to write, with one delivery per subscriber of it.
pub fn prepare(app: &App, name: &str, payload: &serde_json::Value) -> Result<NewEvent, EventError> {
    let Some(event) = app.events.get(name) else {
        let known: Vec<&str> = app.events.keys().map(String::as_str).collect();
        return Err(EventError {
            code: "event.unknown",
            field: None,
            message: format!(
                "no event `{name}` is declared in the app; declared: {}",
                known.join(", ")
            ),
        });
    };
    let serde_json::Value::Object(fields) = payload else {
        return Err(EventError {
            code: "event.invalid",
            field: None,
            message: format!(
                "the payload of `{name}` must be a JSON object, not {}",
                type_of(payload)
            ),
        });
    };
    for declared in &event.fields {
        match fields.get(&declared.name) {
            None => {
                return Err(invalid(
                    &declared.name,
                    format!(
                        "field `{}` ({}) is missing from `{name}`",
                        declared.name,
                        declared.ty.name()
                    ),
                ))
            }
            Some(v) if !fits(declared.ty, v) => {
                return Err(invalid(
                    &declared.name,
                    format!(
                        "field `{}` of `{name}` must be {}, not {}",
                        declared.name,
                        declared.ty.name(),
                        type_of(v)
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = fields.keys().find(|k| event.field(k).is_none()) {
        return Err(invalid(extra, format!("field `{extra}` is not declared on `{name}`")));
    }
    let text = payload.to_string();
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(EventError {
            code: "event.too_large",
            field: None,
            message: format!(
                "the payload is {} bytes; at most {MAX_PAYLOAD_BYTES} are accepted",
                text.len()
            ),
        });
    }
    Ok(NewEvent {
        name: name.to_owned(),
        payload: text,
        subscribers: app.subscribers_of(name).map(|s| s.name.clone()).collect(),
        idempotency_key: None,
        trace: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app() -> App {
        let src = r#"
            event Paid { id: string  cents: int  rate: float  ok: bool  meta: object  tags: list }
            event Quiet { id: string }
            action noop(id: string) uses c
            connection c { base_url: "http://localhost" }
            subscriber a { on: Paid  run: noop(event.id) }
            subscriber b { on: Paid  run: noop(event.id) }
        "#;
        let checked = jadpo_lang::check("app.jadpo", src);
        let rendered = checked.render(src);
        checked.app.unwrap_or_else(|| panic!("{rendered}"))
    }

    fn paid() -> serde_json::Value {
        json!({"id": "p1", "cents": 100, "rate": 1, "ok": true, "meta": {}, "tags": []})
    }

    #[test]
    fn a_valid_event_gets_one_delivery_per_subscriber() {
        let e = prepare(&app(), "Paid", &paid()).unwrap();
        assert_eq!(e.subscribers, ["a", "b"]);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&e.payload).unwrap(), paid());
        assert!(prepare(&app(), "Quiet", &json!({"id": "x"}))
            .unwrap()
            .subscribers
            .is_empty());
    }

    #[test]
    fn each_bad_payload_names_its_field() {
        let app = app();
        let mut missing = paid();
        missing.as_object_mut().unwrap().remove("cents");
        let e = prepare(&app, "Paid", &missing).unwrap_err();
        assert_eq!((e.code, e.field.as_deref()), ("event.invalid", Some("cents")));
        assert!(e.message.contains("missing"), "{e}");

        let mut wrong = paid();
        wrong["cents"] = json!("100");
        let e = prepare(&app, "Paid", &wrong).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("cents"));
        assert!(e.message.contains("must be int, not string"), "{e}");

        let mut float_for_int = paid();
        float_for_int["cents"] = json!(1.5);
        assert_eq!(
            prepare(&app, "Paid", &float_for_int).unwrap_err().field.as_deref(),
            Some("cents")
        );

        let mut extra = paid();
        extra["card_number"] = json!("4242");
        let e = prepare(&app, "Paid", &extra).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("card_number"));
        assert!(!e.message.contains("4242"), "a value never appears in an error: {e}");
    }

    #[test]
    fn unknown_events_and_non_objects_are_refused() {
        assert_eq!(prepare(&app(), "Nope", &json!({})).unwrap_err().code, "event.unknown");
        let e = prepare(&app(), "Paid", &json!([1])).unwrap_err();
        assert_eq!((e.code, e.field), ("event.invalid", None));
    }

    #[test]
    fn oversized_payloads_are_refused() {
        let mut big = paid();
        big["meta"] = json!({"blob": "x".repeat(MAX_PAYLOAD_BYTES)});
        assert_eq!(prepare(&app(), "Paid", &big).unwrap_err().code, "event.too_large");
    }

    #[test]
    fn an_int_is_64_bit_signed() {
        let app = app();
        for fits in [json!(i64::MAX), json!(i64::MIN), json!(0)] {
            let mut p = paid();
            p["cents"] = fits.clone();
            assert!(prepare(&app, "Paid", &p).is_ok(), "{fits}");
        }
        let mut above = paid();
        above["cents"] = json!(u64::MAX);
        let e = prepare(&app, "Paid", &above).unwrap_err();
        assert_eq!((e.code, e.field.as_deref()), ("event.invalid", Some("cents")));
        assert!(e.message.contains("above int's range"), "{e}");
        assert!(!e.message.contains(&u64::MAX.to_string()), "{e}");
        let mut just_above = paid();
        just_above["cents"] = json!(i64::MAX as u64 + 1);
        assert_eq!(prepare(&app, "Paid", &just_above).unwrap_err().code, "event.invalid");
        // A float field takes any number.
        let mut rate = paid();
        rate["rate"] = json!(u64::MAX);
        assert!(prepare(&app, "Paid", &rate).is_ok());
    }

    #[test]
    fn an_idempotency_key_is_1_to_255_bytes_of_visible_ascii() {
        for ok in ["k", "order-1001", "a b", "!~", &"x".repeat(255)] {
            assert_eq!(idempotency_key(ok).as_deref(), Ok(ok), "{ok:?}");
        }
        for bad in ["", &"x".repeat(256), "é-ключ", "a\tb", "a\nb", "\u{7f}", "\u{0}"] {
            let e = idempotency_key(bad).expect_err(bad);
            assert_eq!(e.code, "event.idempotency_key_invalid");
            assert!(bad.is_empty() || !e.message.contains(bad), "never the key: {e}");
        }
    }
}
