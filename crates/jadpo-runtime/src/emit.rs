//! Checking an event's payload against its declaration before it is emitted.
//!
//! `jadpo emit`, `POST /events/NAME` and the embedded API all come through
//! here, so a malformed event is refused the same way everywhere: with a
//! stable code and the field at fault, before anything is written.

use jadpo_core::key::{Key, KeyError, KeyValue, Keyed};
use jadpo_lang::{App, Type};
use jadpo_store::NewEvent;
use std::collections::BTreeMap;
use std::fmt;

/// The largest payload accepted, in bytes of JSON.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// Why an event was refused before anything was written: each with its
/// stable code (`code()`), the field at fault where there is one
/// (`field()`), and a message that says what to fix (its `Display`,
/// without the code).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventError {
    /// `event.unknown`: the app declares no event of that name.
    Unknown {
        /// The name given.
        event: String,
        /// Which events the app declares.
        message: String,
    },
    /// `event.invalid`: the payload does not fit the event's declaration
    /// (a field missing, undeclared or of another type, or not an object).
    Invalid {
        /// The field at fault, if one is.
        field: Option<String>,
        /// What is wrong and what to change.
        message: String,
    },
    /// `event.too_large`: the payload's JSON is over [`MAX_PAYLOAD_BYTES`].
    TooLarge {
        /// Its size in bytes.
        bytes: usize,
        /// What is wrong.
        message: String,
    },
    /// `event.key_invalid`: a subscriber's `key:` cannot be read from the
    /// payload.
    KeyInvalid {
        /// The field the key is read from.
        field: String,
        /// Which subscriber and why.
        message: String,
    },
    /// `event.idempotency_key_invalid`: the idempotency key is not 1 to
    /// 255 bytes of visible ASCII.
    IdempotencyKeyInvalid {
        /// What is wrong with it (never the key itself).
        message: String,
    },
}

impl EventError {
    /// The stable code, the same the command line and the HTTP API give.
    pub fn code(&self) -> &'static str {
        match self {
            EventError::Unknown { .. } => "event.unknown",
            EventError::Invalid { .. } => "event.invalid",
            EventError::TooLarge { .. } => "event.too_large",
            EventError::KeyInvalid { .. } => "event.key_invalid",
            EventError::IdempotencyKeyInvalid { .. } => "event.idempotency_key_invalid",
        }
    }

    /// The payload's field at fault, where one is.
    pub fn field(&self) -> Option<&str> {
        match self {
            EventError::Invalid { field, .. } => field.as_deref(),
            EventError::KeyInvalid { field, .. } => Some(field),
            _ => None,
        }
    }

    /// What is wrong and what to fix, without the code.
    pub fn message(&self) -> &str {
        match self {
            EventError::Unknown { message, .. }
            | EventError::Invalid { message, .. }
            | EventError::TooLarge { message, .. }
            | EventError::KeyInvalid { message, .. }
            | EventError::IdempotencyKeyInvalid { message } => message,
        }
    }
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for EventError {}

fn invalid(field: &str, message: String) -> EventError {
    EventError::Invalid {
        field: Some(field.to_owned()),
        message,
    }
}

/// The key a subscriber's `key:` (`path`, the fields after `event`)
/// names in `payload`: a string, or an int as its decimal text.
pub fn delivery_key(path: &[String], payload: &serde_json::Value) -> Result<Key, KeyError> {
    let mut value = payload;
    for field in path {
        match value.get(field) {
            Some(v) => value = v,
            None => return Err(KeyError::Missing),
        }
    }
    Key::new(match value {
        serde_json::Value::String(s) => KeyValue::Str(s),
        serde_json::Value::Number(n) if n.is_i64() => KeyValue::Int(n.as_i64().unwrap_or_default()),
        serde_json::Value::Null => KeyValue::Missing,
        other => KeyValue::Other(type_of(other)),
    })
}

