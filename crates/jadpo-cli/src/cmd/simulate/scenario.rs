//! A scenario file (docs/simulate.md): TOML read into plain data, every
//! problem reported at once with a stable code, the place it is at and
//! what to write instead, as for an app file.

use super::timeline::{duration, Answer, Latency, Phase, State};
use jadpo_lang::{App, Span};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

/// The most processes a scenario may run.
pub(crate) const MAX_PROCESSES: i64 = 64;
/// The most deliveries one process may run at once.
pub(crate) const MAX_CONCURRENCY: i64 = 10_000;
/// The longest a scenario may last.
pub(crate) const MAX_LENGTH: Duration = Duration::from_secs(366 * 86_400);

/// A scenario, checked against its app.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub seed: Option<u64>,
    pub processes: usize,
    pub concurrency: usize,
    /// Where the simulation stops; `None`: when every delivery has
    /// finished.
    pub until: Option<Duration>,
    pub traffic: Vec<Traffic>,
    /// Each connection's timeline, in order of `from`; a connection not
    /// named is up all along.
    pub connections: BTreeMap<String, Vec<Phase>>,
    pub crashes: Vec<Crash>,
}

/// Events of one name arriving: at a rate, in a burst, or as a replay of
/// counts per minute.
#[derive(Clone, Debug)]
pub(crate) struct Traffic {
    pub event: String,
    pub arrivals: Arrivals,
    /// Fields set in every event; the others are made from the event's
    /// number (docs/simulate.md, "Payloads").
    pub payload: serde_json::Map<String, serde_json::Value>,
    /// The values made from an event's number wrap after this many, so
    /// that events share keys.
    pub keys: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Arrivals {
    /// `n` events every `per`, from `from` for `length`.
    Rate {
        n: u64,
        per: Duration,
        from: Duration,
        length: Duration,
    },
    /// `count` events at once, at `at`.
    Burst { count: u64, at: Duration },
    /// One count a minute from `from`, minute by minute.
    Replay { counts: Vec<u64>, from: Duration },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Crash {
    pub at: Duration,
    /// From 1.
    pub process: usize,
    pub back_after: Duration,
}

/// One problem with a scenario.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Problem {
    pub code: &'static str,
    pub span: Span,
    pub message: String,
}

fn problem(code: &'static str, span: std::ops::Range<usize>, message: impl Into<String>) -> Problem {
    Problem {
        code,
        span: Span::new(span.start, span.end),
        message: message.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    seed: Option<u64>,
    processes: Option<Spanned<i64>>,
    concurrency: Option<Spanned<i64>>,
    until: Option<Spanned<String>>,
    #[serde(default)]
    traffic: Vec<RawTraffic>,
    #[serde(default)]
    connections: BTreeMap<String, Spanned<Vec<RawPhase>>>,
    #[serde(default)]
    crash: Vec<RawCrash>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraffic {
    event: Spanned<String>,
    rate: Option<Spanned<String>>,
    count: Option<Spanned<i64>>,
    csv: Option<Spanned<String>>,
    from: Option<Spanned<String>>,
    at: Option<Spanned<String>>,
    #[serde(rename = "for")]
    length: Option<Spanned<String>>,
    payload: Option<Spanned<toml::Table>>,
    keys: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    from: Spanned<String>,
    state: Spanned<String>,
    latency: Option<Spanned<String>>,
    answer: Option<Spanned<String>>,
    retry_after: Option<Spanned<String>>,
    fail: Option<Spanned<BTreeMap<String, f64>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCrash {
    at: Spanned<String>,
    process: Option<Spanned<i64>>,
    back_after: Option<Spanned<String>>,
}

/// `5000/min`, `100/s`, `20/h`, `1000/d`: a count and its period.
fn rate(text: &str) -> Option<(u64, Duration)> {
    let (n, per) = text.trim().split_once('/')?;
    let n: u64 = n.trim().parse().ok().filter(|n| *n > 0)?;
    let per = match per.trim() {
        "s" => Duration::from_secs(1),
        "m" | "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3_600),
        "d" => Duration::from_secs(86_400),
        _ => return None,
    };
    Some((n, per))
}

/// Reads and checks a scenario for `app`. `dir` is where relative `csv`
/// paths are read from.
pub(crate) fn parse(source: &str, app: &App, dir: &Path) -> Result<Scenario, Vec<Problem>> {
    let raw: RawScenario = match toml::from_str(source) {
        Ok(raw) => raw,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            return Err(vec![problem("scenario.invalid", span, e.message().trim().to_owned())]);
        }
    };
    let mut problems = Vec::new();
    let mut p = Checker {
        problems: &mut problems,
    };
    let processes = p
        .count(raw.processes.as_ref(), 1, MAX_PROCESSES, "processes")
        .unwrap_or(1);
    let concurrency = p
        .count(raw.concurrency.as_ref(), 1, MAX_CONCURRENCY, "concurrency")
        .unwrap_or(jadpo_runtime::WorkerConfig::default().concurrency);
    let until = raw.until.as_ref().and_then(|u| p.duration(u, "until"));
    let traffic = raw.traffic.iter().filter_map(|t| p.traffic(t, app, dir)).collect();
    let mut connections = BTreeMap::new();
    for (name, phases) in &raw.connections {
        let Some(conn) = app.connections.get(name) else {
            let names: Vec<&str> = app.connections.keys().map(String::as_str).collect();
            p.push(
                "scenario.connection_unknown",
                phases.span(),
                format!(
                    "the app has no connection `{name}`: its connections are {}",
                    names.join(", ")
                ),
            );
            continue;
        };
        let broker = conn.driver.broker().is_some();
        let checked: Vec<Phase> = phases.get_ref().iter().filter_map(|r| p.phase(r, broker)).collect();
        if checked.len() == phases.get_ref().len() {
            if let Some(w) = checked.windows(2).position(|w| w[1].from <= w[0].from) {
                p.push(
                    "scenario.timeline_order",
                    phases.get_ref()[w + 1].from.span(),
                    format!(
                        "`{name}`'s phases must start later and later: this one starts no later than the one before"
                    ),
                );
            }
        }
        connections.insert(name.clone(), checked);
    }
    let crashes = raw.crash.iter().filter_map(|c| p.crash(c, processes)).collect();
    if raw.traffic.is_empty() {
        p.push(
            "scenario.traffic_missing",
            0..0,
            "a scenario needs at least one [[traffic]] table: which events arrive, and how often",
        );
    }
    if problems.is_empty() {
        Ok(Scenario {
            seed: raw.seed,
            processes,
            concurrency,
            until,
            traffic,
            connections,
            crashes,
        })
    } else {
        problems.sort_by_key(|p| p.span.start);
        Err(problems)
    }
}

struct Checker<'a> {
    problems: &'a mut Vec<Problem>,
}

impl Checker<'_> {
    fn push(&mut self, code: &'static str, span: std::ops::Range<usize>, message: impl Into<String>) {
        self.problems.push(problem(code, span, message));
    }

    fn count(&mut self, v: Option<&Spanned<i64>>, min: i64, max: i64, what: &str) -> Option<usize> {
        let v = v?;
        let n = *v.get_ref();
        if (min..=max).contains(&n) {
            Some(usize::try_from(n).unwrap_or(1))
        } else {
            self.push(
                "scenario.number_invalid",
                v.span(),
                format!("`{what}` is {n}: a whole number from {min} to {max}"),
            );
            None
        }
    }

    fn duration(&mut self, v: &Spanned<String>, what: &str) -> Option<Duration> {
        match duration(v.get_ref()).filter(|d| *d <= MAX_LENGTH) {
            Some(d) => Some(d),
            None => {
                self.push(
                    "scenario.duration_invalid",
                    v.span(),
                    format!(
                        "`{what}` is {:?}: a duration such as \"500ms\", \"30s\", \"5m\", \"2h\" or \"7d\", at most a year",
                        v.get_ref()
                    ),
                );
                None
            }
        }
    }

    fn traffic(&mut self, t: &RawTraffic, app: &App, dir: &Path) -> Option<Traffic> {
        let name = t.event.get_ref();
        let Some(event) = app.events.get(name) else {
            let names: Vec<&str> = app.events.keys().map(String::as_str).collect();
            self.push(
                "scenario.event_unknown",
                t.event.span(),
                format!("the app has no event `{name}`: its events are {}", names.join(", ")),
            );
            return None;
        };
        let from = t
            .from
            .as_ref()
            .map_or(Some(Duration::ZERO), |f| self.duration(f, "from"));
        let shapes = [t.rate.is_some(), t.count.is_some(), t.csv.is_some()];
        let arrivals = match shapes {
            [true, false, false] => {
                let r = t.rate.as_ref()?;
                let Some((n, per)) = rate(r.get_ref()) else {
                    self.push(
                        "scenario.rate_invalid",
                        r.span(),
                        format!(
                            "`rate` is {:?}: a count over a period, such as \"5000/min\", \"100/s\", \"20/h\" or \"1000/d\"",
                            r.get_ref()
                        ),
                    );
                    return None;
                };
                let Some(length) = &t.length else {
                    self.push(
                        "scenario.length_missing",
                        t.event.span(),
                        "a `rate` needs `for`: how long events arrive at that rate, such as \"6h\"",
                    );
                    return None;
                };
                Arrivals::Rate {
                    n,
                    per,
                    from: from?,
                    length: self.duration(length, "for")?,
                }
            }
            [false, true, false] => {
                let c = t.count.as_ref()?;
                let count = self.count(Some(c), 1, 100_000_000, "count")? as u64;
                let at = match &t.at {
                    Some(at) => self.duration(at, "at")?,
                    None => from?,
                };
                Arrivals::Burst { count, at }
            }
            [false, false, true] => {
                let csv = t.csv.as_ref()?;
                Arrivals::Replay {
                    counts: self.csv(csv, dir)?,
                    from: from?,
                }
            }
            _ => {
                self.push(
                    "scenario.arrivals_invalid",
                    t.event.span(),
                    "a [[traffic]] table takes one of `rate` (with `for`), `count` (a burst, with `at`) or `csv` (a count per minute)",
                );
                return None;
            }
        };
        let payload = match &t.payload {
            None => serde_json::Map::new(),
            Some(p) => self.payload(p, event)?,
        };
        let keys = match &t.keys {
            None => None,
            Some(k) => Some(self.count(Some(k), 1, 1_000_000_000, "keys")? as u64),
        };
        Some(Traffic {
            event: name.clone(),
            arrivals,
            payload,
            keys,
        })
    }

    /// A replay's counts: one whole number a line (a header line that is
    /// not a number is skipped; with commas, the last column).
    fn csv(&mut self, path: &Spanned<String>, dir: &Path) -> Option<Vec<u64>> {
        let file = dir.join(path.get_ref());
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                self.push(
                    "scenario.csv_unreadable",
                    path.span(),
                    format!("cannot read {}: {e}", file.display()),
                );
                return None;
            }
        };
        let mut counts = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let cell = line.rsplit(',').next().unwrap_or("").trim();
            match cell.parse::<u64>() {
                Ok(n) => counts.push(n),
                Err(_) if i == 0 || cell.is_empty() => {}
                Err(_) => {
                    self.push(
                        "scenario.csv_invalid",
                        path.span(),
                        format!(
                            "line {} of {} is {line:?}: each line is a count of events for one minute",
                            i + 1,
                            file.display()
                        ),
                    );
                    return None;
                }
            }
        }
        Some(counts)
    }

    fn payload(
        &mut self,
        p: &Spanned<toml::Table>,
        event: &jadpo_lang::Event,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        let mut out = serde_json::Map::new();
        let mut ok = true;
        for (name, value) in p.get_ref() {
            let Some(field) = event.field(name) else {
                let names: Vec<&str> = event.fields.iter().map(|f| f.name.as_str()).collect();
                self.push(
                    "scenario.payload_field_unknown",
                    p.span(),
                    format!(
                        "`{}` has no field `{name}`: its fields are {}",
                        event.name,
                        names.join(", ")
                    ),
                );
                ok = false;
                continue;
            };
            let json = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
            use jadpo_lang::Type;
            let fits = match field.ty {
                Type::String => json.is_string(),
                Type::Int => json.is_i64() || json.is_u64(),
                Type::Float => json.is_number(),
                Type::Bool => json.is_boolean(),
                Type::Object => json.is_object(),
                Type::List => json.is_array(),
            };
            if !fits {
                self.push(
                    "scenario.payload_type",
                    p.span(),
                    format!(
                        "`{}.{name}` is {}: the payload gives it {json}",
                        event.name,
                        field.ty.name()
                    ),
                );
                ok = false;
                continue;
            }
            out.insert(name.clone(), json);
        }
        ok.then_some(out)
    }

    fn phase(&mut self, r: &RawPhase, broker: bool) -> Option<Phase> {
        let from = self.duration(&r.from, "from");
        let state = match r.state.get_ref().as_str() {
            "up" => State::Up,
            "down" => State::Down,
            other => {
                self.push(
                    "scenario.state_invalid",
                    r.state.span(),
                    format!("`state` is {other:?}: \"up\" (answers, `latency` and `fail` apply) or \"down\" (every call ends as `answer` says)"),
                );
                return None;
            }
        };
        let latency = match &r.latency {
            None => Some(Latency::DEFAULT),
            Some(l) => match Latency::parse(l.get_ref()) {
                Some(l) => Some(l),
                None => {
                    self.push(
                        "scenario.latency_invalid",
                        l.span(),
                        format!(
                            "`latency` is {:?}: a duration (\"80ms\") or a range of them (\"50ms..300ms\"), the first no longer than the second",
                            l.get_ref()
                        ),
                    );
                    None
                }
            },
        };
        let answer = match (&r.answer, state) {
            (Some(a), State::Down) => self.answer(a, broker),
            (Some(a), State::Up) => {
                self.push(
                    "scenario.answer_unused",
                    a.span(),
                    "`answer` is for a \"down\" phase; an \"up\" phase fails some calls with `fail`",
                );
                None
            }
            (None, _) => Some(if broker { Answer::Refused } else { Answer::Status(503) }),
        };
        let retry_after = match &r.retry_after {
            None => None,
            Some(v) => Some(self.duration(v, "retry_after")?),
        };
        let mut fail = Vec::new();
        if let Some(f) = &r.fail {
            let mut total = 0.0;
            for (name, share) in f.get_ref() {
                let answer = self.answer(&Spanned::new(f.span(), name.clone()), broker);
                if !(0.0..=1.0).contains(share) {
                    self.push(
                        "scenario.fraction_invalid",
                        f.span(),
                        format!("`fail.{name}` is {share}: a fraction of the calls, from 0 to 1"),
                    );
                }
                total += share;
                if let Some(a) = answer {
                    fail.push((a, *share));
                }
            }
            if total > 1.0 + 1e-9 {
                self.push(
                    "scenario.fraction_invalid",
                    f.span(),
                    format!("the `fail` fractions add up to {total}: at most 1"),
                );
            }
        }
        Some(Phase {
            from: from?,
            state,
            latency: latency?,
            answer: answer?,
            retry_after,
            fail,
        })
    }

    fn answer(&mut self, a: &Spanned<String>, broker: bool) -> Option<Answer> {
        let parsed = Answer::parse(a.get_ref(), broker);
        if parsed.is_none() {
            let allowed = if broker {
                "\"refused\", \"timeout\", \"overloaded\", \"no_target\", \"rejected\" or \"unauthorized\""
            } else {
                "an HTTP status from 400 to 599 (\"503\"), \"timeout\" or \"refused\""
            };
            self.push(
                "scenario.answer_invalid",
                a.span(),
                format!("{:?} is not an answer of this connection: {allowed}", a.get_ref()),
            );
        }
        parsed
    }

    fn crash(&mut self, c: &RawCrash, processes: usize) -> Option<Crash> {
        let at = self.duration(&c.at, "at");
        let process = match &c.process {
            None => Some(1),
            Some(p) => self.count(Some(p), 1, processes as i64, "process"),
        };
        let back_after = match &c.back_after {
            None => Some(Duration::from_secs(30)),
            Some(b) => self.duration(b, "back_after"),
        };
        Some(Crash {
            at: at?,
            process: process?,
            back_after: back_after?,
        })
    }
}

#[cfg(test)]
mod tests;
