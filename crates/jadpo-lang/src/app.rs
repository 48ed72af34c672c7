//! The checked app: plain data for the runtime, the store and the CLI.
//! Everything here has passed every check, so consumers can rely on it:
//! names resolve, arguments match parameters, budgets are in range.

use crate::diagnostic::Span;
use jadpo_core::limit::{Limits, Rate};
use jadpo_core::publish::Broker;
use jadpo_core::Budget;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod route;
pub use route::{Route, RoutePath, RouteSegment};

#[derive(Clone, Debug, PartialEq)]
pub struct App {
    pub events: BTreeMap<String, Event>,
    pub connections: BTreeMap<String, Connection>,
    pub actions: BTreeMap<String, Action>,
    /// `capability NAME(PARAMS)`, each with the connection that fills it.
    /// Capabilities and actions share one namespace.
    pub capabilities: BTreeMap<String, Capability>,
    pub subscribers: BTreeMap<String, Subscriber>,
    pub schedules: BTreeMap<String, Schedule>,
    /// HTTP endpoints that run an action or capability on request.
    pub routes: BTreeMap<String, Route>,
    /// `store NAME { url: ... }`, in declaration order: the first is the
    /// default. Empty when the file declares none: every event then lives
    /// in the store given on the command line.
    pub stores: Vec<StoreDecl>,
    /// Where operator alerts are sent; `None` keeps them in the store only.
    pub alerts: Option<AlertRoute>,
}

impl App {
    /// The subscribers of an event, by name.
    pub fn subscribers_of<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Subscriber> {
        self.subscribers.values().filter(move |s| s.on == event)
    }

    /// What a [`Run`] names: `Run::action` is an action's or a
    /// capability's name (they share one namespace), and this finds either,
    /// with the parameters its arguments bind to and the statements to run.
    /// `None` for a name the app does not declare.
    pub fn runnable(&self, name: &str) -> Option<Runnable<'_>> {
        if let Some(a) = self.actions.get(name) {
            return Some(Runnable::Action(a));
        }
        self.capabilities.get(name).map(Runnable::Capability)
    }

    /// The name of the store an event lives in: its `in STORE`, else the
    /// first store declared, else `None` (no `store` blocks: the store
    /// given on the command line). `None` too for an undeclared event.
    pub fn store_of(&self, event: &str) -> Option<&str> {
        let event = self.events.get(event)?;
        event
            .store
            .as_deref()
            .or_else(|| self.stores.first().map(|s| s.name.as_str()))
    }

    /// The route that answers `method` on `path`, and its path parameters,
    /// percent-decoded. When several match, the most specific wins: at the
    /// first segment where they differ, a literal beats a `{param}`. (Two
    /// routes of one method and one path shape are refused by the checker,
    /// so the answer is unique.)
    pub fn route_for(&self, method: Method, path: &str) -> Option<(&Route, BTreeMap<String, String>)> {
        self.routes
            .values()
            .filter(|r| r.method == method)
            .filter_map(|r| r.path.matches(path).map(|params| (r, params)))
            .min_by(|(a, _), (b, _)| a.path.specificity().cmp(&b.path.specificity()))
    }

    /// "2 events, 2 connections, 3 actions, 3 subscribers, 1 schedule",
    /// followed by the capabilities, routes and stores when there are any.
    pub fn summary(&self) -> String {
        let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let mut parts = vec![
            count(self.events.len(), "event"),
            count(self.connections.len(), "connection"),
            count(self.actions.len(), "action"),
            count(self.subscribers.len(), "subscriber"),
            count(self.schedules.len(), "schedule"),
        ];
        if !self.capabilities.is_empty() {
            let n = self.capabilities.len();
            parts.push(format!("{n} {}", if n == 1 { "capability" } else { "capabilities" }));
        }
        if !self.routes.is_empty() {
            parts.push(count(self.routes.len(), "route"));
        }
        if !self.stores.is_empty() {
            parts.push(count(self.stores.len(), "store"));
        }
        parts.join(", ")
    }
}

