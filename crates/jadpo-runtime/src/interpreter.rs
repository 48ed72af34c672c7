//! Runs an app's actions: `call` and `run` statements in order, the first
//! failure ending the run, and actions Rust code registered by name.
//!
//! An action may only call the connections it declares, itself or through
//! the actions it runs; calling another is a defect (`internal_fault`). Every
//! call through a real driver is written to the run's [`CallLog`](crate::run::CallLog) so the
//! breakers count it; a fake's or a recording's answer is not.

use crate::connection::broker::PublishRequest;
use crate::connection::{render_path, render_target, template_text, CallRequest, Connections, Response, StartupError};
use crate::run::{Executor, RunContext, RunKind};
use futures::future::BoxFuture;
use jadpo_core::{Failure, FailureKind};
use jadpo_lang::{ActionBody, App, Expr, Method, Run, Statement};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A Rust action: its arguments by parameter name, and a handle to call the
/// connections it `uses`.
pub type RustAction =
    Arc<dyn Fn(ActionArgs, ConnectionHandle) -> BoxFuture<'static, Result<(), Failure>> + Send + Sync>;

/// The arguments of a Rust action's run.
#[derive(Clone, Debug)]
pub struct ActionArgs {
    pub action: String,
    pub args: BTreeMap<String, Value>,
    pub ctx: RunContext,
}

/// Calls through the connections an action may use, counted for breakers.
///
/// Cloned for every action a run enters, so what it holds is shared, not
/// copied: the run's context and the action's connections.
#[derive(Clone)]
pub struct ConnectionHandle {
    connections: Arc<Connections>,
    allowed: Arc<BTreeSet<String>>,
    ctx: Arc<RunContext>,
    seq: Arc<std::sync::atomic::AtomicU32>,
}

impl ConnectionHandle {
    /// Sends one call; a 2xx answer is `Ok`, anything else the failure the
    /// outcome table gives it.
    pub async fn call(
        &self,
        connection: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        idempotency_key: Option<String>,
    ) -> Result<Response, Failure> {
        self.send(
            connection,
            method,
            path.to_owned(),
            path.to_owned(),
            body,
            idempotency_key,
        )
        .await
    }

    async fn send(
        &self,
        connection: &str,
        method: Method,
        path: String,
        path_template: String,
        body: Option<Value>,
        idempotency_key: Option<String>,
    ) -> Result<Response, Failure> {
        if !self.allowed.contains(connection) {
            return Err(Failure::new("action.connection_undeclared", FailureKind::InternalFault)
                .with_field("connection", connection));
        }
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let message_id = message_id(&self.ctx, n);
        let req = CallRequest {
            connection: connection.to_owned(),
            method,
            path,
            path_template,
            body,
            idempotency_key,
            message_id,
            // Receivers compare it with their wall clock: real time even
            // under `--time-scale`.
            trace: self.ctx.trace.clone(),
            spans: self.ctx.spans.clone(),
        };
        let counts = self.counts(connection);
        if counts {
            self.ctx.calls.started(connection);
        }
        let outcome = self.connections.call(req, self.ctx.deadline, rand::random()).await;
        if counts && outcome.status == Some(429) {
            let retry_after = outcome.result.as_ref().err().and_then(|f| f.retry_after);
            self.ctx.calls.rate_limited(connection, retry_after);
        }
        self.ended(connection, counts, outcome.sends, &outcome.result, outcome.verdict);
        outcome.result
    }

    /// Publishes one message through a broker connection the action may
    /// use; confirmed is `Ok`, anything else the failure
    /// `jadpo_core::publish::classify` gives it. Counted for the breaker as
    /// a call is.
    pub async fn publish(
        &self,
        connection: &str,
        target: &str,
        body: Option<Value>,
        headers: Vec<(String, String)>,
        idempotency_key: Option<String>,
    ) -> Result<(), Failure> {
        self.publish_as(
            connection,
            target.to_owned(),
            target.to_owned(),
            body,
            headers,
            idempotency_key,
        )
        .await
    }

