//! Log lines: readable under `jadpo dev`, one JSON object per line under
//! `jadpo serve`. An embedded program may install the same with [`init`].
//!
//! The runtime's events name themselves in their message (`delivery.retry`,
//! `breaker.opened`, `delivery.alert`). Both formats print that name first
//! and the event's fields after it, in the order the event recorded them, so
//! the alert line comes out exactly as docs/retries.md writes it:
//! `{"event": "delivery.alert", "alert": "connection_unavailable", "connection": …, "since": …, "held": …}`
//! with `level` and `time` after it.
//!
//! A library's event (a driver's, a pool's) names nothing of ours: its
//! message is prose (`Connection error: connection closed`), which would
//! make a new event name of each text. It comes out as `library.message`
//! with the library's module as `target` and its text as `message`, so
//! every line has a stable name to filter and count on.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

/// What `init` shows unless `RUST_LOG` says otherwise: every Jadpo event
/// from info up, libraries' warnings.
pub const DEFAULT_FILTER: &str = "warn,jadpo=info,jadpo_runtime=info,jadpo_cli=info";

/// The subscriber [`init_with`] adds its extra layer to.
pub type Base = tracing_subscriber::layer::Layered<
    Lines,
    tracing_subscriber::layer::Layered<EnvFilter, tracing_subscriber::Registry>,
>;

/// Installs the process's logger. `RUST_LOG` overrides `default_filter`.
pub fn init(format: Format, default_filter: &str) {
    init_with(format, default_filter, tracing_subscriber::layer::Identity::new());
}

/// [`init`] with one more layer after the lines, such as a metrics counter
/// that reads the same events.
pub fn init_with<L: Layer<Base> + Send + Sync + 'static>(format: Format, default_filter: &str, extra: L) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let layer = Lines {
        format,
        out: Mutex::new(Box::new(std::io::stderr())),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(layer)
        .with(extra)
        .try_init();
}

/// Formats events as lines into a writer.
pub struct Lines {
    pub format: Format,
    pub out: Mutex<Box<dyn std::io::Write + Send>>,
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    fields: Vec<(String, serde_json::Value)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, serde_json::Value::from(format!("{value:?}")));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.fields.push((field.name().to_owned(), value));
        }
    }
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// `{"event": "x", "k": v, ...}`: JSON with a space after each `:` and `,`,
/// as docs/retries.md writes the alert line.
pub fn json_line(event: &str, fields: &[(String, serde_json::Value)]) -> String {
    let mut line = String::from("{");
    let _ = write!(line, "\"event\": {}", serde_json::Value::from(event));
    for (k, v) in fields {
        let _ = write!(line, ", {}: {}", serde_json::Value::from(k.as_str()), v);
    }
    line.push('}');
    line
}

/// `12:00:01.250 WARN  delivery.retry delivery=42 code=http.503`
pub fn human_line(time: &str, level: &Level, event: &str, fields: &[(String, serde_json::Value)]) -> String {
    let mut line = format!("{time} {:<5} {event}", level_name(level).to_uppercase());
    for (k, v) in fields {
        match v {
            serde_json::Value::String(s) => {
                let _ = write!(line, " {k}={s}");
            }
            other => {
                let _ = write!(line, " {k}={other}");
            }
        }
    }
    line
}

/// The event name every library's line comes out under.
pub const LIBRARY_MESSAGE: &str = "library.message";

/// Whether `target` (a module path, or a name given with `target:`) is one
/// of Jadpo's crates.
fn ours(target: &str) -> bool {
    target
        .strip_prefix("jadpo")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('_') || rest.starts_with("::"))
}

/// The name a line comes out under, and its fields: ours by their message,
/// a library's as [`LIBRARY_MESSAGE`] with `target` and `message` first.
/// An event that came through the `log` crate names its module in
/// `log.target` (its own target is `log`); the rest of `log.*` (file,
/// line) is dropped.
fn named(target: &str, f: Fields) -> (String, Vec<(String, serde_json::Value)>) {
    let log_target = f
        .fields
        .iter()
        .find(|(k, _)| k == "log.target")
        .and_then(|(_, v)| v.as_str().map(str::to_owned));
    let target = log_target.as_deref().unwrap_or(target);
    if ours(target) {
        return (f.message.unwrap_or_else(|| target.to_owned()), f.fields);
    }
    let mut fields = vec![("target".to_owned(), serde_json::Value::from(target))];
    if let Some(message) = f.message {
        fields.push(("message".to_owned(), serde_json::Value::from(message)));
    }
    fields.extend(f.fields.into_iter().filter(|(k, _)| !k.starts_with("log.")));
    (LIBRARY_MESSAGE.to_owned(), fields)
}

