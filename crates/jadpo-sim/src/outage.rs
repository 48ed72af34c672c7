//! The outage scenario: 5,000 deliveries calling one provider that is down
//! for an hour, then recovers. Run with the breaker and without it, on the
//! same seed, and compare what the provider received.

use crate::config::{Behaviour, Emission, Faults, Script, SimConfig, SimSubscriber};
use crate::engine::{Sim, Violation};
use jadpo_core::{BreakerPolicy, Budget, DeliveryState, Timestamp, Transition};
use std::fmt;
use std::time::Duration;

pub const CONNECTION: &str = "payments";

#[derive(Clone, Debug, PartialEq)]
pub struct OutageConfig {
    pub deliveries: usize,
    pub down_for: Duration,
    pub workers: usize,
    pub slots: usize,
    pub budget: Budget,
    pub seed: u64,
}

impl Default for OutageConfig {
    /// The scenario docs/performance.md measures: 5,000 deliveries, one hour
    /// down; two worker processes running eight deliveries each at once.
    fn default() -> Self {
        OutageConfig {
            deliveries: 5_000,
            down_for: Duration::from_secs(3600),
            workers: 2,
            slots: 8,
            budget: Budget::DEFAULT,
            seed: 1,
        }
    }
}

impl OutageConfig {
    pub fn sim(&self, policy: BreakerPolicy) -> SimConfig {
        let latency = Duration::from_millis(50);
        SimConfig {
            seed: self.seed,
            operator_retries: vec![],
            subscribers: vec![SimSubscriber {
                name: "record_payment_webhook".into(),
                budget: self.budget,
                connections: vec![CONNECTION.into()],
                skip_calls: 0,
                defect: 0,
                timeout: Duration::from_secs(30),
            }],
            providers: [(
                CONNECTION.to_string(),
                Script(vec![
                    (Timestamp::EPOCH, Behaviour::Down { latency }),
                    (Timestamp::EPOCH.plus(self.down_for), Behaviour::Up { latency }),
                ]),
            )]
            .into(),
            emissions: vec![Emission {
                at: Timestamp::EPOCH,
                events: self.deliveries,
            }],
            workers: self.workers,
            slots: self.slots,
            policy,
            faults: Faults::NONE,
            tick: Duration::from_secs(1),
            horizon: Duration::from_secs(3 * 86_400),
            check_every_step: false,
            keyed: std::collections::BTreeMap::new(),
            operator_skips: vec![],
            skip_all_from: Timestamp::MAX,
            crashes: Vec::new(),
            schedules: Vec::new(),
            schedules_to_horizon: false,
            longest_retry_after: Duration::ZERO,
            limits: Default::default(),
        }
    }
}

/// One run of the scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Arm {
    pub calls: u64,
    pub calls_while_down: u64,
    pub succeeded: usize,
    pub failed: usize,
    pub parked: usize,
    /// From the provider's recovery to the last delivery's success.
    pub last_success_after_recovery: Option<Duration>,
    pub alerts: usize,
    pub opened: usize,
    pub probes_unavailable: usize,
    /// The most attempts any delivery spent.
    pub most_attempts: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OutageReport {
    pub config: OutageConfig,
    pub with_breaker: Arm,
    pub without_breaker: Arm,
}

pub fn run(config: &OutageConfig) -> Result<OutageReport, Violation> {
    Ok(OutageReport {
        with_breaker: arm(config, BreakerPolicy::DEFAULT)?,
        without_breaker: arm(config, BreakerPolicy::NEVER_OPENS)?,
        config: config.clone(),
    })
}

fn arm(config: &OutageConfig, policy: BreakerPolicy) -> Result<Arm, Violation> {
    let sim = Sim::new(config.sim(policy)).run()?;
    let recovery = Timestamp::EPOCH.plus(config.down_for);
    let count = |s: DeliveryState| sim.store.deliveries().filter(|d| d.state == s).count();
    let calls = sim.stats.calls.get(CONNECTION).cloned().unwrap_or_default();
    let transitions = |t: Transition| sim.stats.transitions.iter().filter(|(_, _, x)| *x == t).count();
    Ok(Arm {
        calls: calls.total,
        calls_while_down: calls.while_failing,
        succeeded: count(DeliveryState::Succeeded),
        failed: count(DeliveryState::Failed),
        parked: count(DeliveryState::Parked),
        last_success_after_recovery: sim.stats.last_success.map(|t| t.since(recovery)),
        alerts: sim.stats.alerts.len(),
        opened: transitions(Transition::Opened),
        probes_unavailable: transitions(Transition::Reopened),
        most_attempts: sim.store.deliveries().map(|d| d.attempts).max().unwrap_or(0),
    })
}

fn human(d: Option<Duration>) -> String {
    let Some(d) = d else { return "never".into() };
    let s = d.as_secs();
    match s {
        0..60 => format!("{}.{:03}s", s, d.subsec_millis()),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

impl fmt::Display for OutageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "The outage: {} deliveries whose action calls `{CONNECTION}`, which is down for {} from the start, then answers.",
            c.deliveries,
            human(Some(c.down_for))
        )?;
        writeln!(
            f,
            "Budget {} attempts within {}; {} workers x {} deliveries at once; 50 ms per call; simulation seed {}.\n",
            c.budget.attempts(),
            human(Some(c.budget.within())),
            c.workers,
            c.slots,
            c.seed
        )?;
        let (a, b) = (&self.with_breaker, &self.without_breaker);
        let rows: [(&str, String, String); 10] = [
            ("calls the provider received", a.calls.to_string(), b.calls.to_string()),
            (
                "  of them while it was down",
                a.calls_while_down.to_string(),
                b.calls_while_down.to_string(),
            ),
            ("deliveries succeeded", a.succeeded.to_string(), b.succeeded.to_string()),
            ("deliveries failed", a.failed.to_string(), b.failed.to_string()),
            ("deliveries parked", a.parked.to_string(), b.parked.to_string()),
            (
                "most attempts by one delivery",
                a.most_attempts.to_string(),
                b.most_attempts.to_string(),
            ),
            ("breaker opened", a.opened.to_string(), b.opened.to_string()),
            (
                "probes that found it down",
                a.probes_unavailable.to_string(),
                b.probes_unavailable.to_string(),
            ),
            (
                "connection_unavailable alerts",
                a.alerts.to_string(),
                b.alerts.to_string(),
            ),
            (
                "last success after recovery",
                human(a.last_success_after_recovery),
                human(b.last_success_after_recovery),
            ),
        ];
        writeln!(f, "{:<32}{:>16}{:>18}", "", "with breaker", "without breaker")?;
        for (name, x, y) in rows {
            writeln!(f, "{name:<32}{x:>16}{y:>18}")?;
        }
        Ok(())
    }
}
