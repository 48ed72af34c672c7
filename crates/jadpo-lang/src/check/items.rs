//! `event`, `subscriber` and `schedule` blocks, and action parameters.

use super::exprs::{article, Scope};
use super::values::{describe, number_text};
use super::{hint, Checker};
use crate::app::{Event, Field, Run, Schedule, Subscriber, Trigger, Type, DEFAULT_TIMEOUT};
use crate::diagnostic::Code;
use crate::diagnostic::Span;
use crate::syntax::{Arg, Entry, Expr, ExprKind, Ident, Item, Param};
use jadpo_core::key_rule::KeyRule;
use jadpo_core::Budget;
use std::collections::{HashMap, HashSet};

/// A subscriber's, schedule's or route's `run:`, for the checks through
/// actions.
pub(crate) struct Link {
    pub source: Source,
    /// The action or capability it runs.
    pub action: String,
    pub span: crate::diagnostic::Span,
}

/// What starts the runs of a [`Link`], and so whether `event` is there.
pub(crate) enum Source {
    /// A subscriber on this event.
    Event(String),
    Schedule,
    Route,
}

impl Checker<'_> {
    /// The event and whether any field failed to check.
    pub(crate) fn event(&mut self, item: &Item, entries: &[Entry], store: Option<&Ident>) -> (Event, bool) {
        if let Some(store) = store {
            self.known_store(store);
        }
        let mut fields: Vec<Field> = Vec::new();
        // By name, so a huge event stays linear to check.
        let mut seen: HashMap<&str, Span> = HashMap::new();
        let mut lax = false;
        for entry in entries {
            if let Some(first) = seen.get(entry.key.name.as_str()) {
                let line = self.line_of(*first);
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
            seen.insert(&entry.key.name, entry.key.span);
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
            store: store.map(|s| s.name.clone()),
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

    pub(crate) fn params(&mut self, params: &[Param]) -> (Vec<Field>, bool) {
        let mut fields: Vec<Field> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        let mut lax = false;
        for p in params {
            if !seen.insert(&p.name.name) {
                self.err(
                    Code::NameDuplicate,
                    p.name.span,
                    format!("parameter `{}` is declared twice; rename or remove one", p.name.name),
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

    /// `run: action(args)`, or a bare `run: action` with no arguments.
    pub(crate) fn run(&mut self, e: &Expr, code: Code, scope: &Scope<'_>) -> Option<Run> {
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
    pub(crate) fn subscriber(&mut self, item: &Item, entries: &[Entry]) -> (Option<Subscriber>, Option<Link>) {
        let what = format!("subscriber `{}`", item.name.name);
        let allowed = ["on", "run", "retry", "timeout", "key", "order", "concurrency_per_key"];
        let keys = self.keyed(&what, entries, &allowed, Code::KeyUnknown, Code::NameDuplicate);
        let ok = keys.len() == entries.len();
        let on = match keys.get("on") {
            Some(e) => self.subscribed_event(&e.value),
            None => {
                self.missing(item, &what, "on", "PaymentReceived");
                None
            }
        };
        let event_known = on.as_ref().is_some_and(|name| self.events.contains_key(name));
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
        let key = match keys.get("key") {
            Some(e) => self
                .delivery_key(&e.value, on.as_deref().filter(|_| event_known))
                .map(Some),
            None => Some(None),
        };
        let key_rule = self.key_rule(
            keys.contains_key("key"),
            keys.get("order"),
            keys.get("concurrency_per_key"),
        );
        let link = match (&on, keys.get("run").and_then(|e| self.run_target(&e.value))) {
            (Some(event), Some((action, span))) if event_known => Some(Link {
                source: Source::Event(event.clone()),
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
                key: key?,
                key_rule: key_rule?,
                span: item.span,
            })
        })();
        (sub, link)
    }

    /// `order: fifo | strict` or `concurrency_per_key: N`, one of them,
    /// and only beside `key:` (they order or cap deliveries by their key).
    /// `Some(None)` when neither is given; `None` after an error.
    fn key_rule(&mut self, keyed: bool, order: Option<&&Entry>, cap: Option<&&Entry>) -> Option<Option<KeyRule>> {
        let (given, span) = match (order, cap) {
            (None, None) => return Some(None),
            (Some(_), Some(c)) => {
                self.err(
                    Code::SubscriberOrderInvalid,
                    c.key.span,
                    "`order:` and `concurrency_per_key:` do not go together: `order:` already runs one \
                     delivery of a key at a time; keep one of them"
                        .to_string(),
                );
                return None;
            }
            (Some(o), None) => (self.order(&o.value)?, o.key.span),
            (None, Some(c)) => (self.concurrency_per_key(&c.value)?, c.key.span),
        };
        if !keyed {
            let what = if matches!(given, KeyRule::Cap(_)) {
                "`concurrency_per_key:`"
            } else {
                "`order:`"
            };
            self.err(
                Code::SubscriberOrderWithoutKey,
                span,
                format!(
                    "{what} applies to deliveries that share a key, and this subscriber has no `key:`; \
                     add one, as in `key: event.customer_id`"
                ),
            );
            return None;
        }
        Some(Some(given))
    }

    /// `order: fifo` or `order: strict`.
    fn order(&mut self, e: &Expr) -> Option<KeyRule> {
        match &e.kind {
            ExprKind::Path(p) if p.len() == 1 && p[0].name == "fifo" => return Some(KeyRule::Fifo),
            ExprKind::Path(p) if p.len() == 1 && p[0].name == "strict" => return Some(KeyRule::Strict),
            _ => {}
        }
        self.err(
            Code::SubscriberOrderInvalid,
            e.span,
            format!(
                "`order:` takes `fifo` (a failed delivery lets the next of its key go on) or `strict` (it \
                 stops its key until an operator retries or skips it); found {}",
                describe(e)
            ),
        );
        None
    }

    /// `concurrency_per_key: N`, 1 to 1,000.
    fn concurrency_per_key(&mut self, e: &Expr) -> Option<KeyRule> {
        let found = match &e.kind {
            ExprKind::Number(n) => match n.as_int().map(KeyRule::cap) {
                Some(Ok(rule)) => return Some(rule),
                Some(Err(out_of_range)) => {
                    self.err(
                        Code::SubscriberConcurrencyPerKeyInvalid,
                        e.span,
                        out_of_range.to_string(),
                    );
                    return None;
                }
                None => format!("`{}`", number_text(n)),
            },
            _ => describe(e),
        };
        self.err(
            Code::SubscriberConcurrencyPerKeyInvalid,
            e.span,
            format!(
                "`concurrency_per_key:` takes a whole number from 1 to {}, not {found}",
                jadpo_core::key_rule::MAX_CONCURRENCY_PER_KEY
            ),
        );
        None
    }

    /// `key: event.FIELD`: a field of the event, a string or an int (or a
    /// field inside an object field, whose type is checked at the emit).
    /// Every fault but an unknown field is `subscriber.key_invalid`.
    fn delivery_key(&mut self, e: &Expr, event: Option<&str>) -> Option<Vec<String>> {
        const TAKES: &str = "`key:` takes a field of the event, as in `key: event.customer_id`";
        let path = match &e.kind {
            ExprKind::Path(p) if p.len() >= 2 && p[0].name == "event" => p,
            _ => {
                self.err(
                    Code::SubscriberKeyInvalid,
                    e.span,
                    format!("{TAKES}; found {}", describe(e)),
                );
                return None;
            }
        };
        let fields: Vec<String> = path[1..].iter().map(|i| i.name.clone()).collect();
        let Some(event) = event else {
            return Some(fields);
        };
        match self.event_field(event, "event", &fields, e.span, None)? {
            None | Some(Type::String | Type::Int) => Some(fields),
            Some(ty) => {
                self.err(
                    Code::SubscriberKeyInvalid,
                    e.span,
                    format!(
                        "a key is a string or an int; `event.{}` is {} {}: key on a field that names what \
                         the deliveries share, such as a customer's id",
                        fields.join("."),
                        article(ty),
                        ty.name()
                    ),
                );
                None
            }
        }
    }

    /// The event name after `on:`, or `None` when it is not a name. A name
    /// no event has is reported, and returned all the same.
    fn subscribed_event(&mut self, e: &Expr) -> Option<String> {
        let name = match &e.kind {
            ExprKind::Path(p) if p.len() == 1 => &p[0],
            _ => {
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!(
                        "`on:` takes an event's name, as in `on: PaymentReceived`; found {}",
                        describe(e)
                    ),
                );
                return None;
            }
        };
        if !self.events.contains_key(&name.name) {
            let help = hint(&name.name, self.events.keys().map(String::as_str), || {
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

    /// The action a `run:` names, when it is declared.
    pub(crate) fn run_target(&self, e: &Expr) -> Option<(String, crate::diagnostic::Span)> {
        let name = match &e.kind {
            ExprKind::Call { callee, .. } if callee.len() == 1 => &callee[0],
            ExprKind::Path(p) if p.len() == 1 => &p[0],
            _ => return None,
        };
        self.sigs.contains_key(&name.name).then(|| (name.name.clone(), e.span))
    }

    pub(crate) fn schedule(&mut self, item: &Item, entries: &[Entry]) -> (Option<Schedule>, Option<Link>) {
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
        let entries: Vec<Entry> = entries.iter().filter(|e| e.key.name != "retry").cloned().collect();
        let allowed = ["every", "cron", "run", "timeout"];
        let keys = self.keyed(&what, &entries, &allowed, Code::KeyUnknown, Code::NameDuplicate);
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
                source: Source::Schedule,
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
