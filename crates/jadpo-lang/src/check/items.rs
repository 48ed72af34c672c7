//! One checker per block kind.

use super::exprs::{EventUse, Scope};
use super::graph::Edges;
use super::values::{describe, path_text};
use super::{hint, Checker};
use crate::app::{
    Action, ActionBody, Call, Connection, Driver, Event, Field, Method, Run, Schedule, Statement,
    Subscriber, Trigger, Type, DEFAULT_TIMEOUT,
};
use crate::diagnostic::Code;
use crate::syntax::{Arg, Entry, Expr, ExprKind, Ident, Item, Param, Stmt, StmtKind};
use jadpo_core::Budget;
use std::collections::BTreeSet;

/// A subscriber's or schedule's `run:`, for the checks through actions.
pub(crate) struct Link {
    /// `None` for a schedule.
    pub event: Option<String>,
    pub action: String,
    pub span: crate::diagnostic::Span,
}

pub(crate) struct ActionNode {
    pub action: Option<Action>,
    pub edges: Edges,
}

impl Checker<'_> {
    /// The event and whether any field failed to check.
    pub fn event(&mut self, item: &Item, entries: &[Entry]) -> (Event, bool) {
        let mut fields: Vec<Field> = Vec::new();
        let mut lax = false;
        for entry in entries {
            if let Some(first) = fields.iter().find(|f| f.name == entry.key.name) {
                let line = self.line_of(first.span);
                self.err(
                    Code::NameDuplicate,
                    entry.key.span,
                    format!(
                        "field `{}` is already declared on line {line}; rename or remove one of them",
                        entry.key.name
                    ),
                );
                continue;
            }
            let ty = match &entry.value.kind {
                ExprKind::Path(p) if p.len() == 1 => self.type_name(&p[0]),
                _ => {
                    self.err(
                        Code::TypeUnknown,
                        entry.value.span,
                        format!(
                            "expected a field type: string, int, float, bool, object or list; found {}",
                            describe(&entry.value)
                        ),
                    );
                    None
                }
            };
            match ty {
                Some(ty) => fields.push(Field {
                    name: entry.key.name.clone(),
                    ty,
                    span: entry.key.span,
                }),
                None => lax = true,
            }
        }
        let event = Event {
            name: item.name.name.clone(),
            fields,
            span: item.span,
        };
        (event, lax)
    }

    fn type_name(&mut self, ident: &Ident) -> Option<Type> {
        let ty = Type::from_name(&ident.name);
        if ty.is_none() {
            let names = ["string", "int", "float", "bool", "object", "list"];
            let help = hint(&ident.name, names.into_iter(), || {
                "the types are string, int, float, bool, object and list".to_string()
            });
            self.err(
                Code::TypeUnknown,
                ident.span,
                format!("`{}` is not a type; {help}", ident.name),
            );
        }
        ty
    }

    pub fn params(&mut self, params: &[Param]) -> (Vec<Field>, bool) {
        let mut fields: Vec<Field> = Vec::new();
        let mut lax = false;
        for p in params {
            if fields.iter().any(|f| f.name == p.name.name) {
                self.err(
                    Code::NameDuplicate,
                    p.name.span,
                    format!(
                        "parameter `{}` is declared twice; rename or remove one",
                        p.name.name
                    ),
                );
                lax = true;
                continue;
            }
            match self.type_name(&p.ty) {
                Some(ty) => fields.push(Field {
                    name: p.name.name.clone(),
                    ty,
                    span: p.name.span,
                }),
                None => lax = true,
            }
        }
        (fields, lax)
    }

    pub fn connection(&mut self, item: &Item, entries: &[Entry]) -> Option<Connection> {
        let what = format!("connection `{}`", item.name.name);
        let allowed = [
            "driver",
            "base_url",
            "headers",
            "timeout",
            "retry",
            "signing_secret",
        ];
        let keys = self.keyed(
            &what,
            entries,
            &allowed,
            Code::KeyUnknown,
            Code::NameDuplicate,
        );
        let mut ok = keys.len() == entries.len();

        let driver = match keys.get("driver") {
            None => Some(Driver::Http),
            Some(e) => match &e.value.kind {
                ExprKind::Path(p) if path_text(p) == "http" => Some(Driver::Http),
                ExprKind::Str(s) if s == "http" => Some(Driver::Http),
                _ => {
                    self.err(
                        Code::ValueInvalid,
                        e.value.span,
                        format!(
                            "`driver:` takes `http`, the only driver; found {}",
                            describe(&e.value)
                        ),
                    );
                    None
                }
            },
        };
        let base_url = match keys.get("base_url") {
            Some(e) => {
                let v = self.setting(&e.value, "`base_url:`", true);
                if let Some(crate::app::Value::String(url)) = &v {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        self.err(
                            Code::ValueInvalid,
                            e.value.span,
                            format!("`base_url:` starts with http:// or https://, not {url:?}"),
                        );
                        ok = false;
                    }
                }
                v
            }
            None => {
                self.missing(item, &what, "base_url", "env(\"PAYMENTS_URL\")");
                None
            }
        };
        let mut headers = std::collections::BTreeMap::new();
        if let Some(e) = keys.get("headers") {
            match &e.value.kind {
                ExprKind::Object(hs) => {
                    let mut seen: BTreeSet<String> = BTreeSet::new();
                    for h in hs {
                        if !seen.insert(h.key.name.to_ascii_lowercase()) {
                            self.err(
                                Code::NameDuplicate,
                                h.key.span,
                                format!(
                                    "header `{}` is given twice (header names ignore case); keep one",
                                    h.key.name
                                ),
                            );
                            ok = false;
                            continue;
                        }
                        let what = format!("header `{}`", h.key.name);
                        match self.setting(&h.value, &what, true) {
                            Some(v) => {
                                headers.insert(h.key.name.clone(), v);
                            }
                            None => ok = false,
                        }
                    }
                }
                _ => {
                    self.err(
                        Code::ValueInvalid,
                        e.value.span,
                        format!(
                            "`headers:` takes an object such as `{{ \"Authorization\": secret(\"TOKEN\") }}`; found {}",
                            describe(&e.value)
                        ),
                    );
                    ok = false;
                }
            }
        }
        let timeout = match keys.get("timeout") {
            Some(e) => self.time_limit(
                &e.value,
                "a connection's `timeout:`",
                Connection::MAX_TIMEOUT,
            ),
            None => Some(Connection::DEFAULT_TIMEOUT),
        };
        let attempts = match keys.get("retry") {
            Some(e) => self.connection_attempts(&e.value),
            None => Some(1),
        };
        let signing_secret = match keys.get("signing_secret") {
            Some(e) => self.setting(&e.value, "`signing_secret:`", false).map(Some),
            None => Some(None),
        };
        if !ok || item.broken {
            return None;
        }
        Some(Connection {
            name: item.name.name.clone(),
            driver: driver?,
            base_url: base_url?,
            headers,
            timeout: timeout?,
            attempts: attempts?,
            signing_secret: signing_secret?,
            span: item.span,
        })
    }

    pub fn action(
        &mut self,
        item: &Item,
        uses: Option<&[Ident]>,
        body: Option<&[Stmt]>,
    ) -> ActionNode {
        let name = item.name.name.as_str();
        let params = self
            .sigs
            .get(name)
            .map(|s| s.params.clone())
            .unwrap_or_default();
        let mut edges = Edges::default();
        let mut ok = !item.broken;
        let body = match (uses, body) {
            (_, Some(stmts)) => {
                let mut out = Vec::new();
                let mut event_uses = Vec::new();
                for stmt in stmts {
                    let scope = Scope::Action {
                        name,
                        params: &params,
                    };
                    match self.statement(stmt, &scope, &mut edges, &mut event_uses) {
                        Some(s) => out.push(s),
                        None => ok = false,
                    }
                }
                edges.uses = event_uses;
                ActionBody::Statements(out)
            }
            (uses, None) => {
                let mut out = Vec::new();
                for conn in uses.unwrap_or_default() {
                    if self.known_connection(conn) {
                        edges.conns.insert(conn.name.clone());
                        out.push(conn.name.clone());
                    } else {
                        ok = false;
                    }
                }
                ActionBody::Uses(out)
            }
        };
        let action = ok.then(|| Action {
            name: name.to_string(),
            params,
            body,
            connections: BTreeSet::new(),
            span: item.span,
        });
        ActionNode { action, edges }
    }

    fn known_connection(&mut self, conn: &Ident) -> bool {
        if self.connection_names.contains(&conn.name) {
            return true;
        }
        let help = hint(
            &conn.name,
            self.connection_names.iter().map(String::as_str),
            || {
                format!(
                    "declare it with `connection {} {{ base_url: ... }}`",
                    conn.name
                )
            },
        );
        self.err(
            Code::ActionConnectionUnknown,
            conn.span,
            format!("no connection is named `{}`; {help}", conn.name),
        );
        false
    }

    fn statement(
        &mut self,
        stmt: &Stmt,
        scope: &Scope<'_>,
        edges: &mut Edges,
        uses: &mut Vec<EventUse>,
    ) -> Option<Statement> {
        match stmt.kind {
            StmtKind::Run => {
                let target = &stmt.callee[0];
                if !self.known_action(target, Code::ActionRunUnknown) {
                    return None;
                }
                edges.runs.push((target.name.clone(), target.span));
                let args = self.bind(&target.name, &stmt.args, stmt.span, scope, uses)?;
                Some(Statement::Run(Run {
                    action: target.name.clone(),
                    args,
                    span: stmt.span,
                }))
            }
            StmtKind::Call => {
                let (conn, method_name) = (&stmt.callee[0], &stmt.callee[1]);
                let known = self.known_connection(conn);
                if known {
                    edges.conns.insert(conn.name.clone());
                }
                let method = Method::from_name(&method_name.name);
                if method.is_none() {
                    let help = hint(&method_name.name, Method::NAMES.into_iter(), || {
                        format!("the methods are {}", Method::NAMES.join(", "))
                    });
                    self.err(
                        Code::CallMethodUnknown,
                        method_name.span,
                        format!("`{}` is not an HTTP method; {help}", method_name.name),
                    );
                }
                let call = self.call_args(stmt, scope, uses);
                let (path, body, idempotency_key) = call?;
                if !known {
                    return None;
                }
                Some(Statement::Call(Call {
                    connection: conn.name.clone(),
                    method: method?,
                    path,
                    body,
                    idempotency_key,
                    span: stmt.span,
                }))
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn call_args(
        &mut self,
        stmt: &Stmt,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<(
        crate::app::PathTemplate,
        Option<crate::app::Expr>,
        Option<crate::app::Expr>,
    )> {
        const CODE: Code = Code::CallArgumentsInvalid;
        let Scope::Action { name, params } = scope else {
            return None;
        };
        let mut positional = stmt.args.iter().filter(|a| a.name.is_none());
        let Some(path_arg) = positional.next() else {
            self.err(
                CODE,
                stmt.span,
                "a call needs its path first, as in `call payments.post(\"/payments/{payment_id}\", body: event)`"
                    .to_string(),
            );
            return None;
        };
        let mut ok = true;
        for extra in positional {
            self.err(
                CODE,
                extra.value.span,
                "a call takes its path, then `body:` and `idempotency_key:` by name; name this argument or remove it"
                    .to_string(),
            );
            ok = false;
        }
        let path = self.path_template(&path_arg.value, name, params);
        let mut body = None;
        let mut key = None;
        for arg in stmt.args.iter().filter(|a| a.name.is_some()) {
            let n = arg
                .name
                .as_ref()
                .map(|n| n.name.as_str())
                .unwrap_or_default();
            let slot = match n {
                "body" => &mut body,
                "idempotency_key" => &mut key,
                other => {
                    let span = arg.name.as_ref().map_or(arg.value.span, |n| n.span);
                    self.err(
                        CODE,
                        span,
                        format!("a call has no argument `{other}:`; it takes `body:` and `idempotency_key:`"),
                    );
                    ok = false;
                    continue;
                }
            };
            if slot.is_some() {
                self.err(
                    CODE,
                    arg.value.span,
                    format!("`{n}:` is given twice; keep one"),
                );
                ok = false;
                continue;
            }
            match self.value(&arg.value, scope, uses) {
                Some((v, _)) => *slot = Some(v),
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        Some((path?, body, key))
    }

    fn known_action(&mut self, target: &Ident, code: Code) -> bool {
        if self.sigs.contains_key(&target.name) {
            return true;
        }
        let help = hint(&target.name, self.sigs.keys().map(String::as_str), || {
            format!("declare it with `action {}(...) {{ ... }}`", target.name)
        });
        self.err(
            code,
            target.span,
            format!("no action is named `{}`; {help}", target.name),
        );
        false
    }

    /// `run: action(args)`, or a bare `run: action` with no arguments.
    fn run(&mut self, e: &Expr, code: Code, scope: &Scope<'_>) -> Option<Run> {
        let empty: Vec<Arg> = Vec::new();
        let (callee, args) = match &e.kind {
            ExprKind::Call { callee, args } if callee.len() == 1 => (&callee[0], args),
            ExprKind::Path(p) if p.len() == 1 => (&p[0], &empty),
            _ => {
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!(
                        "`run:` takes an action and its arguments, as in `run: record_payment(event.payment_id)`; found {}",
                        describe(e)
                    ),
                );
                return None;
            }
        };
        if !self.known_action(callee, code) {
            return None;
        }
        let mut uses = Vec::new();
        let args = self.bind(&callee.name, args, e.span, scope, &mut uses)?;
        Some(Run {
            action: callee.name.clone(),
            args,
            span: e.span,
        })
    }

    /// The subscriber, and the event and action it links even when it has
    /// errors, so event fields used inside the action are still checked.
    pub fn subscriber(
        &mut self,
        item: &Item,
        entries: &[Entry],
    ) -> (Option<Subscriber>, Option<Link>) {
        let what = format!("subscriber `{}`", item.name.name);
        let allowed = ["on", "run", "retry", "timeout"];
        let keys = self.keyed(
            &what,
            entries,
            &allowed,
            Code::KeyUnknown,
            Code::NameDuplicate,
        );
        let ok = keys.len() == entries.len();
        let mut event_known = false;
        let on = match keys.get("on") {
            Some(e) => {
                match &e.value.kind {
                    ExprKind::Path(p) if p.len() == 1 => {
                        let name = &p[0];
                        event_known = self.events.contains_key(&name.name);
                        if !event_known {
                            let help =
                                hint(&name.name, self.events.keys().map(String::as_str), || {
                                    format!("declare it with `event {} {{ ... }}`", name.name)
                                });
                            self.err(
                                Code::SubscriberEventUnknown,
                                name.span,
                                format!("no event is named `{}`; {help}", name.name),
                            );
                        }
                        Some(name.name.clone())
                    }
                    _ => {
                        self.err(
                        Code::ValueInvalid,
                        e.value.span,
                        format!("`on:` takes an event's name, as in `on: PaymentReceived`; found {}", describe(&e.value)),
                    );
                        None
                    }
                }
            }
            None => {
                self.missing(item, &what, "on", "PaymentReceived");
                None
            }
        };
        let run = match keys.get("run") {
            Some(e) => {
                let event = on.as_deref().filter(|_| event_known);
                let scope = Scope::Subscriber { event };
                self.run(&e.value, Code::SubscriberActionUnknown, &scope)
            }
            None => {
                self.missing(item, &what, "run", "record_payment(event.payment_id)");
                None
            }
        };
        let budget = match keys.get("retry") {
            Some(e) => self.budget(&e.value),
            None => Some(Budget::DEFAULT),
        };
        let timeout = match keys.get("timeout") {
            Some(e) => self.run_timeout(&e.value),
            None => Some(DEFAULT_TIMEOUT),
        };
        let link = match (&on, keys.get("run").and_then(|e| self.run_target(&e.value))) {
            (Some(event), Some((action, span))) if event_known => Some(Link {
                event: Some(event.clone()),
                action,
                span,
            }),
            _ => None,
        };
        if !ok || item.broken || !event_known {
            return (None, link);
        }
        let sub = (|| {
            Some(Subscriber {
                name: item.name.name.clone(),
                on: on?,
                run: run?,
                budget: budget?,
                timeout: timeout?,
                span: item.span,
            })
        })();
        (sub, link)
    }

    /// The action a `run:` names, when it is declared.
    fn run_target(&self, e: &Expr) -> Option<(String, crate::diagnostic::Span)> {
        let name = match &e.kind {
            ExprKind::Call { callee, .. } if callee.len() == 1 => &callee[0],
            ExprKind::Path(p) if p.len() == 1 => &p[0],
            _ => return None,
        };
        self.sigs
            .contains_key(&name.name)
            .then(|| (name.name.clone(), e.span))
    }

    pub fn schedule(&mut self, item: &Item, entries: &[Entry]) -> (Option<Schedule>, Option<Link>) {
        let what = format!("schedule `{}`", item.name.name);
        let mut ok = true;
        for entry in entries.iter().filter(|e| e.key.name == "retry") {
            self.err(
                Code::ScheduleRetryNotAllowed,
                entry.key.span,
                format!("{what} cannot have `retry:`: its next due time is its retry; remove it"),
            );
            ok = false;
        }
        let entries: Vec<Entry> = entries
            .iter()
            .filter(|e| e.key.name != "retry")
            .cloned()
            .collect();
        let allowed = ["every", "cron", "run", "timeout"];
        let keys = self.keyed(
            &what,
            &entries,
            &allowed,
            Code::KeyUnknown,
            Code::NameDuplicate,
        );
        ok &= keys.len() == entries.len();
        let trigger = match (keys.get("every"), keys.get("cron")) {
            (Some(every), None) => self.every(&every.value).map(Trigger::Every),
            (None, Some(cron)) => self.cron(&cron.value),
            (Some(_), Some(cron)) => {
                self.err(
                    Code::ScheduleTriggerInvalid,
                    cron.key.span,
                    format!("{what} has both `every:` and `cron:`; keep one"),
                );
                None
            }
            (None, None) => {
                if !item.broken {
                    self.err(
                        Code::ScheduleTriggerInvalid,
                        item.name.span,
                        format!("{what} needs `every:` (as in `every: 1h`) or `cron:` (as in `cron: \"0 3 * * *\"`)"),
                    );
                }
                None
            }
        };
        let run = match keys.get("run") {
            Some(e) => self.run(&e.value, Code::ScheduleActionUnknown, &Scope::Schedule),
            None => {
                self.missing(item, &what, "run", "reconcile_all()");
                None
            }
        };
        let timeout = match keys.get("timeout") {
            Some(e) => self.run_timeout(&e.value),
            None => Some(DEFAULT_TIMEOUT),
        };
        let link = keys
            .get("run")
            .and_then(|e| self.run_target(&e.value))
            .map(|(action, span)| Link {
                event: None,
                action,
                span,
            });
        if !ok || item.broken {
            return (None, link);
        }
        let sched = (|| {
            Some(Schedule {
                name: item.name.name.clone(),
                trigger: trigger?,
                run: run?,
                timeout: timeout?,
                span: item.span,
            })
        })();
        (sched, link)
    }

    fn cron(&mut self, e: &Expr) -> Option<Trigger> {
        let ExprKind::Str(pattern) = &e.kind else {
            self.err(
                Code::ScheduleCronInvalid,
                e.span,
                format!(
                    "`cron:` takes an expression in quotes, as in `cron: \"0 3 * * *\"`; found {}",
                    describe(e)
                ),
            );
            return None;
        };
        match pattern.parse::<croner::Cron>() {
            Ok(_) => Some(Trigger::Cron(pattern.clone())),
            Err(why) => {
                self.err(
                    Code::ScheduleCronInvalid,
                    e.span,
                    format!(
                        "{pattern:?} is not a cron expression ({}); write five fields, minute hour day month weekday, as in \"0 3 * * *\"",
                        why.to_string().trim_end_matches('.')
                    ),
                );
                None
            }
        }
    }
}
