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
        // The driver decides which keys the block takes, so it is read
        // first; a bad one is reported once, and the rest checked as HTTP.
        let driver_entry = entries.iter().find(|e| e.key.name == "driver");
        let driver = match driver_entry {
            None => Some(DriverName::Http),
            Some(e) => self.driver(&e.value),
        };
        // A driver that failed to read is reported once: its keys are then
        // every driver's, and none is missing.
        let allowed = driver.map_or(DriverName::ALL_KEYS, DriverName::keys);
        let (url_key, other_key) = match driver {
            Some(DriverName::Http) => ("base_url", "url"),
            _ => ("url", "base_url"),
        };
        // The other driver's address key is reported with what to write
        // instead, and read as the right one, so it is reported once.
        let misnamed = driver.and_then(|_| entries.iter().find(|e| e.key.name == other_key));
        if let Some(e) = misnamed {
            self.err(
                Code::KeyUnknown,
                e.key.span,
                format!(
                    "{what} has no key `{other_key}:`; `driver: {}` names where it connects with `{url_key}:`",
                    driver.map_or("http", DriverName::name)
                ),
            );
        }
        let checked: Vec<Entry> = entries
            .iter()
            .filter(|e| misnamed.is_none_or(|m| !std::ptr::eq(*e, m)))
            .cloned()
            .collect();
        let keys = self.keyed(&what, &checked, allowed, Code::KeyUnknown, Code::NameDuplicate);
        let ok = keys.len() == entries.len() && misnamed.is_none();
        let url = match (keys.get(url_key), misnamed, driver) {
            (Some(e), _, Some(d)) => self.url(&e.value, url_key, d),
            (None, Some(e), Some(d)) => self.url(&e.value, url_key, d),
            (_, _, None) => None,
            (None, None, Some(d)) => {
                let example = match d {
                    DriverName::Http => "env(\"PAYMENTS_URL\")",
                    _ => "env(\"BROKER_URL\")",
                };
                self.missing(item, &what, url_key, example);
                None
            }
        };
        let exchange = match keys.get("exchange") {
            Some(e) => self.exchange(&e.value),
            None => Some(String::new()),
        };
        let max_len = match keys.get("max_len") {
            Some(e) => self.max_len(&e.value).map(Some),
            None => Some(None),
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
        let driver = match driver? {
            DriverName::Http => Driver::Http,
            DriverName::Amqp => Driver::Amqp { exchange: exchange? },
            DriverName::Nats => Driver::Nats,
            DriverName::Redis => Driver::Redis { max_len: max_len? },
            DriverName::Mqtt => Driver::Mqtt,
        };
        Some(Connection {
            name: item.name.name.clone(),
            driver,
            url: url?,
            headers: headers?,
            timeout: timeout?,
            attempts: attempts?,
            signing_secret: signing_secret?,
            rate: rate?,
            concurrency: concurrency?,
            span: item.span,
        })
    }

    /// `driver: http`, `amqp`, `nats`, `redis` or `mqtt`.
    fn driver(&mut self, e: &Expr) -> Option<DriverName> {
        if let Some(name) = DriverName::written(e) {
            return Some(name);
        }
        self.err(
            Code::ValueInvalid,
            e.span,
            format!("`driver:` takes http, amqp, nats, redis or mqtt; found {}", describe(e)),
        );
        None
    }

    /// `base_url:` (HTTP) or `url:` (a broker): a setting that, when
    /// written as a literal, has the driver's scheme.
    fn url(&mut self, e: &Expr, key: &str, driver: DriverName) -> Option<Value> {
        let v = self.setting(e, &format!("`{key}:`"), true);
        if let Some(Value::String(url)) = &v {
            let schemes = driver.schemes();
            if !schemes.iter().any(|s| url.starts_with(&format!("{s}://"))) {
                let list: Vec<String> = schemes.iter().map(|s| format!("{s}://")).collect();
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!("`{key}:` starts with {}, not {url:?}", list.join(" or ")),
                );
                return None;
            }
        }
        v
    }

    /// `exchange: "orders"`: the AMQP exchange publishes go to; `""` is the
    /// default exchange, which routes by queue name.
    fn exchange(&mut self, e: &Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Str(s)
                if s.len() <= 127 && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)) =>
            {
                Some(s.clone())
            }
            _ => {
                self.err(
                    Code::ValueInvalid,
                    e.span,
                    format!(
                        "`exchange:` takes an exchange's name in quotes (letters, digits, `-`, `_`, `.`, `:`; at most 127), \
                         as in `exchange: \"orders\"`; found {}",
                        describe(e)
                    ),
                );
                None
            }
        }
    }

    /// `max_len: 100000`: a Redis stream trimmed to about that many
    /// entries on each publish.
    fn max_len(&mut self, e: &Expr) -> Option<u64> {
        if let ExprKind::Number(n) = &e.kind {
            if let Some(v) = n.as_int().filter(|v| (1..=i128::from(u32::MAX)).contains(v)) {
                return u64::try_from(v).ok();
            }
        }
        self.err(
            Code::ValueInvalid,
            e.span,
            format!(
                "`max_len:` takes a whole number of entries from 1 to {}, as in `max_len: 100000`; found {}",
                u32::MAX,
                describe(e)
            ),
        );
        None
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

/// A `driver:` as written, before its own settings are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriverName {
    Http,
    Amqp,
    Nats,
    Redis,
    Mqtt,
}

