//! `emit EVENT(FIELD: VALUE, ...)` in an action's or a capability's body.

use super::exprs::{article, EventUse, Scope};
use super::{hint, Checker};
use crate::app::{Emit, Event, Expr as Value, Type};
use crate::diagnostic::{Code, Span};
use crate::syntax::{Ident, Stmt};
use std::collections::{HashMap, HashSet};

impl Checker<'_> {
    /// Checks the fields against the event's: each given once, by name,
    /// every one given, each of its field's type. The values are checked
    /// even when the event is unknown, so their own mistakes show at once.
    pub(crate) fn emit(&mut self, stmt: &Stmt, scope: &Scope<'_>, uses: &mut Vec<EventUse>) -> Option<Emit> {
        let target = &stmt.callee[0];
        let event = self.emitted_event(target);
        // A field that failed to check may be the one named here.
        let lax = self.lax_events.contains(&target.name);
        let mut given: HashMap<&str, Value> = HashMap::new();
        let mut seen: HashSet<&str> = HashSet::new();
        let mut ok = event.is_some();
        for arg in &stmt.args {
            let value = self.value(&arg.value, scope, uses);
            let Some(name) = &arg.name else {
                self.err(
                    Code::CallArgumentsInvalid,
                    arg.value.span,
                    format!(
                        "`emit` names each field, as in `emit {}(id: payment_id)`; name this value",
                        target.name
                    ),
                );
                ok = false;
                continue;
            };
            if !seen.insert(&name.name) {
                self.err(
                    Code::CallArgumentsInvalid,
                    name.span,
                    format!("`{}` is given twice; keep one", name.name),
                );
                ok = false;
                continue;
            }
            let Some((value, ty)) = value else {
                ok = false;
                continue;
            };
            let Some(event) = &event else {
                continue;
            };
            if !self.field_fits(event, name, ty, arg.value.span, lax) {
                ok = false;
                continue;
            }
            given.insert(&name.name, value);
        }
        let event = event?;
        if !self.every_field_given(&event, &seen, stmt.span, lax) {
            ok = false;
        }
        if !ok {
            return None;
        }
        let fields = event
            .fields
            .iter()
            .map(|f| Some((f.name.clone(), given.remove(f.name.as_str())?)))
            .collect::<Option<Vec<_>>>()?;
        Some(Emit {
            event: event.name.clone(),
            fields,
            span: stmt.span,
        })
    }

    /// The declared event `emit` names, or `None`, reported.
    fn emitted_event(&mut self, target: &Ident) -> Option<Event> {
        let event = self.events.get(&target.name).cloned();
        if event.is_none() {
            let help = hint(&target.name, self.events.keys().map(String::as_str), || {
                format!("declare it with `event {} {{ ... }}`", target.name)
            });
            self.err(
                Code::EmitEventUnknown,
                target.span,
                format!("no event is named `{}`; {help}", target.name),
            );
        }
        event
    }

    /// Whether `event` has the field `name` and a value of type `ty` fits
    /// it, reporting when not (an unknown field only when the event is not
    /// `lax`).
    fn field_fits(&mut self, event: &Event, name: &Ident, ty: Option<Type>, span: Span, lax: bool) -> bool {
        let Some(field) = event.field(&name.name) else {
            if !lax {
                let help = hint(&name.name, event.fields.iter().map(|f| f.name.as_str()), || {
                    let names: Vec<&str> = event.fields.iter().map(|f| f.name.as_str()).collect();
                    if names.is_empty() {
                        "it has no fields".to_string()
                    } else {
                        format!("its fields are {}", names.join(", "))
                    }
                });
                self.err(
                    Code::EmitFieldUnknown,
                    name.span,
                    format!("event `{}` has no field `{}`; {help}", event.name, name.name),
                );
            }
            return false;
        };
        match ty {
            Some(ty) if !field.ty.accepts(ty) => {
                self.err(
                    Code::EmitFieldType,
                    span,
                    format!(
                        "field `{}` of event `{}` is {} {}, but this is {} {}",
                        field.name,
                        event.name,
                        article(field.ty),
                        field.ty.name(),
                        article(ty),
                        ty.name()
                    ),
                );
                false
            }
            _ => true,
        }
    }

    /// Whether every field of `event` is in `seen`, reporting those that
    /// are not (unless the event is `lax`).
    fn every_field_given(&mut self, event: &Event, seen: &HashSet<&str>, span: Span, lax: bool) -> bool {
        let missing: Vec<String> = event
            .fields
            .iter()
            .filter(|f| !seen.contains(f.name.as_str()))
            .map(|f| format!("`{}: {}`", f.name, f.ty.name()))
            .collect();
        if missing.is_empty() {
            return true;
        }
        if !lax {
            self.err(
                Code::EmitFieldMissing,
                span,
                format!(
                    "`emit {}` also needs {}: an emitted event has every field of its declaration",
                    event.name,
                    missing.join(" and ")
                ),
            );
        }
        false
    }
}
