//! Test doubles of a connection: a fake (scripted answers, in order, then a
//! default) and a recording (answers replayed from a JSON-lines file).
//!
//! Their answers are classified exactly as a real provider's are, and the
//! connection's own retries apply to them, but they never reach a breaker:
//! a call answered by a double carries no verdict.

use jadpo_core::{Failure, FailureKind};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

/// How a double answers one send.
#[derive(Clone, PartialEq, Eq)]
pub enum Answer {
    /// The provider answered with this status, headers and body.
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// As if the call never left (refused, DNS).
    NeverLeft,
    /// As if no answer came in time after sending.
    TimedOut,
}

impl Answer {
    /// This status, no headers, an empty body.
    pub fn status(status: u16) -> Answer {
        Answer::Http {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// This status with a JSON body and `content-type: application/json`.
    pub fn json(status: u16, body: &serde_json::Value) -> Answer {
        Answer::Http {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// Adds a header; ignored by `NeverLeft` and `TimedOut`.
    ///
    /// # Panics
    /// When the name or the value can't be an HTTP header.
    pub fn with_header(mut self, name: &str, value: &str) -> Answer {
        assert!(
            HeaderName::from_bytes(name.as_bytes()).is_ok() && HeaderValue::from_str(value).is_ok(),
            "`{name}` is not a valid header for a fake's answer"
        );
        if let Answer::Http { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }

    pub(crate) fn header_map(headers: &[(String, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                map.append(n, v);
            }
        }
        map
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Http { status, headers, body } => f
                .debug_struct("Http")
                .field("status", status)
                .field("headers", &headers.len())
                .field("body_bytes", &body.len())
                .finish(),
            Answer::NeverLeft => f.write_str("NeverLeft"),
            Answer::TimedOut => f.write_str("TimedOut"),
        }
    }
}

/// One send a double received, for a test's assertions.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub method: &'static str,
    /// As sent, interpolated.
    pub path: String,
    pub body: Option<serde_json::Value>,
    pub idempotency_key: Option<String>,
}

/// Scripted answers, in order, then the default for every later send. A
/// handle: clones share the script and what was received.
#[derive(Clone)]
pub struct Fake {
    inner: Arc<Mutex<FakeState>>,
}

struct FakeState {
    script: VecDeque<Answer>,
    default: Answer,
    received: Vec<Received>,
}

impl Fake {
    /// Answers every send with `default` until answers are scripted.
    pub fn new(default: Answer) -> Fake {
        Fake {
            inner: Arc::new(Mutex::new(FakeState {
                script: VecDeque::new(),
                default,
                received: Vec::new(),
            })),
        }
    }

    /// Answers `200 {}` unless scripted otherwise.
    pub fn ok() -> Fake {
        Fake::new(Answer::json(200, &serde_json::json!({})))
    }

    /// Adds an answer to the script.
    pub fn then(self, answer: Answer) -> Fake {
        self.push(answer);
        self
    }

    /// Adds an answer to the script, at any time.
    pub fn push(&self, answer: Answer) {
        self.lock().script.push_back(answer);
    }

    /// Every send received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    pub(crate) fn answer(&self, received: Received) -> Answer {
        let mut state = self.lock();
        state.received.push(received);
        match state.script.pop_front() {
            Some(answer) => answer,
            None => state.default.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Fake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Fake")
            .field("scripted", &state.script.len())
            .field("received", &state.received.len())
            .finish()
    }
}

/// Answers replayed from a JSON-lines file, one answer a line:
/// `{"method": "POST", "path": "/payments/p1/record", "status": 200,
/// "headers": {"x": "y"}, "body": {...}}` (`headers` and `body` optional).
///
/// A send takes the next line with its method and path; once they are all
/// used, the last one answers again. A string `body` is sent as its text,
/// any other JSON value as JSON. A send no line matches fails with
/// `internal_fault`, code `recording.unmatched`.
#[derive(Clone)]
pub struct Recording {
    inner: Arc<Mutex<BTreeMap<(String, String), Replay>>>,
}

struct Replay {
    answers: Vec<Answer>,
    next: usize,
}

/// A line of a recording that can't be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingError {
    /// 1-based; 0 when the file itself can't be read.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for RecordingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "recording: {}", self.message)
        } else {
            write!(f, "recording, line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for RecordingError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    method: String,
    path: String,
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<serde_json::Value>,
}

impl Recording {
    pub fn from_file(path: impl AsRef<Path>) -> Result<Recording, RecordingError> {
        let text = std::fs::read_to_string(path.as_ref()).map_err(|e| RecordingError {
            line: 0,
            message: format!("can't read {}: {e}", path.as_ref().display()),
        })?;
        Recording::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Recording, RecordingError> {
        let mut map: BTreeMap<(String, String), Replay> = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let error = |message: String| RecordingError { line: i + 1, message };
            let line: Line = serde_json::from_str(raw).map_err(|e| error(e.to_string()))?;
            if !(100..=999).contains(&line.status) {
                return Err(error(format!("status {} is not an HTTP status", line.status)));
            }
            let mut answer = Answer::status(line.status);
            for (name, value) in &line.headers {
                if HeaderName::from_bytes(name.as_bytes()).is_err() || HeaderValue::from_str(value).is_err() {
                    return Err(error(format!("header `{name}` is not a valid HTTP header")));
                }
                answer = answer.with_header(name, value);
            }
            if let (Answer::Http { body, headers, .. }, Some(value)) = (&mut answer, line.body) {
                *body = match value {
                    serde_json::Value::String(s) => s.into_bytes(),
                    other => {
                        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type")) {
                            headers.push(("content-type".into(), "application/json".into()));
                        }
                        other.to_string().into_bytes()
                    }
                };
            }
            map.entry((line.method.to_ascii_uppercase(), line.path))
                .or_insert_with(|| Replay {
                    answers: Vec::new(),
                    next: 0,
                })
                .answers
                .push(answer);
        }
        Ok(Recording {
            inner: Arc::new(Mutex::new(map)),
        })
    }

    pub(crate) fn answer(&self, method: &str, path: &str) -> Result<Answer, Failure> {
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(replay) = map.get_mut(&(method.to_owned(), path.to_owned())) else {
            return Err(Failure::new("recording.unmatched", FailureKind::InternalFault)
                .with_field("method", method)
                .with_field("path", path));
        };
        let at = replay.next.min(replay.answers.len() - 1);
        replay.next += 1;
        Ok(replay.answers[at].clone())
    }
}

impl fmt::Debug for Recording {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Recording").field("routes", &map.len()).finish()
    }
}

/// What may replace a connection's real driver.
#[derive(Clone, Debug)]
pub enum Double {
    Fake(Fake),
    Recording(Recording),
}

impl From<Fake> for Double {
    fn from(fake: Fake) -> Double {
        Double::Fake(fake)
    }
}

impl From<Recording> for Double {
    fn from(recording: Recording) -> Double {
        Double::Recording(recording)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_replays_in_order_then_repeats_its_last() {
        let r = Recording::parse(
            r#"{"method": "post", "path": "/a", "status": 503}

{"method": "POST", "path": "/a", "status": 200, "body": {"ok": true}}
{"method": "GET", "path": "/b", "status": 200, "body": "plain", "headers": {"x-n": "1"}}
"#,
        )
        .unwrap();
        let status = |a: Answer| match a {
            Answer::Http { status, .. } => status,
            other => panic!("{other:?}"),
        };
        assert_eq!(status(r.answer("POST", "/a").unwrap()), 503);
        assert_eq!(status(r.answer("POST", "/a").unwrap()), 200);
        assert_eq!(status(r.answer("POST", "/a").unwrap()), 200);
        let Answer::Http { body, headers, .. } = r.answer("GET", "/b").unwrap() else {
            panic!()
        };
        assert_eq!(body, b"plain");
        assert_eq!(headers, vec![("x-n".to_owned(), "1".to_owned())]);
        let unmatched = r.answer("GET", "/a").unwrap_err();
        assert_eq!(unmatched.code, "recording.unmatched");
        assert_eq!(unmatched.kind, FailureKind::InternalFault);
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = Recording::parse("{\"method\": \"GET\", \"path\": \"/\", \"status\": 200}\n{oops}").unwrap_err();
        assert_eq!(e.line, 2);
        let e = Recording::parse("{\"method\": \"GET\", \"path\": \"/\", \"status\": 42}").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn a_fake_answers_its_script_then_its_default() {
        let fake = Fake::new(Answer::status(204))
            .then(Answer::status(503))
            .then(Answer::NeverLeft);
        let got = |f: &Fake| {
            f.answer(Received {
                method: "GET",
                path: "/".into(),
                body: None,
                idempotency_key: None,
            })
        };
        assert_eq!(got(&fake), Answer::status(503));
        assert_eq!(got(&fake), Answer::NeverLeft);
        assert_eq!(got(&fake), Answer::status(204));
        assert_eq!(got(&fake), Answer::status(204));
        assert_eq!(fake.received().len(), 4);
    }
}