impl<S: Subscriber> Layer<S> for Lines {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let (name, fields) = named(event.metadata().target(), f);
        let now = jiff::Timestamp::now();
        let line = match self.format {
            Format::Json => {
                let mut fields = fields;
                fields.push((
                    "level".into(),
                    serde_json::Value::from(level_name(event.metadata().level())),
                ));
                // Milliseconds, as every other time Jadpo prints.
                let time = crate::log::rfc3339(jadpo_core::Timestamp::from_millis(now.as_millisecond()));
                fields.push(("time".into(), serde_json::Value::from(time)));
                json_line(&name, &fields)
            }
            Format::Human => {
                let time = now.strftime("%H:%M:%S%.3f").to_string();
                human_line(&time, event.metadata().level(), &name, &fields)
            }
        };
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_alert_line_is_exactly_the_documented_one() {
        let fields = vec![
            ("alert".to_string(), json!("connection_unavailable")),
            ("connection".to_string(), json!("payments")),
            ("since".to_string(), json!("2026-11-30T03:00:00Z")),
            ("held".to_string(), json!(12)),
        ];
        assert_eq!(
            json_line("delivery.alert", &fields),
            r#"{"event": "delivery.alert", "alert": "connection_unavailable", "connection": "payments", "since": "2026-11-30T03:00:00Z", "held": 12}"#
        );
    }

    #[test]
    fn json_lines_escape_what_they_print() {
        let line = json_line("x", &[("code".into(), json!("a\"b\nc"))]);
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["code"], "a\"b\nc");
    }

    #[test]
    fn human_lines_read_as_key_value_pairs() {
        let line = human_line(
            "12:00:01.250",
            &Level::WARN,
            "delivery.retry",
            &[("delivery".into(), json!(42)), ("code".into(), json!("http.503"))],
        );
        assert_eq!(line, "12:00:01.250 WARN  delivery.retry delivery=42 code=http.503");
    }

    /// The lines `emit` logs through a JSON [`Lines`] layer.
    fn lines_of(emit: impl FnOnce()) -> String {
        let buf: std::sync::Arc<Mutex<Vec<u8>>> = Default::default();
        struct W(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let layer = Lines {
            format: Format::Json,
            out: Mutex::new(Box::new(W(buf.clone()))),
        };
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let out = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        out
    }

    #[test]
    fn a_librarys_event_comes_out_as_library_message_with_its_text_as_a_field() {
        // As deadpool-postgres logs a connection lost in a failover.
        let out = lines_of(|| tracing::warn!(target: "deadpool.postgres", "Connection error: {}", "connection closed"));
        assert!(
            out.starts_with(r#"{"event": "library.message", "target": "deadpool.postgres", "message": "Connection error: connection closed", "level": "warn", "time": ""#),
            "{out}"
        );
    }

    #[test]
    fn which_targets_are_ours() {
        for t in ["jadpo", "jadpo_runtime::worker", "jadpo::connection", "jadpo_store"] {
            assert!(ours(t), "{t}");
        }
        for t in [
            "deadpool.postgres",
            "tokio_postgres::connection",
            "jadpoish",
            "log",
            "hyper",
        ] {
            assert!(!ours(t), "{t}");
        }
    }

    #[test]
    fn a_log_crate_record_is_named_by_its_own_module() {
        let f = Fields {
            message: Some("unexpected message from server".into()),
            fields: vec![
                ("log.target".into(), json!("tokio_postgres::connection")),
                ("log.module_path".into(), json!("tokio_postgres::connection")),
                ("log.file".into(), json!("src/connection.rs")),
                ("log.line".into(), json!(123)),
            ],
        };
        let (name, fields) = named("log", f);
        assert_eq!(name, "library.message");
        assert_eq!(
            fields,
            vec![
                ("target".to_string(), json!("tokio_postgres::connection")),
                ("message".to_string(), json!("unexpected message from server")),
            ]
        );
        let ours = Fields {
            message: Some("delivery.retry".into()),
            fields: vec![("delivery".into(), json!(1))],
        };
        assert_eq!(
            named("jadpo_runtime::completer", ours),
            ("delivery.retry".to_string(), vec![("delivery".to_string(), json!(1))])
        );
    }

    #[test]
    fn events_are_formatted_through_the_layer_in_recorded_order() {
        let out = lines_of(|| {
            tracing::error!(
                alert = "connection_unavailable",
                connection = "payments",
                since = "t",
                held = 3u64,
                "delivery.alert"
            );
        });
        assert!(
            out.starts_with(r#"{"event": "delivery.alert", "alert": "connection_unavailable", "connection": "payments", "since": "t", "held": 3, "level": "error", "time": ""#),
            "{out}"
        );
    }
}