/// `store NAME { url: ... }`: a store events may live in.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreDecl {
    pub name: String,
    /// `sqlite:PATH`, `postgres://...` or `env("X")`, read at start.
    pub url: Value,
    pub span: Span,
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
    /// `event NAME in STORE`: the store it lives in. `None` without `in`:
    /// the first store, or the command line's when there are no `store`
    /// blocks ([`App::store_of`]).
    pub store: Option<String>,
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

/// What a connection talks to (`driver:`), with the settings only that
/// driver takes (docs/app-file.md, "Connections to a broker").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Driver {
    /// HTTP calls under a base URL: `call NAME.post("/path", ...)`.
    Http,
    /// RabbitMQ (AMQP 0-9-1): publishes to `exchange:` (the default
    /// exchange, `""`, when absent) with the publish's target as the
    /// routing key.
    Amqp { exchange: String },
    /// NATS JetStream: the target is the subject.
    Nats,
    /// A Redis stream: the target is the stream's key; `max_len:` trims it
    /// to about that many entries (`XADD ... MAXLEN ~`).
    Redis { max_len: Option<u64> },
    /// An MQTT broker: the target is the topic.
    Mqtt,
}

impl Driver {
    /// The broker it publishes to; `None` for HTTP.
    pub fn broker(&self) -> Option<Broker> {
        match self {
            Driver::Http => None,
            Driver::Amqp { .. } => Some(Broker::Amqp),
            Driver::Nats => Some(Broker::Nats),
            Driver::Redis { .. } => Some(Broker::Redis),
            Driver::Mqtt => Some(Broker::Mqtt),
        }
    }

    /// Its name in the app file.
    pub fn name(&self) -> &'static str {
        self.broker().map_or("http", Broker::name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    pub name: String,
    pub driver: Driver,
    /// Where it connects: an HTTP connection's `base_url:`, a broker
    /// connection's `url:`.
    pub url: Value,
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
    /// `path.NAME` in a route's `run:`: a path parameter, a string.
    PathParam(String),
    /// `input` in a route's `run:`: the whole request body.
    Input,
    /// `input.a.b` in a route's `run:`: a field of the request body, and
    /// fields inside an object field.
    InputField(Vec<String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
            Method::Put => "put",
            Method::Patch => "patch",
            Method::Delete => "delete",
            Method::Head => "head",
        }
    }

    /// Repeating the call has the same effect as sending it once, so a
    /// timeout after sending is `unavailable`, not `outcome_unknown`
    /// (docs/app-file.md, `action`).
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Method::Post | Method::Patch)
    }
}

/// `/payments/{payment_id}/record`, split at its placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    /// Private, as `text` is made from them once: read with `parts()`.
    parts: Vec<PathPart>,
    /// As written: what logs show, for every call, so made once.
    text: String,
}

impl PathTemplate {
    pub fn new(parts: Vec<PathPart>) -> PathTemplate {
        let mut text = String::new();
        for part in &parts {
            match part {
                PathPart::Literal(s) => text.push_str(s),
                PathPart::Param(p) => {
                    text.push('{');
                    text.push_str(p);
                    text.push('}');
                }
            }
        }
        PathTemplate { parts, text }
    }

    /// Its literals and parameters, in order.
    pub fn parts(&self) -> &[PathPart] {
        &self.parts
    }

    /// The template as written: `/payments/{payment_id}/record`.
    pub fn text(&self) -> &str {
        &self.text
    }
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

/// Runs an action or a capability with arguments, one per parameter, in
/// parameter order. [`App::runnable`] finds what `action` names.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub action: String,
    pub args: Vec<Expr>,
    pub span: Span,
}

/// `emit EVENT(FIELD: VALUE, ...)`: a new event, written only when the run
/// succeeds, in the run's transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct Emit {
    /// The event's name.
    pub event: String,
    /// Every field of the event, once, in the event's field order.
    pub fields: Vec<(String, Expr)>,
    pub span: Span,
}