    async fn publish_as(
        &self,
        connection: &str,
        target: String,
        target_template: String,
        body: Option<Value>,
        headers: Vec<(String, String)>,
        idempotency_key: Option<String>,
    ) -> Result<(), Failure> {
        if !self.allowed.contains(connection) {
            return Err(Failure::new("action.connection_undeclared", FailureKind::InternalFault)
                .with_field("connection", connection));
        }
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let req = PublishRequest {
            connection: connection.to_owned(),
            target,
            target_template,
            body,
            headers,
            idempotency_key,
            message_id: message_id(&self.ctx, n),
            trace: self.ctx.trace.clone(),
            spans: self.ctx.spans.clone(),
        };
        let counts = self.counts(connection);
        if counts {
            self.ctx.calls.started(connection);
        }
        let outcome = self.connections.publish(req, self.ctx.deadline, rand::random()).await;
        self.ended(connection, counts, outcome.sends, &outcome.result, outcome.verdict);
        outcome.result
    }

    /// Whether a send through `connection` counts for its breaker and
    /// limits: a delivery's, through a real driver.
    fn counts(&self, connection: &str) -> bool {
        matches!(self.ctx.kind, RunKind::Delivery { .. }) && !self.connections.is_double(connection)
    }

    /// Tells the run's call log how a send ended, for the breaker.
    fn ended<T>(
        &self,
        connection: &str,
        counts: bool,
        sends: u32,
        result: &Result<T, Failure>,
        verdict: Option<jadpo_core::CallVerdict>,
    ) {
        if !counts {
            self.ctx.calls.ended(connection, None);
            return;
        }
        // A send the run's limit cut short got no answer in the time it
        // had: for the breaker, the provider was unavailable.
        let cut = sends > 0 && matches!(result, Err(f) if f.kind == FailureKind::DeadlineExceeded);
        let verdict = if cut {
            Some(jadpo_core::CallVerdict::Unavailable)
        } else {
            verdict
        };
        self.ctx.calls.ended(connection, verdict);
    }
}

/// The executor of an app: its actions, with Rust actions registered by name.
pub struct AppExecutor {
    app: Arc<App>,
    connections: Arc<Connections>,
    rust: BTreeMap<String, RustAction>,
    /// `env("X")` and `secret("X")` used in action bodies, read at start.
    env: BTreeMap<String, String>,
    /// Each action's connections, built once rather than per run.
    allowed: BTreeMap<String, Arc<BTreeSet<String>>>,
}

