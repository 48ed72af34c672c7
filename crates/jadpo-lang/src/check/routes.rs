//! `route NAME { post: "/refunds/{order_id}"  input: EVENT  run: ...  timeout: D }`
//! and the values of its `run:`: `path.NAME`, `input`, `input.FIELD`.

use super::exprs::{RouteInput, Scope};
use super::items::{Link, Source};
use super::values::describe;
use super::{hint, Checker};
use crate::app::{Expr as Value, Method, Route, RoutePath, Run, Type};
use crate::diagnostic::{Code, Span};
use crate::syntax::{Entry, Expr, ExprKind, Ident, Item};
use std::collections::HashMap;

/// A route's method and path, for `route.duplicate_path`.
pub(crate) struct RouteKey {
    name: String,
    method: Method,
    path: RoutePath,
    /// The path's value.
    span: Span,
}

pub(crate) struct CheckedRoute {
    pub route: Option<Route>,
    /// What it runs, even when it has errors, so `event` inside the
    /// action is still reported.
    pub link: Option<Link>,
    pub path: Option<RouteKey>,
}

impl Checker<'_> {
    pub(crate) fn route(&mut self, item: &Item, entries: &[Entry]) -> CheckedRoute {
        let name = item.name.name.as_str();
        let what = format!("route `{name}`");
        let allowed = ["get", "post", "put", "delete", "input", "run", "timeout"];
        let keys = self.keyed(&what, entries, &allowed, Code::KeyUnknown, Code::NameDuplicate);
        let mut ok = keys.len() == entries.len();

        let mut methods: Vec<&Entry> = Route::METHODS.iter().filter_map(|m| keys.get(m).copied()).collect();
        methods.sort_by_key(|e| e.key.span.start);
        let method_entry = self.method_entry(item, &what, &methods);
        ok &= methods.len() <= 1;
        let path = method_entry.and_then(|e| self.route_path(e));
        let method = method_entry.and_then(|e| Method::from_name(&e.key.name));

        let input = match keys.get("input") {
            None => Some(RouteInput::Absent),
            Some(e) => self.route_input(&e.value),
        };
        let run = match keys.get("run") {
            Some(e) => self.route_run(&e.value, name, path.as_ref(), input),
            None => {
                self.missing(item, &what, "run", "refund(path.order_id)");
                None
            }
        };
        let timeout = match keys.get("timeout") {
            Some(e) => self.run_timeout(&e.value),
            None => Some(Route::DEFAULT_TIMEOUT),
        };
        let link = keys
            .get("run")
            .and_then(|e| self.run_target(&e.value))
            .map(|(action, span)| Link {
                source: Source::Route,
                action,
                span,
            });
        let key = match (method, &path, method_entry) {
            (Some(method), Some(path), Some(entry)) => Some(RouteKey {
                name: name.to_string(),
                method,
                path: path.clone(),
                span: entry.value.span,
            }),
            _ => None,
        };
        let route = (|| {
            if !ok || item.broken {
                return None;
            }
            let input = match input? {
                RouteInput::Event(e) => Some(e.to_string()),
                _ => None,
            };
            Some(Route {
                name: name.to_string(),
                method: method?,
                path: path?,
                input,
                run: run?,
                timeout: timeout?,
                span: item.span,
            })
        })();
        CheckedRoute { route, link, path: key }
    }

    /// The entry of the route's one method (the first written, when more
    /// are: each extra is reported), or `None` when it has none.
    fn method_entry<'e>(&mut self, item: &Item, what: &str, methods: &[&'e Entry]) -> Option<&'e Entry> {
        let [first, rest @ ..] = methods else {
            if !item.broken {
                self.err(
                    Code::RouteMethodMissing,
                    item.name.span,
                    format!(
                        "{what} needs its method and path: one of `get:`, `post:`, `put:` or `delete:`, \
                         as in `post: \"/refunds/{{order_id}}\"`"
                    ),
                );
            }
            return None;
        };
        for extra in rest {
            self.err(
                Code::RouteMethodMissing,
                extra.key.span,
                format!(
                    "{what} has both `{}:` and `{}:`; a route answers one method: keep one, and \
                     declare another route for the other",
                    first.key.name, extra.key.name
                ),
            );
        }
        Some(first)
    }

    /// The route's `run:`, whose values may be the path's placeholders and
    /// the request body (`input`).
    fn route_run(
        &mut self,
        e: &Expr,
        name: &str,
        path: Option<&RoutePath>,
        input: Option<RouteInput<'_>>,
    ) -> Option<Run> {
        let params: Option<Vec<String>> = path.map(|p| p.params().map(str::to_string).collect());
        let scope = Scope::Route {
            name,
            params: params.as_deref(),
            input: input.unwrap_or(RouteInput::Unchecked),
        };
        self.run(e, Code::RouteActionUnknown, &scope)
    }

    fn route_path(&mut self, entry: &Entry) -> Option<RoutePath> {
        let e = &entry.value;
        let ExprKind::Str(text) = &e.kind else {
            self.err(
                Code::RoutePathInvalid,
                e.span,
                format!(
                    "`{}:` takes the route's path in quotes, as in `{}: \"/refunds/{{order_id}}\"`; found {}",
                    entry.key.name,
                    entry.key.name,
                    describe(e)
                ),
            );
            return None;
        };
        match RoutePath::parse(text) {
            Ok(path) => Some(path),
            Err(why) => {
                self.err(Code::RoutePathInvalid, e.span, why);
                None
            }
        }
    }

    /// `input: EVENT`. `None` when it is not a name at all.
    fn route_input<'e>(&mut self, e: &'e Expr) -> Option<RouteInput<'e>> {
        let ExprKind::Path(p) = &e.kind else {
            self.invalid_input(e);
            return None;
        };
        let [event] = p.as_slice() else {
            self.invalid_input(e);
            return None;
        };
        if self.events.contains_key(&event.name) {
            return Some(RouteInput::Event(&event.name));
        }
        let help = hint(&event.name, self.events.keys().map(String::as_str), || {
            format!("declare it with `event {} {{ ... }}`", event.name)
        });
        self.err(
            Code::RouteInputUnknown,
            event.span,
            format!(
                "no event is named `{}`; {help} (`input:` names the event whose fields the request body has)",
                event.name
            ),
        );
        Some(RouteInput::Unchecked)
    }

    fn invalid_input(&mut self, e: &Expr) {
        self.err(
            Code::ValueInvalid,
            e.span,
            format!(
                "`input:` takes an event's name, as in `input: RefundRequest`; found {}",
                describe(e)
            ),
        );
    }

    /// `path.NAME`, `input` and `input.FIELD` in a route's `run:`; `None`
    /// for any other name, left to the caller.
    pub(crate) fn route_value(
        &mut self,
        e: &Expr,
        path: &[Ident],
        scope: &Scope<'_>,
    ) -> Option<Option<(Value, Option<Type>)>> {
        const CODE: Code = Code::CallArgumentsInvalid;
        let Scope::Route { name, params, input } = scope else {
            return None;
        };
        let rest: Vec<String> = path[1..].iter().map(|i| i.name.clone()).collect();
        match path[0].name.as_str() {
            "path" => Some(self.path_param(e, name, *params, &rest)),
            "input" => Some(match (input, rest.is_empty()) {
                (RouteInput::Absent, _) => {
                    self.err(
                        CODE,
                        e.span,
                        format!(
                            "route `{name}` has no `input:`, so there is no `input` to pass; add `input: EVENT` \
                             to read the request body as that event"
                        ),
                    );
                    None
                }
                (_, true) => Some((Value::Input, Some(Type::Object))),
                (RouteInput::Unchecked, false) => Some((Value::InputField(rest), None)),
                (RouteInput::Event(event), false) => self
                    .event_field(event, "input", &rest, e.span, None)
                    .map(|ty| (Value::InputField(rest), ty)),
            }),
            _ => None,
        }
    }

    fn path_param(
        &mut self,
        e: &Expr,
        route: &str,
        params: Option<&[String]>,
        rest: &[String],
    ) -> Option<(Value, Option<Type>)> {
        let Some(param) = rest.first() else {
            self.err(
                Code::CallArgumentsInvalid,
                e.span,
                "`path` is not a value by itself; pass a placeholder of the route's path as `path.NAME`, \
                 as in `path.order_id`"
                    .to_string(),
            );
            return None;
        };
        if let Some(params) = params {
            if !params.contains(param) {
                let help = hint(param, params.iter().map(String::as_str), || {
                    if params.is_empty() {
                        "it has no placeholders; add `{NAME}` to the path".to_string()
                    } else {
                        let names: Vec<String> = params.iter().map(|p| format!("`{{{p}}}`")).collect();
                        format!("its placeholders are {}", names.join(", "))
                    }
                });
                self.err(
                    Code::RoutePathParamUnknown,
                    e.span,
                    format!("the path of route `{route}` has no `{{{param}}}`; {help}"),
                );
                return None;
            }
        }
        if rest.len() > 1 {
            self.err(
                Code::CallArgumentsInvalid,
                e.span,
                format!(
                    "`path.{param}` is a string, which has no field `{}`; pass `path.{param}`",
                    rest[1]
                ),
            );
            return None;
        }
        Some((Value::PathParam(param.clone()), Some(Type::String)))
    }

    /// `route.duplicate_path` for each route that answers the same
    /// requests as an earlier one: one method, one path shape.
    pub(crate) fn duplicate_route_paths(&mut self, keys: &[RouteKey]) {
        let mut seen: HashMap<(Method, Vec<Option<&str>>), &RouteKey> = HashMap::new();
        for key in keys {
            match seen.get(&(key.method, key.path.shape())) {
                Some(first) => {
                    let line = self.line_of(first.span);
                    self.err(
                        Code::RouteDuplicatePath,
                        key.span,
                        format!(
                            "route `{}` answers the same requests as route `{}` on line {line} (`{}: \"{}\"`); \
                             change one path, or merge the two routes",
                            key.name,
                            first.name,
                            first.method.name(),
                            first.path
                        ),
                    );
                }
                None => {
                    seen.insert((key.method, key.path.shape()), key);
                }
            }
        }
    }
}
