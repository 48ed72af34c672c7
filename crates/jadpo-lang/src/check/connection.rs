//! `connection NAME { ... }`

use super::values::{describe, number_text, path_text, rate_text};
use super::Checker;
use crate::app::{Connection, Driver, Value};
use crate::diagnostic::Code;
use crate::syntax::{Entry, Expr, ExprKind, Item, Number};
use jadpo_core::limit::Rate;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The form and bounds of `rate:`, the start of every
/// `connection.rate_invalid` message.
const RATE_TAKES: &str = "`rate:` takes calls per unit, as in `rate: 50/s` (units s, min, h), \
                          at least 1 an hour and at most 10000 a second";

impl Checker<'_> {
    pub(crate) fn connection(&mut self, item: &Item, entries: &[Entry]) -> Option<Connection> {
        let what = format!("connection `{}`", item.name.name);
        let allowed = [
            "driver",
            "base_url",
            "headers",
            "timeout",
            "retry",
            "signing_secret",
            "rate",
            "concurrency",
        ];
        let keys = self.keyed(&what, entries, &allowed, Code::KeyUnknown, Code::NameDuplicate);
        let ok = keys.len() == entries.len();

        let driver = match keys.get("driver") {
            None => Some(Driver::Http),
            Some(e) => self.driver(&e.value),
        };
        let base_url = match keys.get("base_url") {
            Some(e) => self.base_url(&e.value),
            None => {
                self.missing(item, &what, "base_url", "env(\"PAYMENTS_URL\")");
                None
            }
        };
        let headers = match keys.get("headers") {
            Some(e) => self.headers(&e.value),
            None => Some(BTreeMap::new()),
        };
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
        let rate = match keys.get("rate") {
            Some(e) => self.rate(&e.value).map(Some),
            None => Some(None),
        };
        let concurrency = match keys.get("concurrency") {
            Some(e) => self.concurrency(&e.value).map(Some),
            None => Some(None),
        };
        if !ok || item.broken {
            return None;
        }
        Some(Connection {
            name: item.name.name.clone(),
            driver: driver?,
            base_url: base_url?,
            headers: headers?,
            timeout: timeout?,
            attempts: attempts?,
            signing_secret: signing_secret?,
            rate: rate?,
            concurrency: concurrency?,
            span: item.span,
        })
    }

    /// `driver: http`, the only driver there is.
    fn driver(&mut self, e: &Expr) -> Option<Driver> {
        match &e.kind {
            ExprKind::Path(p) if path_text(p) == "http" => Some(Driver::Http),
            ExprKind::Str(s) if s == "http" => Some(Driver::Http),
            _ => {
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!("`driver:` takes `http`, the only driver; found {}", describe(e)),
                );
                None
            }
        }
    }

    /// `base_url:`, a setting that, when written as a literal, is an
    /// http:// or https:// URL.
    fn base_url(&mut self, e: &Expr) -> Option<Value> {
        let v = self.setting(e, "`base_url:`", true);
        if let Some(Value::String(url)) = &v {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!("`base_url:` starts with http:// or https://, not {url:?}"),
                );
                return None;
            }
        }
        v
    }

    /// `headers: { NAME: SETTING, ... }`; `None` when any header failed,
    /// after every one is checked.
    fn headers(&mut self, e: &Expr) -> Option<BTreeMap<String, Value>> {
        let ExprKind::Object(hs) = &e.kind else {
            self.err(
                Code::ValueInvalid,
                e.span,
                format!(
                    "`headers:` takes an object such as `{{ \"Authorization\": secret(\"TOKEN\") }}`; found {}",
                    describe(e)
                ),
            );
            return None;
        };
        let mut ok = true;
        let mut headers = BTreeMap::new();
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
        ok.then_some(headers)
    }

    /// `rate: 50/s`, `600/min`, `1/h`: a sustained rate, in the bounds of
    /// `jadpo_core::limit::Rate`, so the file and the engine cannot
    /// disagree. Every fault is `connection.rate_invalid`.
    fn rate(&mut self, e: &Expr) -> Option<Rate> {
        match rate_value(e) {
            Ok(rate) => Some(rate),
            Err(why) => {
                self.err(Code::ConnectionRateInvalid, e.span, format!("{RATE_TAKES}; {why}"));
                None
            }
        }
    }

    /// `concurrency: 10`: 1 to [`Connection::MAX_CONCURRENCY`].
    fn concurrency(&mut self, e: &Expr) -> Option<u32> {
        let max = Connection::MAX_CONCURRENCY;
        let found = match &e.kind {
            ExprKind::Number(n) => match n.as_int() {
                Some(v) if (1..=i128::from(max)).contains(&v) => return u32::try_from(v).ok(),
                _ => format!("`{}`", number_text(n)),
            },
            _ => describe(e),
        };
        self.err(
            Code::ConnectionConcurrencyInvalid,
            e.span,
            format!("`concurrency:` takes a whole number from 1 to {max}, not {found}"),
        );
        None
    }
}

/// The rate written, or why it is not one, as the end of a sentence.
fn rate_value(e: &Expr) -> Result<Rate, String> {
    let (count, unit) = match &e.kind {
        ExprKind::Rate { count, unit } => (count, unit),
        ExprKind::Number(n) => {
            let n = number_text(n);
            return Err(format!("`{n}` has no unit: write `{n}/s`, `{n}/min` or `{n}/h`"));
        }
        ExprKind::Str(s) => return Err(format!("found the string {s:?}: write the rate without quotes")),
        _ => return Err(format!("found {}", describe(e))),
    };
    let written = rate_text(e);
    let Some(unit) = unit else {
        return Err(format!("`{written}` has no unit after the `/`"));
    };
    let per = match unit.name.as_str() {
        "s" => Duration::from_secs(1),
        "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "m" => {
            return Err(format!(
                "`m` is not a unit of a rate in `{written}`; write `min` for a minute"
            ))
        }
        other => return Err(format!("`{other}` is not a unit of a rate in `{written}`")),
    };
    let refused = |why: &str| format!("`{written}` is refused: {why}");
    if count.negative {
        return Err(refused("a rate is at least 1 call per unit"));
    }
    let n = whole_count(count).ok_or_else(|| format!("`{}` is not a whole number of calls", number_text(count)))?;
    let n = u32::try_from(n).map_err(|_| refused(&format!("at most {} calls a second", Rate::MAX_PER_SECOND)))?;
    Rate::new(n, per).map_err(|why| refused(&why.0))
}

/// The count before the `/`, when it is a whole number without a unit.
fn whole_count(n: &Number) -> Option<u128> {
    if n.frac.is_some() || n.unit.is_some() {
        return None;
    }
    Some(n.int.parse::<u128>().unwrap_or(u128::MAX))
}