impl AppExecutor {
    /// Reads every `env()` and `secret()` the actions use; a missing one is
    /// a start-up error, all reported at once.
    pub fn new(
        app: Arc<App>,
        connections: Arc<Connections>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<AppExecutor, Vec<StartupError>> {
        let mut names = BTreeSet::new();
        let bodies = app
            .actions
            .values()
            .filter_map(|a| match &a.body {
                ActionBody::Statements(stmts) => Some(stmts),
                ActionBody::Uses(_) => None,
            })
            .chain(app.capabilities.values().map(|c| &c.body));
        for s in bodies.flatten() {
            match s {
                Statement::Call(c) => {
                    c.body
                        .iter()
                        .chain(&c.idempotency_key)
                        .for_each(|e| env_names(e, &mut names));
                }
                Statement::Publish(p) => {
                    p.body
                        .iter()
                        .chain(&p.idempotency_key)
                        .chain(p.headers.iter().map(|(_, v)| v))
                        .for_each(|e| env_names(e, &mut names));
                }
                Statement::Run(r) => r.args.iter().for_each(|e| env_names(e, &mut names)),
                Statement::Emit(e) => e.fields.iter().for_each(|(_, v)| env_names(v, &mut names)),
            }
        }
        for r in app
            .subscribers
            .values()
            .map(|s| &s.run)
            .chain(app.schedules.values().map(|s| &s.run))
            .chain(app.routes.values().map(|r| &r.run))
        {
            r.args.iter().for_each(|e| env_names(e, &mut names));
        }
        let mut values = BTreeMap::new();
        let mut errors = Vec::new();
        for n in names {
            match env(&n) {
                Some(v) => {
                    values.insert(n, v);
                }
                None => errors.push(StartupError::ActionEnvMissing { variable: n }),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let allowed = app
            .actions
            .iter()
            .map(|(name, a)| (name.clone(), Arc::new(a.connections().clone())))
            .chain(
                app.capabilities
                    .iter()
                    .map(|(name, c)| (name.clone(), Arc::new(c.connections().clone()))),
            )
            .collect();
        Ok(AppExecutor {
            app,
            connections,
            rust: BTreeMap::new(),
            env: values,
            allowed,
        })
    }

    /// Supplies the body of an action declared with `uses` in the app.
    pub fn register(&mut self, action: &str, f: RustAction) -> Result<(), String> {
        match self.app.actions.get(action).map(|a| &a.body) {
            Some(ActionBody::Uses(_)) => {
                self.rust.insert(action.to_owned(), f);
                Ok(())
            }
            Some(ActionBody::Statements(_)) => Err(format!(
                "action `{action}` has a body in the app; only `uses` actions are supplied by Rust"
            )),
            None => Err(format!("the app declares no action `{action}`")),
        }
    }

    /// The `uses` actions some subscriber or schedule runs that no Rust code
    /// supplies: each would fail as a defect. Checked at start.
    pub fn unregistered(&self) -> Vec<String> {
        let mut missing = BTreeSet::new();
        let roots = self
            .app
            .subscribers
            .values()
            .map(|s| &s.run)
            .chain(self.app.schedules.values().map(|s| &s.run));
        let roots = roots.chain(self.app.routes.values().map(|r| &r.run));
        let mut stack: Vec<&str> = roots.map(|r| r.action.as_str()).collect();
        let mut seen = BTreeSet::new();
        while let Some(name) = stack.pop() {
            if !seen.insert(name) {
                continue;
            }
            let Some(runnable) = self.app.runnable(name) else {
                continue;
            };
            match runnable.statements() {
                None if !self.rust.contains_key(name) => {
                    missing.insert(name.to_owned());
                }
                None => {}
                Some(stmts) => {
                    for s in stmts {
                        if let Statement::Run(r) = s {
                            stack.push(&r.action);
                        }
                    }
                }
            }
        }
        missing.into_iter().collect()
    }

    fn allowed_for(&self, action: &str) -> Arc<BTreeSet<String>> {
        self.allowed.get(action).cloned().unwrap_or_default()
    }

    fn target(&self, ctx: &RunContext) -> Result<&Run, Failure> {
        let run = match ctx.kind {
            RunKind::Delivery { .. } => self.app.subscribers.get(&ctx.subscriber).map(|s| &s.run),
            RunKind::Schedule => self.app.schedules.get(&ctx.subscriber).map(|s| &s.run),
            RunKind::Route => self.app.routes.get(&ctx.subscriber).map(|r| &r.run),
        };
        run.ok_or_else(|| Failure::new("subscriber.unknown", FailureKind::InternalFault))
    }

    /// The arguments of `run`, by the parameter names of the action or
    /// capability it names.
    fn bind(
        &self,
        run: &Run,
        ctx: &RunContext,
        params: &BTreeMap<String, Value>,
    ) -> Result<BTreeMap<String, Value>, Failure> {
        let target = self
            .app
            .runnable(&run.action)
            .ok_or_else(|| Failure::new("action.unknown", FailureKind::InternalFault))?;
        // Inserted one by one: collecting a map sorts a buffer first, which
        // costs an action's few arguments several times over, every run.
        let mut args = BTreeMap::new();
        for (p, e) in target.params().iter().zip(&run.args) {
            args.insert(p.name.clone(), self.eval(e, ctx, params));
        }
        Ok(args)
    }

    /// `event` is the delivery's event, or a route's input (`input`), whose
    /// path parameters are `ctx.path`.
    fn eval(&self, e: &Expr, ctx: &RunContext, params: &BTreeMap<String, Value>) -> Value {
        let event = &ctx.payload;
        match e {
            Expr::String(s) => Value::String(s.clone()),
            Expr::Int(i) => Value::from(*i),
            Expr::Float(f) => Value::from(*f),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::Object(fields) => {
                // One by one, as `bind`'s arguments are.
                let mut object = serde_json::Map::new();
                for (k, v) in fields {
                    object.insert(k.clone(), self.eval(v, ctx, params));
                }
                Value::Object(object)
            }
            Expr::List(items) => Value::Array(items.iter().map(|v| self.eval(v, ctx, params)).collect()),
            Expr::Event | Expr::Input => event.clone(),
            Expr::EventField(path) | Expr::InputField(path) => {
                path.iter().fold(event, |v, k| v.get(k).unwrap_or(&Value::Null)).clone()
            }
            Expr::PathParam(p) => ctx.path.get(p).map_or(Value::Null, |s| Value::String(s.clone())),
            Expr::Param(p) => params.get(p).cloned().unwrap_or(Value::Null),
            Expr::Env(n) | Expr::Secret(n) => Value::String(self.env.get(n).cloned().unwrap_or_default()),
        }
    }

    fn exec<'a>(
        &'a self,
        action: &'a str,
        args: BTreeMap<String, Value>,
        ctx: &'a RunContext,
        handle: &'a ConnectionHandle,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let target = self
                .app
                .runnable(action)
                .ok_or_else(|| Failure::new("action.unknown", FailureKind::InternalFault))?;
            match target.statements() {
                None => {
                    let f = self
                        .rust
                        .get(action)
                        .ok_or_else(|| Failure::new("action.unregistered", FailureKind::InternalFault))?;
                    let scoped = ConnectionHandle {
                        allowed: self.allowed_for(action),
                        ..handle.clone()
                    };
                    f(
                        ActionArgs {
                            action: action.to_owned(),
                            args,
                            ctx: ctx.clone(),
                        },
                        scoped,
                    )
                    .await
                }
                Some(stmts) => {
                    for s in stmts {
                        match s {
                            Statement::Call(c) => {
                                let path = render_path(&c.path, |p| args.get(p).map(text))?;
                                let body = c.body.as_ref().map(|e| self.eval(e, ctx, &args));
                                let key = c.idempotency_key.as_ref().map(|e| text(&self.eval(e, ctx, &args)));
                                handle
                                    .send(&c.connection, c.method, path, template_text(&c.path), body, key)
                                    .await?;
                            }
                            Statement::Publish(p) => {
                                let target = render_target(&p.target, |n| args.get(n).map(text))?;
                                let body = p.body.as_ref().map(|e| self.eval(e, ctx, &args));
                                let headers = p
                                    .headers
                                    .iter()
                                    .map(|(name, e)| (name.clone(), text(&self.eval(e, ctx, &args))))
                                    .collect();
                                let key = p.idempotency_key.as_ref().map(|e| text(&self.eval(e, ctx, &args)));
                                handle
                                    .publish_as(&p.connection, target, template_text(&p.target), body, headers, key)
                                    .await?;
                            }
                            Statement::Run(r) => {
                                let inner = self.bind(r, ctx, &args)?;
                                self.exec(&r.action, inner, ctx, handle).await?;
                            }
                            Statement::Emit(e) => {
                                let payload = e
                                    .fields
                                    .iter()
                                    .map(|(k, v)| (k.clone(), self.eval(v, ctx, &args)))
                                    .collect();
                                ctx.emits.push(&e.event, Value::Object(payload), ctx.depth)?;
                            }
                        }
                    }
                    Ok(())
                }
            }
        })
    }
}

