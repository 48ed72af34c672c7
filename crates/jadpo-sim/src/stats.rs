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

/// How one subscriber's deliveries ended, counted as each finished (an
/// app's simulation forgets a delivery once it is counted here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ends {
    pub delivered: u64,
    /// By failure code.
    pub failed: BTreeMap<String, u64>,
    pub parked: BTreeMap<String, u64>,
    /// Attempts a delivery took, and how many took that many.
    pub attempts: BTreeMap<u32, u64>,
    /// Each success's time from its emit, ms.
    pub to_success_ms: Spread,
    /// Failed without an attempt: the budget ran out while it waited.
    pub expired_unrun: u64,
    /// Held behind a breaker at some point.
    pub held: u64,
}

/// Values (milliseconds) kept as how many of each, so any rank among
/// them is read exactly: a count per millisecond under a minute, a map of
/// the rarer longer ones. A week's seven million successes of one
/// subscriber took 56 MB as a list, and a sort at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    /// `below[ms]`: how many took `ms`, for `ms` under [`Spread::DENSE`];
    /// as long as the longest of them.
    below: Vec<u64>,
    above: BTreeMap<u64, u64>,
    len: u64,
}

impl Spread {
    const DENSE: u64 = 60_000;

    pub fn add(&mut self, ms: u64) {
        self.len += 1;
        if ms < Self::DENSE {
            let i = ms as usize;
            if self.below.len() <= i {
                self.below.resize(i + 1, 0);
            }
            self.below[i] += 1;
        } else {
            *self.above.entry(ms).or_default() += 1;
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value at `rank` (from 0) of them all in order: what a sorted
    /// list of them would hold there.
    pub fn at_rank(&self, rank: u64) -> Option<u64> {
        let below = self.below.iter().enumerate().map(|(ms, n)| (ms as u64, *n));
        let above = self.above.iter().map(|(ms, n)| (*ms, *n));
        let mut seen = 0;
        for (ms, n) in below.chain(above) {
            seen += n;
            if rank < seen {
                return Some(ms);
            }
        }
        None
    }
}

impl Ends {
    pub(crate) fn count(&mut self, d: &jadpo_core::Delivery) {
        use jadpo_core::DeliveryState;
        let code = || d.last_failure.as_ref().map_or_else(String::new, |f| f.code.clone());
        match d.state {
            DeliveryState::Succeeded => {
                self.delivered += 1;
                let took = d
                    .finished_at
                    .map_or(std::time::Duration::ZERO, |f| f.since(d.created_at));
                self.to_success_ms
                    .add(u64::try_from(took.as_millis()).unwrap_or(u64::MAX));
            }
            DeliveryState::Failed => {
                *self.failed.entry(code()).or_default() += 1;
                self.expired_unrun += u64::from(d.attempts == 0);
            }
            DeliveryState::Parked => *self.parked.entry(code()).or_default() += 1,
            _ => return,
        }
        *self.attempts.entry(d.attempts).or_default() += 1;
        self.held += u64::from(!d.held_for.is_zero());
    }
}

/// How one schedule's runs ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleEnds {
    pub runs: u64,
    pub succeeded: u64,
    /// By failure code; a run lost with its process counts as
    /// `run.lease_expired` when the schedule is next claimed.
    pub failed: BTreeMap<String, u64>,
    /// `schedule_failing` alerts raised.
    pub alerts: u64,
    /// Events its successful runs emitted.
    pub emitted: u64,
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
    /// An app's deliveries, by subscriber, as each finished.
    pub ends: BTreeMap<String, Ends>,
    /// An app's schedules' runs, by schedule.
    pub schedules: BTreeMap<String, ScheduleEnds>,
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

#[cfg(test)]
mod tests {
    use super::Spread;
    use proptest::prelude::*;

    proptest! {
        /// Any rank reads what a sorted list of the same values holds.
        #[test]
        fn a_spread_reads_each_rank_as_a_sorted_list(
            values in prop::collection::vec(prop_oneof![0u64..200, 59_990u64..60_010, any::<u64>()], 0..300),
        ) {
            let mut spread = Spread::default();
            for v in &values {
                spread.add(*v);
            }
            let mut sorted = values.clone();
            sorted.sort_unstable();
            prop_assert_eq!(spread.len(), sorted.len() as u64);
            for (rank, want) in sorted.iter().enumerate() {
                prop_assert_eq!(spread.at_rank(rank as u64), Some(*want));
            }
            prop_assert_eq!(spread.at_rank(sorted.len() as u64), None);
        }
    }
}
