//! `action NAME(PARAMS) { call ... run ... emit ... }` and `action NAME(PARAMS) uses ...`

use super::connection::DriverName;
use super::exprs::{EventUse, Scope, Template};
use super::graph::Edges;
use super::{hint, Checker};
use crate::app::{Action, ActionBody, Call, Method, Run, Statement};
use crate::diagnostic::Code;
use crate::syntax::{Ident, Item, Stmt, StmtKind};
use std::collections::BTreeSet;

pub(crate) struct ActionNode {
    pub action: Option<Action>,
    pub edges: Edges,
}

impl Checker<'_> {
    pub(crate) fn action(&mut self, item: &Item, uses: Option<&[Ident]>, body: Option<&[Stmt]>) -> ActionNode {
        let name = item.name.name.as_str();
        let params = self.sigs.get(name).map(|s| s.params.clone()).unwrap_or_default();
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
                        what: "action",
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
            emits: BTreeSet::new(),
            span: item.span,
        });
        ActionNode { action, edges }
    }

    pub(crate) fn known_connection(&mut self, conn: &Ident) -> bool {
        if self.connection_names.contains(&conn.name) {
            return true;
        }
        let help = hint(&conn.name, self.connection_names.iter().map(String::as_str), || {
            format!("declare it with `connection {} {{ base_url: ... }}`", conn.name)
        });
        self.err(
            Code::ActionConnectionUnknown,
            conn.span,
            format!("no connection is named `{}`; {help}", conn.name),
        );
        false
    }

    /// One statement of an action's body or a capability's `fills` body.
    pub(crate) fn statement(
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
            StmtKind::Emit => {
                let emit = self.emit(stmt, scope, uses)?;
                edges.emits.insert(emit.event.clone());
                Some(Statement::Emit(emit))
            }
            StmtKind::Call => {
                let (conn, method_name) = (&stmt.callee[0], &stmt.callee[1]);
                let known = self.known_connection(conn);
                if known {
                    edges.conns.insert(conn.name.clone());
                }
                let driver = self.connection_drivers.get(&conn.name).copied().flatten();
                if method_name.name == "publish" {
                    return self.publish(stmt, driver, known, scope, uses);
                }
                let method = Method::from_name(&method_name.name);
                match (method, driver) {
                    (None, _) => {
                        let help = hint(&method_name.name, Method::NAMES.into_iter(), || {
                            format!("the methods are {}", Method::NAMES.join(", "))
                        });
                        self.err(
                            Code::CallMethodUnknown,
                            method_name.span,
                            format!("`{}` is not an HTTP method; {help}", method_name.name),
                        );
                    }
                    (Some(_), Some(d)) if d != DriverName::Http => {
                        self.err(
                            Code::CallMethodUnknown,
                            method_name.span,
                            format!(
                                "`{}` publishes to a broker (`driver: {}`), it takes no HTTP method; \
                                 write `call {}.publish(\"target\", body: ...)`",
                                conn.name,
                                d.name(),
                                conn.name
                            ),
                        );
                        self.call_args(stmt, scope, uses);
                        return None;
                    }
                    _ => {}
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
        let Scope::Action { name, params, what } = scope else {
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
        let path = self.path_template(&path_arg.value, Template::Path, name, what, params);
        let mut body = None;
        let mut key = None;
        for arg in stmt.args.iter().filter(|a| a.name.is_some()) {
            let n = arg.name.as_ref().map(|n| n.name.as_str()).unwrap_or_default();
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
                self.err(CODE, arg.value.span, format!("`{n}:` is given twice; keep one"));
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

    pub(crate) fn known_action(&mut self, target: &Ident, code: Code) -> bool {
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
}