/// A value as it goes into a path or a header: strings as they are, the
/// rest as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn env_names(e: &Expr, out: &mut BTreeSet<String>) {
    match e {
        Expr::Env(n) | Expr::Secret(n) => {
            out.insert(n.clone());
        }
        Expr::Object(fields) => fields.iter().for_each(|(_, v)| env_names(v, out)),
        Expr::List(items) => items.iter().for_each(|v| env_names(v, out)),
        _ => {}
    }
}

impl Executor for AppExecutor {
    async fn run(&self, ctx: RunContext) -> Result<(), Failure> {
        let run = self.target(&ctx)?;
        let args = self.bind(run, &ctx, &BTreeMap::new())?;
        let ctx = Arc::new(ctx);
        let handle = ConnectionHandle {
            connections: self.connections.clone(),
            allowed: self.allowed_for(&run.action),
            ctx: ctx.clone(),
            seq: Arc::default(),
        };
        self.exec(&run.action, args, &ctx, &handle).await
    }
}

/// A call's `webhook-id`. The same on every resend and every attempt of a
/// delivery's `n`-th call, so a receiver can drop duplicates, and different
/// for every other call everywhere: the event's public id is unique across
/// stores, its delivery's id within the store. A schedule's run has no
/// event: its name and start time, then the call.
pub(crate) fn message_id(ctx: &RunContext, n: u32) -> String {
    use std::fmt::Write;
    // Written in place, a piece at a time: it is made for every call of
    // every run, and formatting machinery cost more than the rest of it.
    let mut id = String::with_capacity(64);
    let mut numbers = itoa::Buffer::new();
    match ctx.kind {
        RunKind::Delivery { id: delivery, .. } => {
            id.push_str("msg_");
            push_without_dashes(&mut id, &ctx.event_public_id);
            id.push('_');
            id.push_str(numbers.format(delivery.0));
            id.push('_');
            id.push_str(numbers.format(n));
        }
        RunKind::Schedule => {
            let _ = write!(id, "msg_{}_{}_{n}", ctx.subscriber, ctx.started_at.as_millis());
        }
        // A route's request is its caller's to repeat: each run is new.
        RunKind::Route => {
            let _ = write!(id, "msg_route_{}_", ctx.subscriber);
            push_without_dashes(&mut id, &ctx.event_public_id);
            let _ = write!(id, "_{n}");
        }
    }
    id
}

