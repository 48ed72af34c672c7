//! `alerts { connection: NAME  path: "/..." }`

use super::connection::DriverName;
use super::values::describe;
use super::{and_list, hint, Checker};
use crate::app::AlertRoute;
use crate::diagnostic::Code;
use crate::syntax::{Entry, Expr, ExprKind, Ident, Item};

const WHAT: &str = "`alerts`";

/// Past this many, an unknown connection's message names only the first
/// ones: a hostile file with thousands of connections must not make every
/// message that long.
const NAMES_SHOWN: usize = 8;

impl Checker<'_> {
    /// Every `alerts` block is checked, the repeated ones too (reported as
    /// `alerts.duplicate` elsewhere), so each of their mistakes shows at once.
    pub(crate) fn alerts(&mut self, item: &Item, entries: &[Entry]) -> Option<AlertRoute> {
        let allowed = ["connection", "path"];
        let keys = self.keyed(WHAT, entries, &allowed, Code::KeyUnknown, Code::NameDuplicate);
        let ok = keys.len() == entries.len();
        let connection = match keys.get("connection") {
            Some(e) => self.alerts_connection(&e.value),
            None => {
                self.missing(item, WHAT, "connection", "ops");
                None
            }
        };
        let path = match keys.get("path") {
            Some(e) => self.alerts_path(&e.value),
            None => {
                self.missing(item, WHAT, "path", "\"/jadpo/alerts\"");
                None
            }
        };
        if !ok || item.broken {
            return None;
        }
        Some(AlertRoute {
            connection: connection?,
            path: path?,
        })
    }

    fn alerts_connection(&mut self, e: &Expr) -> Option<String> {
        let name = match &e.kind {
            ExprKind::Path(p) if p.len() == 1 => &p[0],
            _ => {
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!(
                        "`connection:` takes a connection's name, as in `connection: ops`; found {}",
                        describe(e)
                    ),
                );
                return None;
            }
        };
        if self.connection_names.contains(&name.name) {
            if let Some(Some(d)) = self
                .connection_drivers
                .get(&name.name)
                .filter(|d| **d != Some(DriverName::Http))
            {
                self.err(
                    Code::ValueInvalid,
                    name.span,
                    format!(
                        "alerts are posted over HTTP, and `{}` publishes to a broker (`driver: {}`); \
                         name an HTTP connection",
                        name.name,
                        d.name()
                    ),
                );
                return None;
            }
            return Some(name.name.clone());
        }
        let help = self.unknown_connection_help(name);
        self.err(
            Code::AlertsConnectionUnknown,
            name.span,
            format!("no connection is named `{}`; {help}", name.name),
        );
        None
    }

    /// A close name when there is one; otherwise the connections there
    /// are, since alerts go to one of them and the reader must pick.
    fn unknown_connection_help(&self, name: &Ident) -> String {
        let names = &self.connection_names;
        hint(&name.name, names.iter().map(String::as_str), || {
            if names.is_empty() {
                return format!(
                    "the app declares none; declare it with `connection {} {{ base_url: ... }}`",
                    name.name
                );
            }
            let mut shown: Vec<String> = names.iter().take(NAMES_SHOWN).map(|n| format!("`{n}`")).collect();
            if names.len() > NAMES_SHOWN {
                shown.push(format!("{} others", names.len() - NAMES_SHOWN));
            }
            let are = if names.len() == 1 {
                "connection is"
            } else {
                "connections are"
            };
            format!("the app's {are} {}", and_list(&shown))
        })
    }

    /// The path is sent as written: there is nothing to interpolate, so
    /// braces would only look like placeholders that never fill.
    fn alerts_path(&mut self, e: &Expr) -> Option<String> {
        let ExprKind::Str(text) = &e.kind else {
            self.err(
                Code::AlertsPathInvalid,
                e.span,
                format!(
                    "`path:` takes a path in quotes, as in `path: \"/jadpo/alerts\"`; found {}",
                    describe(e)
                ),
            );
            return None;
        };
        let why = if !text.starts_with('/') {
            format!("`path:` starts with `/`: write {:?}", format!("/{text}"))
        } else if text.contains(['{', '}']) {
            format!(
                "`path:` is sent as written, so {text:?} cannot hold `{{` or `}}`: an alert has no parameters to put in a path"
            )
        } else if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            format!("`path:` cannot hold spaces or control characters, as {text:?} does; percent-encode them (`%20`)")
        } else {
            return Some(text.clone());
        };
        self.err(Code::AlertsPathInvalid, e.span, why);
        None
    }
}
