//! `connection NAME { ... }`

use super::values::{describe, path_text};
use super::Checker;
use crate::app::{Connection, Driver};
use crate::diagnostic::Code;
use crate::syntax::{Entry, ExprKind, Item};
use std::collections::BTreeSet;

impl Checker<'_> {
    pub fn connection(&mut self, item: &Item, entries: &[Entry]) -> Option<Connection> {
        let what = format!("connection `{}`", item.name.name);
        let allowed = ["driver", "base_url", "headers", "timeout", "retry", "signing_secret"];
        let keys = self.keyed(&what, entries, &allowed, Code::KeyUnknown, Code::NameDuplicate);
        let mut ok = keys.len() == entries.len();

        let driver = match keys.get("driver") {
            None => Some(Driver::Http),
            Some(e) => match &e.value.kind {
                ExprKind::Path(p) if path_text(p) == "http" => Some(Driver::Http),
                ExprKind::Str(s) if s == "http" => Some(Driver::Http),
                _ => {
                    self.err(
                        Code::ValueInvalid,
                        e.value.span,
                        format!("`driver:` takes `http`, the only driver; found {}", describe(&e.value)),
                    );
                    None
                }
            },
        };
        let base_url = match keys.get("base_url") {
            Some(e) => {
                let v = self.setting(&e.value, "`base_url:`", true);
                if let Some(crate::app::Value::String(url)) = &v {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        self.err(
                            Code::ValueInvalid,
                            e.value.span,
                            format!("`base_url:` starts with http:// or https://, not {url:?}"),
                        );
                        ok = false;
                    }
                }
                v
            }
            None => {
                self.missing(item, &what, "base_url", "env(\"PAYMENTS_URL\")");
                None
            }
        };
        let mut headers = std::collections::BTreeMap::new();
        if let Some(e) = keys.get("headers") {
            match &e.value.kind {
                ExprKind::Object(hs) => {
                    let mut seen: BTreeSet<String> = BTreeSet::new();
                    for h in hs {
                        if !seen.insert(h.key.name.to_ascii_lowercase()) {
                            self.err(
                                Code::NameDuplicate,
                                h.key.span,
                                format!(
                                    "header `{}` is given twice (header names ignore case); keep one",
                                    h.key.name
                                ),
                            );
                            ok = false;
                            continue;
                        }
                        let what = format!("header `{}`", h.key.name);
                        match self.setting(&h.value, &what, true) {
                            Some(v) => {
                                headers.insert(h.key.name.clone(), v);
                            }
                            None => ok = false,
                        }
                    }
                }
                _ => {
                    self.err(
                        Code::ValueInvalid,
                        e.value.span,
                        format!(
                            "`headers:` takes an object such as `{{ \"Authorization\": secret(\"TOKEN\") }}`; found {}",
                            describe(&e.value)
                        ),
                    );
                    ok = false;
                }
            }
        }
        let timeout = match keys.get("timeout") {
            Some(e) => self.time_limit(&e.value, "a connection's `timeout:`", Connection::MAX_TIMEOUT),
            None => Some(Connection::DEFAULT_TIMEOUT),
        };
        let attempts = match keys.get("retry") {
            Some(e) => self.connection_attempts(&e.value),
            None => Some(1),
        };
        let signing_secret = match keys.get("signing_secret") {
            Some(e) => self.setting(&e.value, "`signing_secret:`", false).map(Some),
            None => Some(None),
        };
        if !ok || item.broken {
            return None;
        }
        Some(Connection {
            name: item.name.name.clone(),
            driver: driver?,
            base_url: base_url?,
            headers,
            timeout: timeout?,
            attempts: attempts?,
            signing_secret: signing_secret?,
            span: item.span,
        })
    }
}
