//! The circuit breaker of one connection, as a pure state machine.
//!
//! ```text
//!            5 unavailable in a row            pause passed, first claim
//!  Closed ───────────────────────────▶ Open ─────────────────────────────▶ Probing
//!    ▲                                  ▲  ◀── probe given back / lost ──────┘ │
//!    │                                  └──── probe unavailable: pause × 2 ────┘
//!    └──────────── any answer (the probe's, or a run already under way) ───────┘
//! ```
//!
//! Every method changes `version` when it changes anything, so a store can
//! write a breaker with one statement conditional on the version it read:
//! of two processes changing the same breaker at once, one wins.

use crate::ids::DeliveryId;
use crate::time::{Timestamp, MINUTE};
use std::fmt;
use std::time::Duration;

/// When a breaker opens and how long it pauses; `DEFAULT` is what
/// docs/retries.md promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Unavailable attempts in a row that open the breaker.
    pub threshold: u32,
    pub first_pause: Duration,
    pub max_pause: Duration,
}

impl BreakerPolicy {
    pub const DEFAULT: BreakerPolicy = BreakerPolicy {
        threshold: 5,
        first_pause: MINUTE,
        max_pause: Duration::from_secs(600),
    };

    /// Never opens: for measuring what the breaker saves.
    pub const NEVER_OPENS: BreakerPolicy = BreakerPolicy {
        threshold: u32::MAX,
        ..BreakerPolicy::DEFAULT
    };
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy::DEFAULT
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    Closed,
    Open,
    /// Open, with one delivery out as the probe.
    Probing,
}

impl BreakerState {
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::Probing => "probing",
        }
    }

    pub fn parse(s: &str) -> Option<BreakerState> {
        [BreakerState::Closed, BreakerState::Open, BreakerState::Probing]
            .into_iter()
            .find(|b| b.as_str() == s)
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The delivery out as the probe, and until when it holds that place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub delivery: DeliveryId,
    /// The end of its claim's lease (or of the sweep's wake-up): past it,
    /// the probe is taken as lost and another delivery may probe.
    pub until: Timestamp,
}

/// What a claimed delivery may do, as far as one connection's breaker goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Pass,
    Hold,
    /// The pause has passed and nobody is probing: this delivery may.
    Probe,
}

/// A change worth a log line and, for `Closed`, a release of held deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Opened,
    Reopened,
    Closed,
}

/// How the last call of an attempt through a connection ended, for the
/// breaker: the provider answered (refusals included), or it did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallVerdict {
    Answered,
    Unavailable,
}

/// `jadpo_circuit_breakers`' row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breaker {
    pub connection: String,
    pub state: BreakerState,
    pub consecutive_unavailable: u32,
    /// When it last opened or reopened; the pause counts from here.
    pub opened_at: Option<Timestamp>,
    /// When this outage began: the first open since it was last closed.
    pub outage_since: Option<Timestamp>,
    pub pause: Duration,
    pub probe: Option<Probe>,
    /// This outage's `connection_unavailable` alert has been raised.
    pub alert_raised: bool,
    pub version: i64,
}

/// The alert raised once per outage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alert {
    pub connection: String,
    pub since: Timestamp,
    pub held: u64,
}

impl Alert {
    pub const NAME: &'static str = "connection_unavailable";
}

