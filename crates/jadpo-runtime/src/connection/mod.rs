//! HTTP connections (docs/app-file.md): resolved once at start, called by
//! actions, each ending classified by `jadpo_core::call::classify`.
//!
//! - [`Connections::resolve`] reads every connection's `env()` and
//!   `secret()` settings, reporting every missing or invalid one at once.
//! - [`Connections::call`] sends a call with the connection's timeout and
//!   its own `retry:` (resending `unavailable` and `rate_limited` endings
//!   after a jittered wait that honours `Retry-After`, never past the run's
//!   deadline), signs it when the connection has a `signing_secret:`, and
//!   returns the action's result with the breaker's verdict, taken from the
//!   last send.
//! - A connection may be replaced by a [`Fake`] or a [`Recording`]: their
//!   answers are classified the same way but carry no verdict, so they never
//!   reach a breaker.
//! - [`Connections::simulated`] answers every connection from a
//!   simulation's scenario ([`simulated::Provider`]) on tokio's clock, with
//!   verdicts, for `jadpo simulate`.
//!
//! Nothing here logs or prints a header value, a secret, a body or an
//! interpolated path.

pub mod broker;
mod call;
mod double;
mod http;
mod resend;
mod resolve;
pub mod signing;
pub mod simulated;
mod startup_error;
pub mod wire;

pub use double::{Answer, Double, Fake, Received, Recording, RecordingError};
pub use resolve::HttpConnection;
pub use startup_error::{Setting, StartupError};
pub use wire::{method_name, parse_retry_after, render_path, render_target, template_text};

use jadpo_core::{CallVerdict, Failure};
use jadpo_lang::{App, Method};
use reqwest::header::HeaderMap;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One call an action makes.
#[derive(Clone)]
pub struct CallRequest {
    pub connection: String,
    pub method: Method,
    /// Interpolated and percent-encoded ([`render_path`]); appended to the
    /// connection's base URL. Never logged.
    pub path: String,
    /// As written ([`template_text`]); what logs show.
    pub path_template: String,
    /// Sent as JSON.
    pub body: Option<serde_json::Value>,
    /// Sent as `Idempotency-Key`; makes a POST or PATCH safe to resend.
    pub idempotency_key: Option<String>,
    /// `webhook-id` when the connection signs: the same on every resend.
    pub message_id: String,
    /// The trace the run belongs to (its event's): each send carries it on
    /// as `traceparent` and `tracestate`, under a span id of its own.
    pub trace: Option<jadpo_core::TraceContext>,
    /// Where each send's client span goes (its run's: off by default).
    pub spans: crate::spans::Spans,
}

impl fmt::Debug for CallRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallRequest")
            .field("connection", &self.connection)
            .field("method", &method_name(self.method))
            .field("path_template", &self.path_template)
            .field("body", &self.body.as_ref().map(|_| "<redacted>"))
            .field("idempotency_key", &self.idempotency_key.as_ref().map(|_| "<redacted>"))
            .field("message_id", &self.message_id)
            .field("trace", &self.trace.as_ref().map(|t| t.trace_id()))
            .finish()
    }
}

/// A provider's answer. `Debug` shows the status, header names and the
/// body's length only.
#[derive(Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.keys().map(|k| k.as_str()).collect();
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &names)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

/// How a call ended, with everything its sends did.
#[derive(Clone, Debug)]
pub struct CallOutcome {
    /// A 2xx answer, or the failure for the action (its `retry_after` set
    /// from the last answer's `Retry-After` for 429, 408 and 5xx).
    pub result: Result<Response, Failure>,
    /// For the connection's breaker: how the last send that ended on its own
    /// ended. `None` when a fake or a recording answered, when nothing was
    /// sent, or when the run's deadline cut the only send short.
    pub verdict: Option<CallVerdict>,
    /// Requests sent, the first included.
    pub sends: u32,
    /// The last answer's status, if one came.
    pub status: Option<u16>,
    /// The waits taken between sends, in order.
    pub waits: Vec<Duration>,
    /// The wait the call's retry drew and did not take because it would have
    /// passed the run's deadline.
    pub skipped_wait: Option<Duration>,
}