/// Each keyed subscriber's key for this event, or the first that cannot
/// be one, as `event.key_invalid` naming the subscriber and the field.
fn keys<'a>(
    subscribers: impl Iterator<Item = &'a jadpo_lang::Subscriber>,
    payload: &serde_json::Value,
) -> Result<BTreeMap<String, Keyed>, EventError> {
    let mut keys = BTreeMap::new();
    for s in subscribers {
        let Some(path) = &s.key else { continue };
        match delivery_key(path, payload) {
            Ok(key) => {
                keys.insert(s.name.clone(), Keyed { key, rule: s.key_rule });
            }
            Err(e) => {
                let field = path.join(".");
                return Err(EventError::KeyInvalid {
                    message: format!("subscriber `{}` keys its deliveries on `event.{field}`: {e}", s.name),
                    field,
                });
            }
        }
    }
    Ok(keys)
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
    let refused = |why: String| EventError::IdempotencyKeyInvalid {
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
        return Err(EventError::Unknown {
            event: name.to_owned(),
            message: format!(
                "no event `{name}` is declared in the app; declared: {}",
                known.join(", ")
            ),
        });
    };
    let serde_json::Value::Object(fields) = payload else {
        return Err(EventError::Invalid {
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
        return Err(EventError::TooLarge {
            bytes: text.len(),
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
        keys: keys(app.subscribers_of(name), payload)?,
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

    /// A keyed subscriber's delivery gets its key from the event: a string
    /// as it is, an int as its decimal text, a field inside an object too;
    /// a value that cannot be a key refuses the emit, naming the field and
    /// the subscriber, never the value.
    #[test]
    fn a_keyed_subscribers_delivery_gets_its_key_from_the_event() {
        let src = r#"
            event Paid { id: string  cents: int  meta: object }
            action noop() uses c
            connection c { base_url: "http://localhost" }
            subscriber by_id { on: Paid  run: noop()  key: event.id  order: fifo }
            subscriber by_cents { on: Paid  run: noop()  key: event.cents  concurrency_per_key: 3 }
            subscriber by_account { on: Paid  run: noop()  key: event.meta.account }
            subscriber plain { on: Paid  run: noop() }
        "#;
        let app = jadpo_lang::check("app.jadpo", src).app.unwrap();
        let e = prepare(
            &app,
            "Paid",
            &json!({"id": "c-42", "cents": 100, "meta": {"account": 7}}),
        )
        .unwrap();
        let keys: Vec<(&str, &str)> = e.keys.iter().map(|(s, k)| (s.as_str(), k.key.as_str())).collect();
        assert_eq!(keys, [("by_account", "7"), ("by_cents", "100"), ("by_id", "c-42")]);
        // Each with its subscriber's order or cap, kept with the delivery.
        use jadpo_core::key_rule::KeyRule;
        let rules: Vec<Option<KeyRule>> = e.keys.values().map(|k| k.rule).collect();
        assert_eq!(rules, [None, Some(KeyRule::Cap(3)), Some(KeyRule::Fifo)]);
        for (payload, field, why) in [
            (json!({"id": "", "cents": 1, "meta": {"account": "a"}}), "id", "empty"),
            (
                json!({"id": "x".repeat(257), "cents": 1, "meta": {"account": "a"}}),
                "id",
                "257 bytes",
            ),
            (json!({"id": "c", "cents": 1, "meta": {}}), "meta.account", "missing"),
            (
                json!({"id": "c", "cents": 1, "meta": {"account": null}}),
                "meta.account",
                "missing",
            ),
            (
                json!({"id": "c", "cents": 1, "meta": {"account": 1.5}}),
                "meta.account",
                "not float",
            ),
            (
                json!({"id": "c", "cents": 1, "meta": {"account": {"n": "secret"}}}),
                "meta.account",
                "not object",
            ),
        ] {
            let err = prepare(&app, "Paid", &payload).unwrap_err();
            assert_eq!((err.code(), err.field()), ("event.key_invalid", Some(field)), "{err}");
            assert!(
                err.message().contains(why) && err.message().contains("subscriber `by_"),
                "{err}"
            );
            assert!(!err.message().contains("secret"), "no value in the message: {err}");
        }
    }

    #[test]
    fn each_bad_payload_names_its_field() {
        let app = app();
        let mut missing = paid();
        missing.as_object_mut().unwrap().remove("cents");
        let e = prepare(&app, "Paid", &missing).unwrap_err();
        assert_eq!((e.code(), e.field()), ("event.invalid", Some("cents")));
        assert!(e.message().contains("missing"), "{e}");

        let mut wrong = paid();
        wrong["cents"] = json!("100");
        let e = prepare(&app, "Paid", &wrong).unwrap_err();
        assert_eq!(e.field(), Some("cents"));
        assert!(e.message().contains("must be int, not string"), "{e}");

        let mut float_for_int = paid();
        float_for_int["cents"] = json!(1.5);
        assert_eq!(
            prepare(&app, "Paid", &float_for_int).unwrap_err().field(),
            Some("cents")
        );

        let mut extra = paid();
        extra["card_number"] = json!("4242");
        let e = prepare(&app, "Paid", &extra).unwrap_err();
        assert_eq!(e.field(), Some("card_number"));
        assert!(!e.message().contains("4242"), "a value never appears in an error: {e}");
    }

    #[test]
    fn unknown_events_and_non_objects_are_refused() {
        assert_eq!(prepare(&app(), "Nope", &json!({})).unwrap_err().code(), "event.unknown");
        let e = prepare(&app(), "Paid", &json!([1])).unwrap_err();
        assert_eq!((e.code(), e.field()), ("event.invalid", None));
    }

    #[test]
    fn oversized_payloads_are_refused() {
        let mut big = paid();
        big["meta"] = json!({"blob": "x".repeat(MAX_PAYLOAD_BYTES)});
        assert_eq!(prepare(&app(), "Paid", &big).unwrap_err().code(), "event.too_large");
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
        assert_eq!((e.code(), e.field()), ("event.invalid", Some("cents")));
        assert!(e.message().contains("above int's range"), "{e}");
        assert!(!e.message().contains(&u64::MAX.to_string()), "{e}");
        let mut just_above = paid();
        just_above["cents"] = json!(i64::MAX as u64 + 1);
        assert_eq!(prepare(&app, "Paid", &just_above).unwrap_err().code(), "event.invalid");
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
            assert_eq!(e.code(), "event.idempotency_key_invalid");
            assert!(bad.is_empty() || !e.message().contains(bad), "never the key: {e}");
        }
    }
}
