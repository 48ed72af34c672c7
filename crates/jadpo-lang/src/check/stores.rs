//! `store NAME { url: ... }` and the `in STORE` of an event.

use super::values::describe;
use super::{hint, Checker};
use crate::app::{StoreDecl, Value};
use crate::diagnostic::Code;
use crate::syntax::{Entry, Expr, ExprKind, Ident, Item};

/// The URL forms a store takes, as the CLI's `--store` reads them.
const SCHEMES: [&str; 3] = ["sqlite:", "postgres://", "postgresql://"];

impl Checker<'_> {
    pub(crate) fn store(&mut self, item: &Item, entries: &[Entry]) -> Option<StoreDecl> {
        let what = format!("store `{}`", item.name.name);
        let keys = self.keyed(&what, entries, &["url"], Code::KeyUnknown, Code::NameDuplicate);
        let ok = keys.len() == entries.len();
        let url = match keys.get("url") {
            Some(e) => self.store_url(&e.value),
            None => {
                self.missing(item, &what, "url", "env(\"DATABASE_URL\")");
                None
            }
        };
        if !ok || item.broken {
            return None;
        }
        Some(StoreDecl {
            name: item.name.name.clone(),
            url: url?,
            span: item.span,
        })
    }

    /// `"sqlite:PATH"`, `"postgres://..."` or `env("X")`.
    fn store_url(&mut self, e: &Expr) -> Option<Value> {
        const TAKES: &str = "`url:` takes a store URL in quotes (\"sqlite:audit.db\", \
                             \"postgres://USER@HOST/DATABASE\") or `env(\"NAME\")`";
        match &e.kind {
            ExprKind::Str(url) => {
                let known = SCHEMES
                    .iter()
                    .any(|s| url.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
                if known {
                    return Some(Value::String(url.clone()));
                }
                self.err(Code::ValueInvalid, e.span, format!("{TAKES}, not {url:?}"));
                None
            }
            ExprKind::Call { callee, .. } if callee.len() == 1 && callee[0].name == "env" => {
                self.setting(e, "`url:`", true)
            }
            _ => {
                self.err(Code::ValueInvalid, e.span, format!("{TAKES}; found {}", describe(e)));
                None
            }
        }
    }

    /// `event NAME in STORE`: reports `store.unknown`.
    pub(crate) fn known_store(&mut self, store: &Ident) -> bool {
        if self.store_names.contains(&store.name) {
            return true;
        }
        let help = hint(&store.name, self.store_names.iter().map(String::as_str), || {
            if self.store_names.is_empty() {
                format!(
                    "the app declares none; declare it with `store {} {{ url: env(\"DATABASE_URL\") }}`",
                    store.name
                )
            } else {
                format!("declare it with `store {} {{ url: ... }}`", store.name)
            }
        });
        self.err(
            Code::StoreUnknown,
            store.span,
            format!("no store is named `{}`; {help}", store.name),
        );
        false
    }
}