impl CallOutcome {
    fn failed(failure: Failure) -> CallOutcome {
        CallOutcome {
            result: Err(failure),
            verdict: None,
            sends: 0,
            status: None,
            waits: Vec::new(),
            skipped_wait: None,
        }
    }
}

/// How one send ended, before classification.
pub(crate) enum Sent {
    Answered(Response),
    /// Never left: DNS, refused, reset before sending.
    NeverLeft,
    /// Sent, and no answer within the connection's timeout.
    NoAnswer,
    /// Sent, and the connection broke before a whole answer came.
    Lost,
    /// The run's deadline came first.
    CutByDeadline,
    /// A defect: the request couldn't be built, or a recording has no
    /// answer for it.
    Defect(Failure),
}

enum Endpoint {
    Http(HttpConnection),
    Broker(Box<broker::BrokerConnection>),
    /// A fake or a recording; `broker` is the connection's when it
    /// publishes, so a double's endings carry the broker's codes.
    Double {
        double: Double,
        attempts: u32,
        broker: Option<jadpo_core::publish::Broker>,
    },
    /// Answered by a simulation's scenario, judged as a real provider.
    Simulated(simulated::Simulated),
}

impl Endpoint {
    fn attempts(&self) -> u32 {
        match self {
            Endpoint::Http(conn) => conn.attempts,
            Endpoint::Broker(conn) => conn.attempts,
            Endpoint::Double { attempts, .. } => *attempts,
            Endpoint::Simulated(s) => s.attempts,
        }
    }

    /// The seed of one call's resend waits: `given` (drawn at random by
    /// the caller), but a simulated connection's provider's own when the
    /// call may resend, so that a simulation repeats from its seed.
    fn resend_seed(&self, connection: &str, given: u64) -> u64 {
        match self {
            Endpoint::Simulated(s) if s.attempts > 1 => s.provider.resend_seed(connection),
            _ => given,
        }
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Http(conn) => conn.fmt(f),
            Endpoint::Broker(conn) => conn.fmt(f),
            Endpoint::Double { double, .. } => double.fmt(f),
            Endpoint::Simulated(_) => f.write_str("Simulated"),
        }
    }
}

/// Every connection of an app, resolved, sharing one HTTP client. Cheap to
/// share behind an `Arc`; `call` takes `&self`.
pub struct Connections {
    client: reqwest::Client,
    endpoints: BTreeMap<String, Endpoint>,
    /// Unix seconds now, read for each send's `webhook-timestamp`.
    wall: WallClock,
}

/// Where a send reads the time it signs with: the system clock, or a test's.
pub type WallClock = std::sync::Arc<dyn Fn() -> i64 + Send + Sync>;

fn system_wall() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.endpoints.iter()).finish()
    }
}

/// [`Connections::replace`] was given a name the app doesn't declare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownConnection(pub String);

impl fmt::Display for UnknownConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no connection is named `{}`", self.0)
    }
}

impl std::error::Error for UnknownConnection {}

impl Connections {
    /// Resolves every connection of `app`, reading `env("X")` and
    /// `secret("X")` through `env`. Every problem is reported at once.
    pub fn resolve(app: &App, env: impl Fn(&str) -> Option<String>) -> Result<Connections, Vec<StartupError>> {
        Connections::resolve_with_doubles(app, env, Vec::<(String, Double)>::new())
    }