impl Breaker {
    pub fn new(connection: impl Into<String>) -> Breaker {
        Breaker {
            connection: connection.into(),
            state: BreakerState::Closed,
            consecutive_unavailable: 0,
            opened_at: None,
            outage_since: None,
            pause: Duration::ZERO,
            probe: None,
            alert_raised: false,
            version: 0,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.state == BreakerState::Closed
    }

    /// When the pause ends and a probe may go; `None` while closed.
    pub fn probe_due_at(&self) -> Option<Timestamp> {
        match self.state {
            BreakerState::Closed => None,
            _ => Some(self.opened_at.unwrap_or(Timestamp::EPOCH).plus(self.pause)),
        }
    }

    /// The probe still holds its place: taken and not yet lost.
    pub fn probe_out(&self, now: Timestamp) -> Option<DeliveryId> {
        self.probe.filter(|p| p.until > now).map(|p| p.delivery)
    }

    /// What `delivery`, claimed at `now`, may do.
    pub fn gate(&self, delivery: DeliveryId, now: Timestamp) -> Gate {
        let Some(probe_due_at) = self.probe_due_at() else {
            return Gate::Pass;
        };
        if now < probe_due_at {
            return Gate::Hold;
        }
        match self.probe_out(now) {
            None => Gate::Probe,
            Some(p) if p == delivery => Gate::Probe,
            Some(_) => Gate::Hold,
        }
    }

    /// The check repeated in memory just before a claimed delivery runs:
    /// a breaker that opened after the claim holds it, unless it is the
    /// probe. Only runs already under way when it opened reach the provider.
    pub fn lets_run(&self, delivery: DeliveryId, now: Timestamp) -> bool {
        self.is_closed() || self.probe_out(now) == Some(delivery)
    }

    /// True when the sweep should wake a held delivery to be the probe.
    pub fn wants_probe(&self, now: Timestamp) -> bool {
        self.probe_due_at().is_some_and(|t| t <= now) && self.probe_out(now).is_none()
    }

    /// `delivery` becomes the probe until `until`. Only after `gate` said
    /// `Probe` for it.
    pub fn take_probe(&mut self, delivery: DeliveryId, until: Timestamp, now: Timestamp) {
        assert_eq!(
            self.gate(delivery, now),
            Gate::Probe,
            "take_probe without the gate's leave"
        );
        self.state = BreakerState::Probing;
        self.probe = Some(Probe { delivery, until });
        self.version += 1;
    }

    /// A probe that no longer calls the provider, or was not run after all,
    /// gives its place back; the next claim or sweep picks another.
    pub fn give_back_probe(&mut self, delivery: DeliveryId) -> bool {
        if self.probe.is_some_and(|p| p.delivery == delivery) {
            self.probe = None;
            self.state = BreakerState::Open;
            self.version += 1;
            return true;
        }
        false
    }

    /// An attempt by `from` called through this connection, and its last
    /// call ended `verdict`.
    pub fn record(
        &mut self,
        verdict: CallVerdict,
        from: DeliveryId,
        now: Timestamp,
        policy: &BreakerPolicy,
    ) -> Option<Transition> {
        match (self.state, verdict) {
            (BreakerState::Closed, CallVerdict::Answered) => {
                // The common case on a healthy connection: nothing to write.
                if self.consecutive_unavailable != 0 {
                    self.consecutive_unavailable = 0;
                    self.version += 1;
                }
                None
            }
            (BreakerState::Closed, CallVerdict::Unavailable) => {
                self.consecutive_unavailable = self.consecutive_unavailable.saturating_add(1);
                self.version += 1;
                if self.consecutive_unavailable >= policy.threshold {
                    self.state = BreakerState::Open;
                    self.opened_at = Some(now);
                    self.outage_since = Some(now);
                    self.pause = policy.first_pause;
                    self.probe = None;
                    self.alert_raised = false;
                    Some(Transition::Opened)
                } else {
                    None
                }
            }
            // The probe's answer, or that of a run already under way when it
            // opened: the provider is back.
            (_, CallVerdict::Answered) => {
                *self = Breaker {
                    version: self.version + 1,
                    ..Breaker::new(std::mem::take(&mut self.connection))
                };
                Some(Transition::Closed)
            }
            (_, CallVerdict::Unavailable) => {
                self.consecutive_unavailable = self.consecutive_unavailable.saturating_add(1);
                self.version += 1;
                if self.probe.is_some_and(|p| p.delivery == from) {
                    self.state = BreakerState::Open;
                    self.opened_at = Some(now);
                    self.pause = self.pause.saturating_mul(2).min(policy.max_pause);
                    self.probe = None;
                    Some(Transition::Reopened)
                } else {
                    None
                }
            }
        }
    }

    /// Marks this outage's alert raised and returns it, once per outage.
    pub fn raise_alert(&mut self, held: u64) -> Option<Alert> {
        if self.is_closed() || self.alert_raised {
            return None;
        }
        self.alert_raised = true;
        self.version += 1;
        Some(Alert {
            connection: self.connection.clone(),
            since: self.outage_since.or(self.opened_at).unwrap_or(Timestamp::EPOCH),
            held,
        })
    }

    /// Internal consistency: [`Breaker::check_shape`] and a pause within the
    /// policy. Every store asserts it before writing a breaker whose change
    /// the policy decided (`plan::finish`), the simulation after every step.
    pub fn check_invariants(&self, policy: &BreakerPolicy) -> Result<(), String> {
        self.check_shape()?;
        if !self.is_closed() && (self.pause < policy.first_pause.min(policy.max_pause) || self.pause > policy.max_pause)
        {
            return Err(format!(
                "breaker {}: pause outside the policy: {self:?}",
                self.connection
            ));
        }
        Ok(())
    }

    /// What holds whatever the policy: every store asserts it on each row it
    /// reads and each it writes (`plan::Breakers`).
    pub fn check_shape(&self) -> Result<(), String> {
        let fail = |what: &str| Err(format!("breaker {}: {what}: {self:?}", self.connection));
        match self.state {
            BreakerState::Closed => {
                if self.probe.is_some() || self.opened_at.is_some() || self.alert_raised {
                    return fail("closed with outage state left over");
                }
            }
            BreakerState::Open | BreakerState::Probing => {
                if self.opened_at.is_none() || self.outage_since.is_none() {
                    return fail("open without an opening time");
                }
                if (self.state == BreakerState::Probing) != self.probe.is_some() {
                    return fail("probing without a probe, or a probe while not probing");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
