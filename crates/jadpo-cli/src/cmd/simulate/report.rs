//! What `jadpo simulate` reports (docs/simulate.md, "The report"): per
//! subscriber, how its deliveries ended and how long they took; per
//! connection, the sends in each phase of its timeline, its breaker's
//! openings, probes and time open, and its alerts; the backlog over time.
//! Built from the counts the simulation kept as each delivery finished,
//! and its store's unfinished ones, once it has ended.

use super::provider::Counted;
use super::timeline::{Phase, State};
use jadpo_core::{Timestamp, Transition};
use jadpo_sim::stats::ScheduleEnds;
use jadpo_sim::Sim;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SubscriberReport {
    pub name: String,
    pub deliveries: u64,
    pub delivered: u64,
    /// By failure code.
    pub failed: BTreeMap<String, u64>,
    pub parked: BTreeMap<String, u64>,
    /// Not finished when the simulation stopped.
    pub unfinished: u64,
    /// Attempts a finished delivery took, and how many took that many.
    pub attempts: BTreeMap<u32, u64>,
    /// From the emit to the success, ms: p50, p99, max.
    pub to_success_ms: Option<[u64; 3]>,
    /// Failed without ever running: their budget's `within:` passed while
    /// they waited (for a rate limit, a key, or the backlog).
    pub expired_unrun: u64,
    /// Finished after being held behind a breaker at some point.
    pub held: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConnectionReport {
    pub name: String,
    pub phases: Vec<(Phase, u64, u64)>,
    pub openings: u64,
    /// Probes that ran: each reopened or closed the breaker.
    pub probes: u64,
    pub open_for: Duration,
    pub alerts: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    pub seed: u64,
    /// Scenario time when the last thing happened.
    pub ended_at: Duration,
    pub subscribers: Vec<SubscriberReport>,
    pub connections: Vec<ConnectionReport>,
    /// The backlog at each whole minute.
    pub backlog: Vec<u64>,
    /// Processes that crashed (the scenario's `[[crash]]`), their runs lost.
    pub crashes: u64,
    /// Each of the app's schedules, by name, and how its runs ended.
    pub schedules: Vec<(String, ScheduleEnds)>,
}

fn since_start(t: Timestamp) -> Duration {
    Duration::from_millis(u64::try_from(t.as_millis()).unwrap_or(0))
}

/// The report of a simulation that ran with `seed`, its providers'
/// counts in `counted`.
pub(crate) fn build(sim: &Sim, seed: u64, counted: Vec<(String, Vec<Phase>, Counted)>) -> Report {
    let mut unfinished: BTreeMap<&str, u64> = BTreeMap::new();
    for d in sim.store.deliveries().filter(|d| !d.state.is_finished()) {
        *unfinished.entry(d.subscriber.as_str()).or_default() += 1;
    }
    let subscribers: Vec<SubscriberReport> = sim
        .cfg
        .subscribers
        .iter()
        .map(|s| {
            let ends = sim.stats.ends.get(&s.name).cloned().unwrap_or_default();
            let unfinished = unfinished.get(s.name.as_str()).copied().unwrap_or(0);
            let failed: u64 = ends.failed.values().sum();
            let parked: u64 = ends.parked.values().sum();
            let waits = &ends.to_success_ms;
            let to_success_ms = (!waits.is_empty()).then(|| {
                let last = waits.len() - 1;
                let at = |rank: u64| waits.at_rank(rank).expect("a rank below the count");
                let q = |q: f64| at((last as f64 * q).round() as u64);
                [q(0.5), q(0.99), at(last)]
            });
            SubscriberReport {
                name: s.name.clone(),
                deliveries: ends.delivered + failed + parked + unfinished,
                delivered: ends.delivered,
                failed: ends.failed,
                parked: ends.parked,
                unfinished,
                attempts: ends.attempts,
                to_success_ms,
                expired_unrun: ends.expired_unrun,
                held: ends.held,
            }
        })
        .collect();
    let ended = sim.stats.ended_at;
    let connections = counted
        .into_iter()
        .map(|(name, phases, counted)| {
            let mut openings = 0;
            let mut probes = 0;
            let mut open_for = Duration::ZERO;
            let mut opened: Option<Timestamp> = None;
            for (at, _, t) in sim.stats.transitions.iter().filter(|(_, c, _)| *c == name) {
                match t {
                    Transition::Opened => {
                        openings += 1;
                        opened = Some(*at);
                    }
                    Transition::Reopened => probes += 1,
                    Transition::Closed => {
                        probes += 1;
                        if let Some(o) = opened.take() {
                            open_for += at.since(o);
                        }
                    }
                }
            }
            if let Some(o) = opened {
                open_for += ended.since(o);
            }
            let alerts = sim.stats.alerts.iter().filter(|(_, a)| a.connection == name).count() as u64;
            let phases = phases
                .into_iter()
                .zip(counted.sends)
                .zip(counted.first_minute)
                .map(|((p, s), f)| (p, s, f))
                .collect();
            ConnectionReport {
                name,
                phases,
                openings,
                probes,
                open_for,
                alerts,
            }
        })
        .collect();
    Report {
        seed,
        ended_at: since_start(ended),
        subscribers,
        connections,
        backlog: sim.stats.backlog.iter().map(|(_, n)| *n).collect(),
        crashes: sim.stats.workers_lost,
        schedules: sim
            .cfg
            .schedules
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    sim.stats.schedules.get(&s.name).cloned().unwrap_or_default(),
                )
            })
            .collect(),
    }
}

