//! Durations, connection settings and `retry:` blocks.

use super::Checker;
use crate::app::{Value, MAX_TIMEOUT};
use crate::diagnostic::Code;
use crate::syntax::{Entry, Expr, ExprKind, Number};
use jadpo_core::{Budget, BudgetError};
use std::time::Duration;

const UNITS: &str = "ms, s, m, h or d";

/// Why a value is not a duration, as the end of a sentence.
fn parse_duration(e: &Expr) -> Result<Duration, String> {
    let ExprKind::Number(n) = &e.kind else {
        return Err(format!(
            "expected a duration, a whole number and a unit ({UNITS}) such as `30s` or `3d`; found {}",
            describe(e)
        ));
    };
    let Some(unit) = &n.unit else {
        return Err(format!(
            "`{}` has no unit; write a unit ({UNITS}) after the number, as in `{}s`",
            number_text(n),
            n.int
        ));
    };
    let millis_per: u64 = match unit.as_str() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "`{unit}` is not a unit of time in `{}`; the units are {UNITS}",
                number_text(n)
            ))
        }
    };
    if n.negative {
        return Err(format!("`{}` is negative; a duration is at least 0", number_text(n)));
    }
    if n.frac.is_some() {
        return Err(format!(
            "`{}` is not a whole number; use a smaller unit, as in `90m` for an hour and a half",
            number_text(n)
        ));
    }
    n.int
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(millis_per))
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{}` is too long to be a duration", number_text(n)))
}

pub(crate) fn number_text(n: &Number) -> String {
    format!(
        "{}{}{}{}",
        if n.negative { "-" } else { "" },
        n.int,
        n.frac.as_ref().map(|f| format!(".{f}")).unwrap_or_default(),
        n.unit.as_deref().unwrap_or("")
    )
}

/// A short description of a value, for "found ..." in messages.
pub(crate) fn describe(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Str(s) => format!("the string {s:?}"),
        ExprKind::Number(n) => format!("`{}`", number_text(n)),
        ExprKind::Rate { .. } => format!("`{}`", rate_text(e)),
        ExprKind::Bool(b) => format!("`{b}`"),
        ExprKind::Object(_) => "an object `{ ... }`".to_string(),
        ExprKind::List(_) => "a list `[ ... ]`".to_string(),
        ExprKind::Path(p) => format!("`{}`", path_text(p)),
        ExprKind::Call { callee, .. } => format!("`{}(...)`", path_text(callee)),
    }
}

/// A rate as written, without the spaces around its `/`: `50/s`.
pub(crate) fn rate_text(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Rate { count, unit } => {
            format!(
                "{}/{}",
                number_text(count),
                unit.as_ref().map_or("", |u| u.name.as_str())
            )
        }
        _ => String::new(),
    }
}

pub(crate) fn path_text(p: &[crate::syntax::Ident]) -> String {
    p.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(".")
}

/// Pretty-prints a duration in the largest unit that divides it.
pub(crate) fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    for (unit, per) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= per && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

impl Checker<'_> {
    /// A time limit: more than 0 and at most `max`.
    pub(crate) fn time_limit(&mut self, e: &Expr, what: &str, max: Duration) -> Option<Duration> {
        let d = match parse_duration(e) {
            Ok(d) => d,
            Err(why) => {
                self.err(Code::DurationInvalid, e.span, format!("{what}: {why}"));
                return None;
            }
        };
        if d.is_zero() || d > max {
            self.err(
                Code::DurationInvalid,
                e.span,
                format!(
                    "{what} takes more than 0s and at most {}, not {}",
                    duration_text(max),
                    duration_text(d)
                ),
            );
            return None;
        }
        Some(d)
    }

    pub(crate) fn run_timeout(&mut self, e: &Expr) -> Option<Duration> {
        self.time_limit(e, "`timeout:`", MAX_TIMEOUT)
    }

    /// `base_url:`, a header, `signing_secret:`: a string, or a name to
    /// read at start with `env("X")` or `secret("X")`.
    pub(crate) fn setting(&mut self, e: &Expr, what: &str, literal_allowed: bool) -> Option<Value> {
        match &e.kind {
            ExprKind::Str(s) if literal_allowed => return Some(Value::String(s.clone())),
            ExprKind::Call { callee, args } if callee.len() == 1 => {
                let f = callee[0].name.as_str();
                if f == "env" || f == "secret" {
                    if let [arg] = args.as_slice() {
                        if let (None, ExprKind::Str(name)) = (&arg.name, &arg.value.kind) {
                            if valid_env_name(name) {
                                return Some(if f == "env" {
                                    Value::Env(name.clone())
                                } else {
                                    Value::Secret(name.clone())
                                });
                            }
                        }
                    }
                    self.err(
                        Code::ValueInvalid,
                        e.span,
                        format!(
                            "`{f}(...)` takes one variable name in quotes, letters, digits and `_`, as in `{f}(\"PAYMENTS_TOKEN\")`"
                        ),
                    );
                    return None;
                }
            }
            _ => {}
        }
        let wanted = if literal_allowed {
            "a string, `env(\"NAME\")` or `secret(\"NAME\")`"
        } else {
            "`secret(\"NAME\")` or `env(\"NAME\")`, so the secret stays out of the file"
        };
        self.err(
            Code::ValueInvalid,
            e.span,
            format!("{what} takes {wanted}; found {}", describe(e)),
        );
        None
    }

    /// A subscriber's `retry: { attempts: N  within: D }`. Every fault in it
    /// is `subscriber.retry_invalid`; the ranges are `jadpo_core::Budget`'s,
    /// so the file and the engine cannot disagree.
    pub(crate) fn budget(&mut self, e: &Expr) -> Option<Budget> {
        const CODE: Code = Code::SubscriberRetryInvalid;
        let ExprKind::Object(entries) = &e.kind else {
            self.err(
                CODE,
                e.span,
                format!(
                    "`retry:` takes an object such as `{{ attempts: 20  within: 3d }}`; found {}",
                    describe(e)
                ),
            );
            return None;
        };
        let keys = self.keyed("`retry:`", entries, &["attempts", "within"], CODE, CODE);
        let mut ok = keys.len() == entries.len();
        let mut attempts = u64::from(Budget::DEFAULT.attempts());
        let mut within = Budget::DEFAULT.within();
        if let Some(entry) = keys.get("attempts") {
            match self.attempts(entry, CODE, "`attempts:` takes a whole number from 1 to 100") {
                Some(n) => match Budget::new(n, Budget::DEFAULT.within()) {
                    Ok(_) => attempts = n,
                    Err(why) => {
                        self.err(CODE, entry.value.span, budget_message(why));
                        ok = false;
                    }
                },
                None => ok = false,
            }
        }
        if let Some(entry) = keys.get("within") {
            match parse_duration(&entry.value) {
                Ok(d) => match Budget::new(u64::from(Budget::DEFAULT.attempts()), d) {
                    Ok(_) => within = d,
                    Err(why) => {
                        self.err(CODE, entry.value.span, budget_message(why));
                        ok = false;
                    }
                },
                Err(why) => {
                    self.err(CODE, entry.value.span, format!("`within:`: {why}"));
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        Budget::new(attempts, within).ok()
    }

    /// A whole non-negative number, or a diagnostic with `code`.
    fn attempts(&mut self, entry: &Entry, code: Code, takes: &str) -> Option<u64> {
        let found = match &entry.value.kind {
            ExprKind::Number(n) => match n.as_int() {
                Some(v) if v >= 0 => return Some(u64::try_from(v).unwrap_or(u64::MAX)),
                _ => format!("`{}`", number_text(n)),
            },
            _ => describe(&entry.value),
        };
        self.err(code, entry.value.span, format!("{takes}, not {found}"));
        None
    }

    /// A connection's `retry: { attempts: N }`: how many times one call may
    /// be sent within a delivery attempt.
    pub(crate) fn connection_attempts(&mut self, e: &Expr) -> Option<u32> {
        const CODE: Code = Code::ConnectionRetryInvalid;
        let max = crate::app::Connection::MAX_ATTEMPTS;
        let ExprKind::Object(entries) = &e.kind else {
            self.err(
                CODE,
                e.span,
                format!(
                    "a connection's `retry:` takes an object such as `{{ attempts: 3 }}`; found {}",
                    describe(e)
                ),
            );
            return None;
        };
        let keys = self.keyed("a connection's `retry:`", entries, &["attempts"], CODE, CODE);
        let entry = keys.get("attempts")?;
        let takes = format!("a connection's `attempts:` takes a whole number from 1 to {max}");
        let n = self.attempts(entry, CODE, &takes)?;
        match u32::try_from(n) {
            Ok(n) if (1..=max).contains(&n) => Some(n),
            _ => {
                self.err(CODE, entry.value.span, format!("{takes}, not {n}"));
                None
            }
        }
    }

    /// `every:` on a schedule: more than 0, no upper bound.
    pub(crate) fn every(&mut self, e: &Expr) -> Option<Duration> {
        match parse_duration(e) {
            Ok(d) if d.is_zero() => {
                self.err(
                    Code::DurationInvalid,
                    e.span,
                    "`every:` takes more than 0s; a schedule cannot run continuously".to_string(),
                );
                None
            }
            Ok(d) => Some(d),
            Err(why) => {
                self.err(Code::DurationInvalid, e.span, format!("`every:`: {why}"));
                None
            }
        }
    }
}

fn budget_message(why: BudgetError) -> String {
    match why {
        BudgetError::WithinOutOfRange(d) => format!(
            "`within:` takes more than 0s and at most {}, not {}",
            duration_text(Budget::MAX_WITHIN),
            duration_text(d)
        ),
        other => other.to_string(),
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_their_largest_whole_unit() {
        assert_eq!(duration_text(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(duration_text(Duration::from_secs(90)), "90s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
        assert_eq!(duration_text(Duration::ZERO), "0s");
    }
}