/// `call NAME.publish("target", body:, headers:, idempotency_key:)` on a
/// broker connection: one message, confirmed by the broker.
#[derive(Clone, Debug, PartialEq)]
pub struct Publish {
    pub connection: String,
    /// The routing key, subject, stream key or topic, split at its
    /// placeholders like a call's path; each parameter's value must be
    /// one whole word of it (no separators, no wildcards).
    pub target: PathTemplate,
    pub body: Option<Expr>,
    /// Message headers (AMQP headers, NATS headers, MQTT 5 user
    /// properties, Redis stream fields), after the connection's own.
    pub headers: Vec<(String, Expr)>,
    /// Sent as the message's idempotency key (`Nats-Msg-Id` on NATS) so
    /// that a resend after a lost confirmation is dropped.
    pub idempotency_key: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Call(Call),
    Publish(Publish),
    Run(Run),
    Emit(Emit),
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
    pub(crate) emits: BTreeSet<String>,
    pub span: Span,
}

impl Action {
    /// Every connection this action may call: its own calls and `uses`,
    /// and those of every action it runs and the filler of every
    /// capability it runs, transitively. A delivery is held when the
    /// breaker of any of them is open.
    pub fn connections(&self) -> &BTreeSet<String> {
        &self.connections
    }

    /// Every event this action may emit: its own `emit`s and those of
    /// every action and capability it runs, transitively.
    pub fn emits(&self) -> &BTreeSet<String> {
        &self.emits
    }
}

/// `capability NAME(PARAMS)`, with the `fills NAME { ... }` of the one
/// connection that supplies it.
#[derive(Clone, Debug, PartialEq)]
pub struct Capability {
    pub name: String,
    pub params: Vec<Field>,
    /// The connection whose `fills` supplies the body.
    pub filler: String,
    /// The `fills` body: calls only to `filler`.
    pub body: Vec<Statement>,
    pub(crate) connections: BTreeSet<String>,
    pub(crate) emits: BTreeSet<String>,
    pub span: Span,
}

impl Capability {
    /// Its filler and the connections of whatever its body runs,
    /// transitively: always just the filler, since a `fills` body that
    /// could reach another connection is refused
    /// (`capability.call_outside`).
    pub fn connections(&self) -> &BTreeSet<String> {
        &self.connections
    }

    /// Every event its body may emit, transitively.
    pub fn emits(&self) -> &BTreeSet<String> {
        &self.emits
    }
}

/// What a [`Run`] names: an action or a capability ([`App::runnable`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Runnable<'a> {
    Action(&'a Action),
    Capability(&'a Capability),
}

impl<'a> Runnable<'a> {
    pub fn name(&self) -> &'a str {
        match self {
            Runnable::Action(a) => &a.name,
            Runnable::Capability(c) => &c.name,
        }
    }

    /// The parameters a [`Run`]'s arguments bind to, in order.
    pub fn params(&self) -> &'a [Field] {
        match self {
            Runnable::Action(a) => &a.params,
            Runnable::Capability(c) => &c.params,
        }
    }

    /// The statements to run: an action's body or a capability's `fills`
    /// body. `None` for an action with `uses`, which Rust code supplies.
    pub fn statements(&self) -> Option<&'a [Statement]> {
        match self {
            Runnable::Action(a) => match &a.body {
                ActionBody::Statements(s) => Some(s),
                ActionBody::Uses(_) => None,
            },
            Runnable::Capability(c) => Some(&c.body),
        }
    }

    pub fn connections(&self) -> &'a BTreeSet<String> {
        match self {
            Runnable::Action(a) => a.connections(),
            Runnable::Capability(c) => c.connections(),
        }
    }

    pub fn emits(&self) -> &'a BTreeSet<String> {
        match self {
            Runnable::Action(a) => a.emits(),
            Runnable::Capability(c) => c.emits(),
        }
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
    /// `key: event.FIELD`: the event's field whose value each delivery
    /// keeps as its key, to be found by (`jadpo deliveries --key`); the
    /// path of field names after `event`.
    pub key: Option<Vec<String>>,
    /// `order: fifo | strict` or `concurrency_per_key: N`: what the
    /// deliveries sharing a key wait for (`jadpo_core::key_rule`). Only
    /// with `key:`.
    pub key_rule: Option<jadpo_core::key_rule::KeyRule>,
    pub span: Span,
}

/// The run's time limit, for subscribers and schedules alike.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A schedule's `every:` or `cron:`, as the core evaluates it.
pub use jadpo_core::schedule::Trigger;

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