impl DriverName {
    /// The driver a `driver:` value names, bare or quoted.
    pub(crate) fn written(e: &Expr) -> Option<DriverName> {
        match &e.kind {
            ExprKind::Path(p) => DriverName::from_name(&path_text(p)),
            ExprKind::Str(s) => DriverName::from_name(s),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            DriverName::Http => "http",
            DriverName::Amqp => "amqp",
            DriverName::Nats => "nats",
            DriverName::Redis => "redis",
            DriverName::Mqtt => "mqtt",
        }
    }

    fn from_name(name: &str) -> Option<DriverName> {
        Some(match name {
            "http" => DriverName::Http,
            "amqp" => DriverName::Amqp,
            "nats" => DriverName::Nats,
            "redis" => DriverName::Redis,
            "mqtt" => DriverName::Mqtt,
            _ => return None,
        })
    }

    /// Every key of every driver.
    const ALL_KEYS: &'static [&'static str] = &[
        "driver",
        "base_url",
        "url",
        "exchange",
        "max_len",
        "headers",
        "timeout",
        "retry",
        "signing_secret",
        "rate",
        "concurrency",
    ];

    /// Every key a connection of this driver takes, in the order a
    /// message lists them.
    fn keys(self) -> &'static [&'static str] {
        match self {
            DriverName::Http => &[
                "driver",
                "base_url",
                "headers",
                "timeout",
                "retry",
                "signing_secret",
                "rate",
                "concurrency",
            ],
            DriverName::Amqp => &[
                "driver",
                "url",
                "exchange",
                "headers",
                "timeout",
                "retry",
                "signing_secret",
                "rate",
                "concurrency",
            ],
            DriverName::Nats | DriverName::Mqtt => &[
                "driver",
                "url",
                "headers",
                "timeout",
                "retry",
                "signing_secret",
                "rate",
                "concurrency",
            ],
            DriverName::Redis => &[
                "driver",
                "url",
                "max_len",
                "headers",
                "timeout",
                "retry",
                "signing_secret",
                "rate",
                "concurrency",
            ],
        }
    }

    /// The URL schemes its `url:` (or `base_url:`) may have.
    fn schemes(self) -> &'static [&'static str] {
        match self {
            DriverName::Http => &["http", "https"],
            DriverName::Amqp => &["amqp", "amqps"],
            DriverName::Nats => &["nats", "tls"],
            DriverName::Redis => &["redis", "rediss"],
            DriverName::Mqtt => &["mqtt", "mqtts"],
        }
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
