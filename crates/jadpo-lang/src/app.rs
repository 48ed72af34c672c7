//! The checked app: plain data for the runtime, the store and the CLI.
//! Everything here has passed every check, so consumers can rely on it:
//! names resolve, arguments match parameters, budgets are in range.

use crate::diagnostic::Span;
use jadpo_core::limit::{Limits, Rate};
use jadpo_core::Budget;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct App {
    pub events: BTreeMap<String, Event>,
    pub connections: BTreeMap<String, Connection>,
    pub actions: BTreeMap<String, Action>,
    pub subscribers: BTreeMap<String, Subscriber>,
    pub schedules: BTreeMap<String, Schedule>,
    /// Where operator alerts are sent; `None` keeps them in the store only.
    pub alerts: Option<AlertRoute>,
}

impl App {
    /// The subscribers of an event, by name.
    pub fn subscribers_of<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Subscriber> {
        self.subscribers.values().filter(move |s| s.on == event)
    }

    /// "2 events, 2 connections, 3 actions, 3 subscribers, 1 schedule"
    pub fn summary(&self) -> String {
        let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        [
            count(self.events.len(), "event"),
            count(self.connections.len(), "connection"),
            count(self.actions.len(), "action"),
            count(self.subscribers.len(), "subscriber"),
            count(self.schedules.len(), "schedule"),
        ]
        .join(", ")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    String,
    Int,
    Float,
    Bool,
    Object,
    List,
}

impl Type {
    pub fn from_name(name: &str) -> Option<Type> {
        Some(match name {
            "string" => Type::String,
            "int" => Type::Int,
            "float" => Type::Float,
            "bool" => Type::Bool,
            "object" => Type::Object,
            "list" => Type::List,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Int => "int",
            Type::Float => "float",
            Type::Bool => "bool",
            Type::Object => "object",
            Type::List => "list",
        }
    }

    /// Whether a value of type `given` may be passed where `self` is
    /// expected. An int widens to a float; nothing else converts.
    pub fn accepts(self, given: Type) -> bool {
        self == given || (self == Type::Float && given == Type::Int)
    }
}

/// A field of an event or a parameter of an action.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub name: String,
    /// In declaration order.
    pub fields: Vec<Field>,
    pub span: Span,
}

impl Event {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// A connection setting that may come from the environment. Kept
/// unresolved: the runtime reads it at start, so the checked app never holds
/// a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    String(String),
    Env(String),
    Secret(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Http,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    pub name: String,
    pub driver: Driver,
    pub base_url: Value,
    /// Header names as written; HTTP compares them case-insensitively.
    pub headers: BTreeMap<String, Value>,
    /// One send's time limit.
    pub timeout: Duration,
    /// How many times one call may be sent within a delivery attempt,
    /// the first send included: 1 (the default) never resends.
    pub attempts: u32,
    /// Signs outgoing calls with Standard Webhooks headers when set.
    pub signing_secret: Option<Value>,
    /// `rate:`: the most calls per unit of time, sustained, across every
    /// process sharing the store. `None` (the default): no rate limit.
    pub rate: Option<Rate>,
    /// `concurrency:`: the most calls in flight at once, across every
    /// process sharing the store, 1 to [`Connection::MAX_CONCURRENCY`].
    /// `None` (the default): no limit.
    pub concurrency: Option<u32>,
    pub span: Span,
}

impl Connection {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(15 * 60);
    pub const MAX_ATTEMPTS: u32 = 10;
    pub const MAX_CONCURRENCY: u32 = 10_000;

    /// Its `rate:` and `concurrency:`; [`Limits::is_none`] when it has
    /// neither.
    pub fn limits(&self) -> Limits {
        Limits {
            rate: self.rate,
            concurrency: self.concurrency,
        }
    }
}

/// A value passed to an action or sent in a call, evaluated per delivery.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    String(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Object(Vec<(String, Expr)>),
    List(Vec<Expr>),
    /// The whole event that started the delivery.
    Event,
    /// `event.a.b`: a field of the event, and fields inside an object field.
    EventField(Vec<String>),
    /// One of the enclosing action's parameters.
    Param(String),
    Env(String),
    Secret(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
}

impl Method {
    pub const NAMES: [&'static str; 6] = ["get", "post", "put", "patch", "delete", "head"];

    pub fn from_name(name: &str) -> Option<Method> {
        Some(match name {
            "get" => Method::Get,
            "post" => Method::Post,
            "put" => Method::Put,
            "patch" => Method::Patch,
            "delete" => Method::Delete,
            "head" => Method::Head,
            _ => return None,
        })
    }

    /// Repeating the call has the same effect as sending it once, so a
    /// timeout after sending is `unavailable`, not `outcome_unknown`
    /// (DESIGN.md section 4).
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Method::Post | Method::Patch)
    }
}

/// `/payments/{payment_id}/record`, split at its placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    pub parts: Vec<PathPart>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathPart {
    Literal(String),
    /// A parameter of the action, percent-encoded when sent.
    Param(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub connection: String,
    pub method: Method,
    pub path: PathTemplate,
    pub body: Option<Expr>,
    /// Makes a non-idempotent method safe to resend.
    pub idempotency_key: Option<Expr>,
    pub span: Span,
}

/// Runs an action with arguments, one per parameter, in parameter order.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub action: String,
    pub args: Vec<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Call(Call),
    Run(Run),
}

#[derive(Clone, Debug, PartialEq)]
pub enum ActionBody {
    Statements(Vec<Statement>),
    /// Rust code supplies the action; it may call these connections.
    Uses(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    pub name: String,
    pub params: Vec<Field>,
    pub body: ActionBody,
    pub(crate) connections: BTreeSet<String>,
    pub span: Span,
}

impl Action {
    /// Every connection this action may call: its own calls and `uses`,
    /// and those of every action it runs, transitively. A delivery is held
    /// when the breaker of any of them is open.
    pub fn connections(&self) -> &BTreeSet<String> {
        &self.connections
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Subscriber {
    pub name: String,
    /// The event's name.
    pub on: String,
    pub run: Run,
    pub budget: Budget,
    /// The run's time limit.
    pub timeout: Duration,
    pub span: Span,
}

/// The run's time limit, for subscribers and schedules alike.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(15 * 60);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    Every(Duration),
    /// Checked with `croner`; five fields, or six with seconds first.
    Cron(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub name: String,
    pub trigger: Trigger,
    /// Arguments are literals: a schedule has no event.
    pub run: Run,
    pub timeout: Duration,
    pub span: Span,
}

/// The `alerts` block: operator alerts (a connection's outage, a failing
/// schedule, and their resolutions) are POSTed to `path` on `connection`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertRoute {
    /// A connection of the app.
    pub connection: String,
    /// Starts with `/`; sent as written, with no placeholders.
    pub path: String,
}
