//! Values passed to actions and calls, and path templates.

use super::values::{describe, path_text};
use super::{hint, Checker};
use crate::app::{Expr as Value, Field, PathPart, PathTemplate, Type};
use crate::diagnostic::{Code, Span};
use crate::syntax::{Entry, Expr, ExprKind, Ident, Number};

/// What a value may refer to where it stands.
pub(crate) enum Scope<'s> {
    /// A subscriber's `run:`: `event` and its fields. `None` when the
    /// subscriber's event is unknown (already reported).
    Subscriber { event: Option<&'s str> },
    /// A schedule's `run:`: literals only.
    Schedule,
    /// An action's body or a capability's `fills` body (`what` says
    /// which): its parameters and the event, whichever event the
    /// subscribers running it are on.
    Action {
        name: &'s str,
        params: &'s [Field],
        what: &'static str,
    },
    /// A route's `run:`: `path.NAME` and `input`, no event.
    Route {
        name: &'s str,
        /// The path's `{param}`s; `None` when the path failed to check,
        /// so `path.NAME` is not reported unknown again.
        params: Option<&'s [String]>,
        input: RouteInput<'s>,
    },
}

/// A route's `input:`.
#[derive(Clone, Copy)]
pub(crate) enum RouteInput<'s> {
    /// No `input:`: `input` is unknown.
    Absent,
    /// An event that is not declared (already reported): fields unchecked.
    Unchecked,
    Event(&'s str),
}

/// `event` or `event.FIELD` inside an action: checked later against the
/// event of every subscriber that runs the action.
#[derive(Clone, Debug)]
pub(crate) struct EventUse {
    /// Empty for the whole event.
    pub path: Vec<String>,
    pub span: Span,
}

pub(super) const CODE: Code = Code::CallArgumentsInvalid;