/// `1h 05m`, `42s`, `850ms`.
fn short(d: Duration) -> String {
    crate::output::duration_short(d)
}

fn counts(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "0".into();
    }
    let total: u64 = map.values().sum();
    let each: Vec<String> = map.iter().map(|(c, n)| format!("{c} {n}")).collect();
    format!("{total} ({})", each.join(", "))
}

/// The backlog as one line of bars, `width` columns, each the largest
/// backlog of its stretch of minutes.
pub(crate) fn sparkline(backlog: &[u64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if backlog.is_empty() {
        return String::new();
    }
    let per = backlog.len().div_ceil(width.max(1));
    let columns: Vec<u64> = backlog
        .chunks(per)
        .map(|c| c.iter().copied().max().unwrap_or(0))
        .collect();
    let peak = columns.iter().copied().max().unwrap_or(0).max(1);
    columns
        .iter()
        .map(|n| {
            if *n == 0 {
                ' '
            } else {
                BARS[((*n * 7).div_ceil(peak) as usize).min(7)]
            }
        })
        .collect()
}

impl Report {
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "Simulated {} (seed {}).\n\nSubscribers\n",
            short(self.ended_at),
            self.seed
        ));
        for s in &self.subscribers {
            out.push_str(&format!(
                "  {}: {} deliveries: {} delivered, {} failed, {} parked, {} unfinished\n",
                s.name,
                s.deliveries,
                s.delivered,
                counts(&s.failed),
                counts(&s.parked),
                s.unfinished
            ));
            if let Some([p50, p99, max]) = s.to_success_ms {
                let ms = |n: u64| short(Duration::from_millis(n));
                out.push_str(&format!(
                    "    emit to success: p50 {}, p99 {}, max {}\n",
                    ms(p50),
                    ms(p99),
                    ms(max)
                ));
            }
            let attempts: Vec<String> = s.attempts.iter().map(|(a, n)| format!("{a}: {n}")).collect();
            if !attempts.is_empty() {
                out.push_str(&format!("    attempts per delivery: {}\n", attempts.join(", ")));
            }
            if s.held > 0 {
                out.push_str(&format!("    held behind a breaker: {}\n", s.held));
            }
            if s.expired_unrun > 0 {
                out.push_str(&format!(
                    "    budget ran out before a first attempt (waiting for a limit, a key or the backlog): {}\n",
                    s.expired_unrun
                ));
            }
        }
        out.push_str("\nConnections\n");
        for c in &self.connections {
            out.push_str(&format!(
                "  {}: breaker opened {}, probes {}, open for {}, alerts {}\n",
                c.name,
                c.openings,
                c.probes,
                short(c.open_for),
                c.alerts
            ));
            for (i, (p, sends, first)) in c.phases.iter().enumerate() {
                let state = match p.state {
                    State::Up => "up",
                    State::Down => "down",
                };
                let mut line = format!("    from {:>8} {:<4} sends {}", short(p.from), state, sends);
                if i > 0 && c.phases[i - 1].0.state == State::Down {
                    line.push_str(&format!(" ({first} in its first minute)"));
                }
                out.push_str(&line);
                out.push('\n');
            }
        }
        if !self.schedules.is_empty() {
            out.push_str("\nSchedules\n");
        }
        for (name, s) in &self.schedules {
            out.push_str(&format!(
                "  {name}: {} runs: {} succeeded, {} failed, alerts {}, events emitted {}\n",
                s.runs,
                s.succeeded,
                counts(&s.failed),
                s.alerts,
                s.emitted
            ));
        }
        if self.crashes > 0 {
            out.push_str(&format!("\nProcess crashes: {}\n", self.crashes));
        }
        let peak = self.backlog.iter().copied().max().unwrap_or(0);
        out.push_str(&format!(
            "\nBacklog per minute (peak {peak}):\n  {}\n",
            sparkline(&self.backlog, 60)
        ));
        out
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "seed": self.seed,
            "simulated_ms": u64::try_from(self.ended_at.as_millis()).unwrap_or(u64::MAX),
            "subscribers": self.subscribers.iter().map(|s| json!({
                "name": s.name,
                "deliveries": s.deliveries,
                "delivered": s.delivered,
                "failed": s.failed,
                "parked": s.parked,
                "unfinished": s.unfinished,
                "attempts": s.attempts.iter().map(|(a, n)| (a.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                "to_success_ms": s.to_success_ms.map(|[p50, p99, max]| json!({"p50": p50, "p99": p99, "max": max})),
                "expired_unrun": s.expired_unrun,
                "held": s.held,
            })).collect::<Vec<_>>(),
            "connections": self.connections.iter().map(|c| json!({
                "name": c.name,
                "breaker_openings": c.openings,
                "probes": c.probes,
                "open_ms": u64::try_from(c.open_for.as_millis()).unwrap_or(u64::MAX),
                "alerts": c.alerts,
                "phases": c.phases.iter().map(|(p, sends, first)| json!({
                    "from_ms": u64::try_from(p.from.as_millis()).unwrap_or(u64::MAX),
                    "state": match p.state { State::Up => "up", State::Down => "down" },
                    "sends": sends,
                    "sends_first_minute": first,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "backlog_per_minute": self.backlog,
            "process_crashes": self.crashes,
            "schedules": self.schedules.iter().map(|(name, s)| json!({
                "name": name,
                "runs": s.runs,
                "succeeded": s.succeeded,
                "failed": s.failed,
                "alerts": s.alerts,
                "emitted": s.emitted,
            })).collect::<Vec<_>>(),
        })
    }
}
