//! `emit EVENT(FIELD: VALUE, ...)` in an action's or a capability's body.

use super::exprs::{article, EventUse, Scope};
use super::{hint, Checker};
use crate::app::{Emit, Expr as Value};
use crate::diagnostic::Code;
use crate::syntax::Stmt;
use std::collections::{HashMap, HashSet};

impl Checker<'_> {
    /// Checks the fields against the event's: each given once, by name,
    /// every one given, each of its field's type. The values are checked
    /// even when the event is unknown, so their own mistakes show at once.
    pub(crate) fn emit(&mut self, stmt: &Stmt, scope: &Scope<'_>, uses: &mut Vec<EventUse>) -> Option<Emit> {
        let target = &stmt.callee[0];
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
                ok = false;
                continue;
            };
            if let Some(ty) = ty {
                if !field.ty.accepts(ty) {
                    self.err(
                        Code::EmitFieldType,
                        arg.value.span,
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
                    ok = false;
                    continue;
                }
            }
            given.insert(&name.name, value);
        }
        let event = event?;
        let missing: Vec<String> = event
            .fields
            .iter()
            .filter(|f| !seen.contains(f.name.as_str()))
            .map(|f| format!("`{}: {}`", f.name, f.ty.name()))
            .collect();
        if !missing.is_empty() {
            if !lax {
                self.err(
                    Code::EmitFieldMissing,
                    stmt.span,
                    format!(
                        "`emit {}` also needs {}: an emitted event has every field of its declaration",
                        event.name,
                        missing.join(" and ")
                    ),
                );
            }
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
}
