//! What a simulation counts, for its report.

use crate::config::Behaviour;
use jadpo_core::{Alert, Outcome, Timestamp, Transition};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderCalls {
    pub total: u64,
    /// Calls that arrived while the provider was not simply up.
    pub while_failing: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub calls: BTreeMap<String, ProviderCalls>,
    pub last_success: Option<Timestamp>,
    pub alerts: Vec<(Timestamp, Alert)>,
    pub transitions: Vec<(Timestamp, String, Transition)>,
    pub workers_lost: u64,
    pub paused: u64,
    pub fenced: u64,
    pub store_faults: u64,
    pub operator_retried: u64,
    /// Deliveries an operator skipped, blocking a `strict` key.
    pub operator_skipped: u64,
    /// Deliveries emitted `queued` behind an earlier one of their key.
    pub queued: u64,
    pub steps: u64,
    pub ended_at: Timestamp,
    /// Deliveries made (by emits from outside and from runs) and finished
    /// (succeeded, failed or parked), so far.
    pub created: u64,
    pub ended: u64,
    /// The backlog, made and not finished, at each whole minute.
    pub backlog: Vec<(Timestamp, u64)>,
    /// An app's deliveries that failed at the claim without ever running:
    /// their budget's `within:` passed while they waited.
    pub gave_up_unrun: u64,
}

impl Stats {
    pub(crate) fn call(&mut self, connection: &str, behaviour: Behaviour, _at: Timestamp) {
        let c = self.calls.entry(connection.to_owned()).or_default();
        c.total += 1;
        if !matches!(behaviour, Behaviour::Up { .. }) {
            c.while_failing += 1;
        }
    }

    pub(crate) fn finished(&mut self, outcome: &Outcome, now: Timestamp) {
        if *outcome == Outcome::Succeeded {
            self.last_success = Some(now);
        }
        if !matches!(outcome, Outcome::Retry { .. }) {
            self.ended += 1;
        }
    }
}