/// `text` without its dashes: a UUID's hex digits.
fn push_without_dashes(out: &mut String, text: &str) {
    // By bytes: a split's search cost more than the copies between dashes.
    let mut piece = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'-' {
            out.push_str(&text[piece..i]);
            piece = i + 1;
        }
    }
    out.push_str(&text[piece..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::CallLog;
    use jadpo_core::{DeliveryId, Timestamp};

    fn ctx(event: &str, delivery: i64, attempt: u32) -> RunContext {
        RunContext {
            kind: RunKind::Delivery {
                id: DeliveryId(delivery),
                attempt,
            },
            subscriber: "s".into(),
            event_name: "E".into(),
            event_public_id: event.into(),
            payload: Value::Null,
            started_at: Timestamp::from_millis(attempt as i64 * 1_000),
            deadline: tokio::time::Instant::now(),
            calls: CallLog::default(),
            path: Default::default(),
            depth: 0,
            emits: Default::default(),
            trace: None,
            spans: Default::default(),
        }
    }

    const EVENT: &str = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
    const OTHER_STORE_EVENT: &str = "0193a1b2-c3d4-7e5f-8a9b-ffffffffffff";

    #[test]
    fn a_calls_id_is_stable_across_attempts_and_unique_otherwise() {
        let first = message_id(&ctx(EVENT, 1, 1), 0);
        assert_eq!(first, "msg_0193a1b2c3d47e5f8a9b0c1d2e3f4a5b_1_0");
        // The next attempt of the same delivery: the same id for its call.
        assert_eq!(message_id(&ctx(EVENT, 1, 2), 0), first);
        let others = [
            message_id(&ctx(EVENT, 1, 1), 1),             // its next call
            message_id(&ctx(EVENT, 2, 1), 0),             // another subscriber's delivery
            message_id(&ctx(OTHER_STORE_EVENT, 1, 1), 0), // delivery 1 of another store
        ];
        let mut all: BTreeSet<&str> = others.iter().map(String::as_str).collect();
        all.insert(&first);
        assert_eq!(all.len(), 4, "{all:?}");
    }
}
