//! Argument lists: binding a `run`'s arguments to the parameters of the
//! action or capability it runs.

use super::exprs::{article, count_params, EventUse, Scope, CODE};
use super::{hint, Checker};
use crate::app::{Expr as Value, Field, Type};
use crate::diagnostic::Span;
use crate::syntax::Arg;

/// The action or capability a `run` binds its arguments to.
#[derive(Clone, Copy)]
struct Callee<'c> {
    name: &'c str,
    params: &'c [Field],
    /// Its parameter list had an error: mismatches are not reported.
    lax: bool,
    /// "action" or "capability".
    what: &'c str,
}

impl Checker<'_> {
    /// Binds `args` to `target`'s parameters: positional ones first, then
    /// `name: value`. Returns one value per parameter, in order.
    pub(crate) fn bind(
        &mut self,
        target: &str,
        args: &[Arg],
        span: Span,
        scope: &Scope<'_>,
        uses: &mut Vec<EventUse>,
    ) -> Option<Vec<Value>> {
        let (params, lax, what) = match self.sigs.get(target) {
            Some(sig) => (sig.params.clone(), sig.lax, sig.what),
            None => return None,
        };
        let callee = Callee {
            name: target,
            params: &params,
            lax,
            what,
        };
        let mut slots: Vec<Option<Value>> = vec![None; params.len()];
        let mut given = vec![false; params.len()];
        let mut ok = true;
        let mut named_seen = false;
        for (i, arg) in args.iter().enumerate() {
            let value = self.value(&arg.value, scope, uses);
            let Some(index) = self.parameter_of(&callee, arg, i, args.len(), &mut named_seen) else {
                ok = false;
                continue;
            };
            if given[index] {
                self.err(
                    CODE,
                    arg.value.span,
                    format!("`{}` is given twice; keep one", params[index].name),
                );
                ok = false;
                continue;
            }
            given[index] = true;
            let Some((value, ty)) = value else {
                ok = false;
                continue;
            };
            if let Some(ty) = ty {
                if !self.argument_type_fits(&callee, &params[index], ty, arg.value.span) {
                    ok = false;
                    continue;
                }
            }
            slots[index] = Some(value);
        }
        if !self.all_parameters_given(&callee, &given, span) {
            ok = false;
        }
        if !ok {
            return None;
        }
        slots.into_iter().collect()
    }

    /// The index of the parameter the `i`th of `count` arguments binds to,
    /// or `None` (reported, unless the callee is lax) when it binds to none.
    /// `named_seen`: a named argument came before; this one may be it.
    fn parameter_of(
        &mut self,
        callee: &Callee<'_>,
        arg: &Arg,
        i: usize,
        count: usize,
        named_seen: &mut bool,
    ) -> Option<usize> {
        let Callee {
            name: target,
            params,
            lax,
            what,
        } = *callee;
        match &arg.name {
            None if *named_seen => {
                self.err(
                    CODE,
                    arg.value.span,
                    "a positional argument comes after a named one; put positional arguments first".to_string(),
                );
                None
            }
            None if i >= params.len() => {
                if !lax {
                    self.err(
                        CODE,
                        arg.value.span,
                        format!(
                            "{what} `{target}` takes {}, but {count} are given; remove this one",
                            count_params(params),
                        ),
                    );
                }
                None
            }
            None => Some(i),
            Some(n) => {
                *named_seen = true;
                let found = params.iter().position(|p| p.name == n.name);
                if found.is_none() && !lax {
                    let help = hint(&n.name, params.iter().map(|p| p.name.as_str()), || {
                        format!("it takes {}", count_params(params))
                    });
                    self.err(
                        CODE,
                        n.span,
                        format!("{what} `{target}` has no parameter `{}`; {help}", n.name),
                    );
                }
                found
            }
        }
    }

    /// Whether a value of type `ty` may be passed as `param`, reporting
    /// when it may not.
    fn argument_type_fits(&mut self, callee: &Callee<'_>, param: &Field, ty: Type, span: Span) -> bool {
        if param.ty.accepts(ty) {
            return true;
        }
        self.err(
            CODE,
            span,
            format!(
                "`{}` of {} `{}` is {} {}, but this is {} {}",
                param.name,
                callee.what,
                callee.name,
                article(param.ty),
                param.ty.name(),
                article(ty),
                ty.name()
            ),
        );
        false
    }

    /// Whether every parameter was given an argument, reporting those that
    /// were not (unless the callee is lax).
    fn all_parameters_given(&mut self, callee: &Callee<'_>, given: &[bool], span: Span) -> bool {
        let missing: Vec<String> = callee
            .params
            .iter()
            .zip(given)
            .filter(|(_, g)| !**g)
            .map(|(p, _)| format!("`{}: {}`", p.name, p.ty.name()))
            .collect();
        if missing.is_empty() {
            return true;
        }
        if !callee.lax {
            self.err(
                CODE,
                span,
                format!(
                    "{} `{}` also needs {}; it takes {}",
                    callee.what,
                    callee.name,
                    missing.join(" and "),
                    count_params(callee.params)
                ),
            );
        }
        false
    }
}