    /// As [`Connections::resolve`], with some connections replaced by
    /// doubles from the start: their settings are not read, so a test needs
    /// no environment for a connection it fakes.
    pub fn resolve_with_doubles(
        app: &App,
        env: impl Fn(&str) -> Option<String>,
        doubles: impl IntoIterator<Item = (String, Double)>,
    ) -> Result<Connections, Vec<StartupError>> {
        let mut doubles: BTreeMap<String, Double> = doubles.into_iter().collect();
        let mut errors = Vec::new();
        for name in doubles.keys() {
            if !app.connections.contains_key(name) {
                errors.push(StartupError::DoubleUnknown {
                    connection: name.clone(),
                });
            }
        }
        let mut endpoints = BTreeMap::new();
        for (name, conn) in &app.connections {
            let endpoint = match doubles.remove(name) {
                Some(double) => Endpoint::Double {
                    double,
                    attempts: conn.attempts.max(1),
                    broker: conn.driver.broker(),
                },
                None if conn.driver.broker().is_some() => match broker::resolve_broker(conn, &env, &mut errors) {
                    Some(resolved) => Endpoint::Broker(Box::new(resolved)),
                    None => continue,
                },
                None => match resolve::resolve_http(conn, &env, &mut errors) {
                    Some(resolved) => Endpoint::Http(resolved),
                    None => continue,
                },
            };
            endpoints.insert(name.clone(), endpoint);
        }
        let shortest = endpoints
            .values()
            .filter_map(|e| match e {
                Endpoint::Http(conn) => Some(conn.timeout),
                Endpoint::Broker(_) | Endpoint::Double { .. } | Endpoint::Simulated(_) => None,
            })
            .min()
            .unwrap_or(jadpo_lang::Connection::DEFAULT_TIMEOUT);
        let client = match http::client(shortest) {
            Ok(client) => Some(client),
            Err(e) => {
                errors.push(StartupError::ClientFailed { reason: e.to_string() });
                None
            }
        };
        match client {
            Some(client) if errors.is_empty() => Ok(Connections {
                client,
                endpoints,
                wall: std::sync::Arc::new(system_wall),
            }),
            _ => Err(errors),
        }
    }

    /// Every connection of `app` answered by `provider`, with the app's
    /// `timeout:` and `retry:` for each: a simulation's connections. No
    /// setting is read (a simulation needs no URL, token or secret) and
    /// nothing is sent. Their sends move tokio's clock on, so they run only
    /// on a paused clock (`start_paused`), where they take no real time.
    pub fn simulated(app: &App, provider: std::sync::Arc<dyn simulated::Provider>) -> Connections {
        let endpoints = app
            .connections
            .iter()
            .map(|(name, conn)| {
                let endpoint = Endpoint::Simulated(simulated::Simulated {
                    provider: provider.clone(),
                    timeout: conn.timeout,
                    attempts: conn.attempts.max(1),
                    broker: conn.driver.broker(),
                });
                (name.clone(), endpoint)
            })
            .collect();
        Connections {
            client: reqwest::Client::new(),
            endpoints,
            wall: std::sync::Arc::new(|| 0),
        }
    }

    /// Replaces a connection's driver with a fake or a recording, for a
    /// user's tests and the embedded API. The connection keeps its
    /// `retry:`; its calls no longer reach any breaker.
    pub fn replace(&mut self, name: &str, double: impl Into<Double>) -> Result<(), UnknownConnection> {
        let endpoint = self
            .endpoints
            .get_mut(name)
            .ok_or_else(|| UnknownConnection(name.to_owned()))?;
        let attempts = endpoint.attempts();
        let broker = match endpoint {
            Endpoint::Broker(conn) => Some(conn.broker),
            Endpoint::Double { broker, .. } => *broker,
            Endpoint::Simulated(s) => s.broker,
            Endpoint::Http(_) => None,
        };
        *endpoint = Endpoint::Double {
            double: double.into(),
            attempts,
            broker,
        };
        Ok(())
    }

    /// Reads each send's `webhook-timestamp` from `wall` (unix seconds)
    /// instead of the system clock: for tests of signing over time.
    pub fn set_wall_clock(&mut self, wall: WallClock) {
        self.wall = wall;
    }

    /// The connections' names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.endpoints.keys().map(String::as_str)
    }

    /// The resolved connection, when its real driver answers its calls.
    pub fn http(&self, name: &str) -> Option<&HttpConnection> {
        match self.endpoints.get(name)? {
            Endpoint::Http(conn) => Some(conn),
            Endpoint::Broker(_) | Endpoint::Double { .. } | Endpoint::Simulated(_) => None,
        }
    }

    /// The resolved broker connection, when its real driver publishes.
    pub fn broker(&self, name: &str) -> Option<&broker::BrokerConnection> {
        match self.endpoints.get(name)? {
            Endpoint::Broker(conn) => Some(conn),
            Endpoint::Http(_) | Endpoint::Double { .. } | Endpoint::Simulated(_) => None,
        }
    }

    /// Whether a fake or a recording answers this connection's calls.
    pub fn is_double(&self, name: &str) -> bool {
        matches!(self.endpoints.get(name), Some(Endpoint::Double { .. }))
    }
}