impl Checker<'_> {
    /// The value and its type (`None` when only known at run time).
    pub(crate) fn value(
        &mut self,
        e: &Expr,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<(Value, Option<Type>)> {
        Some(match &e.kind {
            ExprKind::Str(s) => (Value::String(s.clone()), Some(Type::String)),
            ExprKind::Bool(b) => (Value::Bool(*b), Some(Type::Bool)),
            ExprKind::Number(n) => return self.number_value(e, n),
            ExprKind::Rate { .. } => {
                self.err(
                    CODE,
                    e.span,
                    format!("{} is a rate, which is not a value to pass; pass a number", describe(e)),
                );
                return None;
            }
            ExprKind::Object(entries) => (self.object_value(entries, scope, uses)?, Some(Type::Object)),
            ExprKind::List(items) => (self.list_value(items, scope, uses)?, Some(Type::List)),
            ExprKind::Path(path) if path[0].name == "event" => {
                let fields: Vec<String> = path[1..].iter().map(|i| i.name.clone()).collect();
                return self.event_value(e.span, fields, scope, uses);
            }
            ExprKind::Path(path) if matches!(scope, Scope::Route { .. }) => {
                if let Some(found) = self.route_value(e, path, scope) {
                    return found;
                }
                return self.name_value(e, path, scope);
            }
            ExprKind::Path(path) => return self.name_value(e, path, scope),
            ExprKind::Call { callee, .. } => (self.called_value(e, callee)?, Some(Type::String)),
        })
    }

    /// A plain number: a duration is refused, and an int must fit 64 bits.
    fn number_value(&mut self, e: &Expr, n: &Number) -> Option<(Value, Option<Type>)> {
        if n.unit.is_some() {
            self.err(
                CODE,
                e.span,
                format!(
                    "{} is a duration, which is not a value to pass; pass a number",
                    describe(e)
                ),
            );
            return None;
        }
        if n.frac.is_some() {
            return Some((Value::Float(n.as_float()?), Some(Type::Float)));
        }
        match n.as_int().and_then(|v| i64::try_from(v).ok()) {
            Some(v) => Some((Value::Int(v), Some(Type::Int))),
            None => {
                self.err(CODE, e.span, format!("{} does not fit in a 64-bit int", describe(e)));
                None
            }
        }
    }

    /// `{ KEY: VALUE, ... }`; `None` when a key is repeated or a value
    /// failed, after every entry is checked.
    fn object_value(&mut self, entries: &[Entry], scope: &Scope<'_>, uses: &mut Vec<EventUse>) -> Option<Value> {
        let mut fields: Vec<(String, Value)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut ok = true;
        for entry in entries {
            if !seen.insert(entry.key.name.as_str()) {
                self.err(
                    Code::NameDuplicate,
                    entry.key.span,
                    format!("`{}` is given twice in this object; keep one", entry.key.name),
                );
                ok = false;
                continue;
            }
            match self.value(&entry.value, scope, uses) {
                Some((v, _)) => fields.push((entry.key.name.clone(), v)),
                None => ok = false,
            }
        }
        ok.then_some(Value::Object(fields))
    }

    /// `[VALUE, ...]`; `None` when an item failed, after every item is
    /// checked.
    fn list_value(&mut self, items: &[Expr], scope: &Scope<'_>, uses: &mut Vec<EventUse>) -> Option<Value> {
        let mut values = Vec::new();
        let mut ok = true;
        for item in items {
            match self.value(item, scope, uses) {
                Some((v, _)) => values.push(v),
                None => ok = false,
            }
        }
        ok.then_some(Value::List(values))
    }

    /// `env("X")` or `secret("X")`, the only calls a value may hold.
    fn called_value(&mut self, e: &Expr, callee: &[Ident]) -> Option<Value> {
        let f = callee[0].name.as_str();
        if callee.len() == 1 && (f == "env" || f == "secret") {
            let v = self.setting(e, &format!("`{f}(...)`"), false)?;
            Some(match v {
                crate::app::Value::Env(n) => Value::Env(n),
                crate::app::Value::Secret(n) => Value::Secret(n),
                crate::app::Value::String(s) => Value::String(s),
            })
        } else {
            self.err(
                CODE,
                e.span,
                format!(
                    "`{}(...)` cannot be a value; only `env(\"X\")` and `secret(\"X\")` are called inside values",
                    path_text(callee)
                ),
            );
            None
        }
    }

    fn event_value(
        &mut self,
        span: Span,
        fields: Vec<String>,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<(Value, Option<Type>)> {
        let value = if fields.is_empty() {
            Value::Event
        } else {
            Value::EventField(fields.clone())
        };
        match scope {
            Scope::Schedule => {
                self.err(
                    CODE,
                    span,
                    "a schedule has no event; pass literals such as `\"all\"` or `10`".to_string(),
                );
                None
            }
            Scope::Route { .. } => {
                self.err(
                    CODE,
                    span,
                    "a route has no event: its `run:` passes `path.NAME` (a placeholder of its path), \
                     `input` or `input.FIELD` (the request body), or literals"
                        .to_string(),
                );
                None
            }
            Scope::Action { .. } => {
                uses.push(EventUse { path: fields, span });
                Some((value, None))
            }
            Scope::Subscriber { event: None } => Some((value, None)),
            Scope::Subscriber { event: Some(event) } => {
                if fields.is_empty() {
                    return Some((value, Some(Type::Object)));
                }
                let ty = self.event_field(event, "event", &fields, span, None)?;
                Some((value, ty))
            }
        }
    }

    /// The type of `event.a.b` on `event`, or `event.field_unknown`.
    /// `root` is how the value is written: `event`, or `input` in a
    /// route. `via` names the subscriber and action a use inside an action
    /// came through, for the message.
    pub(crate) fn event_field(
        &mut self,
        event: &str,
        root: &str,
        fields: &[String],
        span: Span,
        via: Option<(&str, &str)>,
    ) -> Option<Option<Type>> {
        if self.lax_events.contains(event) {
            return Some(None);
        }
        let Some(decl) = self.events.get(event) else {
            return Some(None);
        };
        let name = &fields[0];
        let found = decl.field(name).map(|f| f.ty);
        let through = via
            .map(|(sub, action)| format!(" (subscriber `{sub}` is on `{event}` and runs action `{action}`)"))
            .unwrap_or_default();
        match found {
            None => {
                let help = hint(name, decl.fields.iter().map(|f| f.name.as_str()), || {
                    let names: Vec<&str> = decl.fields.iter().map(|f| f.name.as_str()).collect();
                    if names.is_empty() {
                        "it has no fields".to_string()
                    } else {
                        format!("its fields are {}", names.join(", "))
                    }
                });
                self.err(
                    Code::EventFieldUnknown,
                    span,
                    format!("event `{event}` has no field `{name}`{through}; {help}"),
                );
                None
            }
            Some(ty) if fields.len() == 1 => Some(Some(ty)),
            // Inside an object field the shape is not declared.
            Some(Type::Object) => Some(None),
            Some(ty) => {
                self.err(
                    Code::EventFieldUnknown,
                    span,
                    format!(
                        "`{root}.{name}` is {} {}, which has no field `{}`{through}; only object fields have fields",
                        article(ty),
                        ty.name(),
                        fields[1]
                    ),
                );
                None
            }
        }
    }

    fn name_value(
        &mut self,
        e: &Expr,
        path: &[crate::syntax::Ident],
        scope: &Scope<'_>,
    ) -> Option<(Value, Option<Type>)> {
        let name = path_text(path);
        if let Scope::Action {
            name: action,
            params,
            what,
        } = scope
        {
            if path.len() == 1 {
                if let Some(p) = params.iter().find(|p| p.name == name) {
                    return Some((Value::Param(name), Some(p.ty)));
                }
            }
            let help = hint(&name, params.iter().map(|p| p.name.as_str()), || {
                "pass one of its parameters, `event`, `event.FIELD` or a literal; quote text as \"...\"".to_string()
            });
            self.err(
                CODE,
                e.span,
                format!("`{name}` is not a parameter of {what} `{action}`; {help}"),
            );
            return None;
        }
        let wanted = match scope {
            Scope::Schedule => "a schedule passes literals",
            Scope::Route { .. } => "a route passes `path.NAME`, `input`, `input.FIELD` or a literal",
            _ => "pass `event.FIELD`, `event` or a literal",
        };
        self.err(
            CODE,
            e.span,
            format!("`{name}` is not a value here; {wanted}, and text goes in quotes: \"{name}\""),
        );
        None
    }

    /// The first argument of `call`: a path (or a publish's target, as
    /// `of` says) in quotes whose `{name}` placeholders are parameters of
    /// the action (or capability: `what`).
    pub(crate) fn path_template(
        &mut self,
        e: &Expr,
        of: Template,
        action: &str,
        what: &str,
        params: &[Field],
    ) -> Option<PathTemplate> {
        let noun = of.noun();
        let ExprKind::Str(text) = &e.kind else {
            self.err(
                CODE,
                e.span,
                format!(
                    "a call's first argument is its {noun} in quotes, as in {}; found {}",
                    of.example(),
                    describe(e)
                ),
            );
            return None;
        };
        // Placeholders can be pointed at exactly when the literal has no
        // escapes; otherwise the whole string is underlined.
        let exact = self.src.get(e.span.start..e.span.end) == Some(format!("\"{text}\"").as_str());
        let at = |from: usize, to: usize| {
            if exact {
                Span::new(e.span.start + 1 + from, e.span.start + 1 + to)
            } else {
                e.span
            }
        };
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut ok = true;
        let mut rest = text.char_indices().peekable();
        while let Some((i, ch)) = rest.next() {
            match ch {
                '{' => {
                    let Some(close) = text[i..].find('}').map(|n| i + n) else {
                        self.err(
                            CODE,
                            at(i, text.len()),
                            format!("this `{{` in the {noun} is never closed; add a `}}`"),
                        );
                        return None;
                    };
                    let name = &text[i + 1..close];
                    while rest.peek().is_some_and(|(j, _)| *j <= close) {
                        rest.next();
                    }
                    if self.path_placeholder(name, noun, at(i, close + 1), action, what, params) {
                        if !literal.is_empty() {
                            parts.push(PathPart::Literal(std::mem::take(&mut literal)));
                        }
                        parts.push(PathPart::Param(name.to_string()));
                    } else {
                        ok = false;
                    }
                }
                '}' => {
                    self.err(
                        CODE,
                        at(i, i + 1),
                        format!("this `}}` in the {noun} has no `{{`; remove it"),
                    );
                    ok = false;
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(PathPart::Literal(literal));
        }
        ok.then(|| PathTemplate::new(parts))
    }

    /// Whether `{name}` in a path names a parameter a path can hold (a
    /// string, number or bool), reporting when it does not.
    fn path_placeholder(
        &mut self,
        name: &str,
        noun: &str,
        span: Span,
        action: &str,
        what: &str,
        params: &[Field],
    ) -> bool {
        match params.iter().find(|p| p.name == name) {
            Some(p) if matches!(p.ty, Type::Object | Type::List) => {
                self.err(
                    CODE,
                    span,
                    format!(
                        "`{{{name}}}` is {} {}; only strings, numbers and bools go in a {noun}",
                        article(p.ty),
                        p.ty.name()
                    ),
                );
                false
            }
            Some(_) => true,
            None => {
                let help = hint(name, params.iter().map(|p| p.name.as_str()), || {
                    if params.is_empty() {
                        format!("it has none; add it to the {what}'s parameters")
                    } else {
                        format!("it takes {}", count_params(params))
                    }
                });
                self.err(
                    CODE,
                    span,
                    format!("`{{{name}}}` in the {noun} is not a parameter of {what} `{action}`; {help}"),
                );
                false
            }
        }
    }
}

/// What a `call`'s first argument is: an HTTP call's path, or a
/// publish's target (the routing key, subject, stream or topic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Template {
    Path,
    Target,
}

impl Template {
    fn noun(self) -> &'static str {
        match self {
            Template::Path => "path",
            Template::Target => "target",
        }
    }

    fn example(self) -> &'static str {
        match self {
            Template::Path => "\"/payments/{payment_id}\"",
            Template::Target => "\"payments.{payment_id}\"",
        }
    }
}

pub(crate) fn article(ty: Type) -> &'static str {
    match ty {
        Type::Int | Type::Object => "an",
        _ => "a",
    }
}

/// A callee's parameters as a message names them: `(a: string, b: int)`.
pub(crate) fn count_params(params: &[Field]) -> String {
    if params.is_empty() {
        return "no arguments".to_string();
    }
    let list: Vec<String> = params.iter().map(|p| format!("{}: {}", p.name, p.ty.name())).collect();
    format!("({})", list.join(", "))
}
