//! `call NAME.publish("target", body: ..., headers: {...}, idempotency_key: ...)`:
//! one message to a broker connection (docs/app-file.md, "Connections to
//! a broker").

use super::connection::DriverName;
use super::exprs::{EventUse, Scope, Template};
use super::values::describe;
use super::Checker;
use crate::app::{Expr as Value, PathPart, PathTemplate, Publish, Statement};
use crate::diagnostic::Code;
use crate::syntax::{ExprKind, Stmt};

const CODE: Code = Code::CallArgumentsInvalid;

/// Header names Jadpo sets itself on every message: a publish may not
/// write over them.
const RESERVED_HEADERS: [&str; 8] = [
    "body",
    "idempotency-key",
    "nats-msg-id",
    "traceparent",
    "tracestate",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

impl Checker<'_> {
    /// A `publish` statement. `driver` is the connection's, when it could
    /// be read; `known` whether the connection exists (else already
    /// reported, and the arguments are still checked).
    pub(crate) fn publish(
        &mut self,
        stmt: &Stmt,
        driver: Option<DriverName>,
        known: bool,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<Statement> {
        let conn = &stmt.callee[0];
        let mut ok = known;
        if driver == Some(DriverName::Http) {
            self.err(
                Code::CallMethodUnknown,
                stmt.callee[1].span,
                format!(
                    "`{}` is an HTTP connection; `publish` is for a broker connection \
                     (`driver: amqp`, `nats`, `redis` or `mqtt`); call it with get, post, put, patch, delete or head",
                    conn.name
                ),
            );
            ok = false;
        }
        let args = self.publish_args(stmt, driver, scope, uses);
        let (target, body, headers, idempotency_key) = args?;
        if !ok {
            return None;
        }
        Some(Statement::Publish(Publish {
            connection: conn.name.clone(),
            target,
            body,
            headers,
            idempotency_key,
            span: stmt.span,
        }))
    }

    #[allow(clippy::type_complexity)]
    fn publish_args(
        &mut self,
        stmt: &Stmt,
        driver: Option<DriverName>,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<(PathTemplate, Option<Value>, Vec<(String, Value)>, Option<Value>)> {
        let Scope::Action { name, params, what } = scope else {
            return None;
        };
        let mut positional = stmt.args.iter().filter(|a| a.name.is_none());
        let Some(target_arg) = positional.next() else {
            self.err(
                CODE,
                stmt.span,
                "a publish needs its target first, as in `call bus.publish(\"payments.{payment_id}\", body: event)`"
                    .to_string(),
            );
            return None;
        };
        let mut ok = true;
        for extra in positional {
            self.err(
                CODE,
                extra.value.span,
                "a publish takes its target, then `body:`, `headers:` and `idempotency_key:` by name; \
                 name this argument or remove it"
                    .to_string(),
            );
            ok = false;
        }
        let target = self
            .path_template(&target_arg.value, Template::Target, name, what, params)
            .and_then(|t| self.target_literals(t, driver, target_arg.value.span));
        let (mut body, mut headers, mut key) = (None, None, None);
        for arg in stmt.args.iter().filter(|a| a.name.is_some()) {
            let n = arg.name.as_ref().map(|n| n.name.as_str()).unwrap_or_default();
            let seen = match n {
                "body" => body.is_some(),
                "headers" => headers.is_some(),
                "idempotency_key" => key.is_some(),
                other => {
                    let span = arg.name.as_ref().map_or(arg.value.span, |n| n.span);
                    self.err(
                        CODE,
                        span,
                        format!(
                            "a publish has no argument `{other}:`; it takes `body:`, `headers:` and `idempotency_key:`"
                        ),
                    );
                    ok = false;
                    continue;
                }
            };
            if seen {
                self.err(CODE, arg.value.span, format!("`{n}:` is given twice; keep one"));
                ok = false;
                continue;
            }
            if n == "headers" {
                match self.message_headers(&arg.value, scope, uses) {
                    Some(h) => headers = Some(h),
                    None => ok = false,
                }
                continue;
            }
            match self.value(&arg.value, scope, uses) {
                Some((v, _)) if n == "body" => body = Some(v),
                Some((v, _)) => key = Some(v),
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        Some((target?, body, headers.unwrap_or_default(), key))
    }

    /// `headers: { "Name": VALUE, ... }`: names of letters, digits, `-` and
    /// `_`, none twice (ignoring case) and none Jadpo sets itself.
    fn message_headers(
        &mut self,
        e: &crate::syntax::Expr,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<Vec<(String, Value)>> {
        let ExprKind::Object(entries) = &e.kind else {
            self.err(
                CODE,
                e.span,
                format!(
                    "a publish's `headers:` takes an object such as `{{ \"Tenant\": tenant_id }}`; found {}",
                    describe(e)
                ),
            );
            return None;
        };
        let mut ok = true;
        let mut out: Vec<(String, Value)> = Vec::new();
        for h in entries {
            let name = &h.key.name;
            let lower = name.to_ascii_lowercase();
            let fault = if name.is_empty()
                || name.len() > 128
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                Some(format!(
                    "header `{name}` is not a header name; use letters, digits, `-` and `_` (at most 128)"
                ))
            } else if RESERVED_HEADERS.contains(&lower.as_str()) {
                Some(format!(
                    "header `{name}` is set by Jadpo on every message; use another name"
                ))
            } else if out.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                Some(format!(
                    "header `{name}` is given twice (header names ignore case); keep one"
                ))
            } else {
                None
            };
            if let Some(message) = fault {
                self.err(CODE, h.key.span, message);
                ok = false;
                continue;
            }
            match self.value(&h.value, scope, uses) {
                Some((v, _)) => out.push((name.clone(), v)),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// The literal parts of a target, checked against what the broker
    /// takes; the parameters' values are checked per message, when they are
    /// known (`jadpo_core::publish::target_word`).
    fn target_literals(
        &mut self,
        target: PathTemplate,
        driver: Option<DriverName>,
        span: crate::diagnostic::Span,
    ) -> Option<PathTemplate> {
        let literal: String = target
            .parts()
            .iter()
            .filter_map(|p| match p {
                PathPart::Literal(s) => Some(s.as_str()),
                PathPart::Param(_) => None,
            })
            .collect();
        let forbidden: &[char] = match driver {
            Some(DriverName::Nats) => &['*', '>'],
            Some(DriverName::Mqtt) => &['+', '#'],
            _ => &[],
        };
        let why = if target.parts().is_empty() {
            Some("a publish's target is empty; name the routing key, subject, stream or topic".to_string())
        } else if literal.chars().any(|c| c.is_whitespace() || c.is_control()) {
            Some("a publish's target has no spaces or control characters".to_string())
        } else if let Some(c) = literal.chars().find(|c| forbidden.contains(c)) {
            Some(format!(
                "`{c}` is a wildcard on {}, for subscribing; a publish's target names one place",
                driver.map_or("this broker", DriverName::name)
            ))
        } else if literal.len() > 255 {
            Some("a publish's target is at most 255 bytes".to_string())
        } else {
            None
        };
        match why {
            Some(message) => {
                self.err(CODE, span, message);
                None
            }
            None => Some(target),
        }
    }
}
