//! What the simulation's operator does: retry every failed and parked
//! delivery (`jadpo retry --state`), and skip what blocks a `strict` key
//! (`jadpo deliveries skip`).

use super::{Event, Sim};
use rand::Rng;
use std::time::Duration;

impl Sim {
    /// `jadpo retry --state failed` and `--state parked`: a fresh budget for
    /// each, due over the next minute.
    pub(super) fn operator_retry(&mut self) -> Result<(), String> {
        let ids: Vec<jadpo_core::DeliveryId> = self
            .store
            .deliveries()
            .filter(|d| d.retryable_by_operator())
            .map(|d| d.id)
            .collect();
        let due = jadpo_core::delivery::retry_spread(&ids, self.now, Duration::from_secs(60), &mut self.rng);
        let retried = self.store.retry(&due, self.now);
        if retried.len() != due.len() {
            return Err(format!(
                "{} failed or parked deliveries, {} retried",
                due.len(),
                retried.len()
            ));
        }
        for id in &retried {
            self.checker.operator_retried(*id);
        }
        self.stats.operator_retried += retried.len() as u64;
        // Unfinished again: back in the backlog.
        self.stats.ended = self.stats.ended.saturating_sub(retried.len() as u64);
        self.wake_idle_workers();
        Ok(())
    }

    /// `jadpo deliveries skip` of the deliveries blocking a `strict` key:
    /// all of them when `again`, and then every ten minutes while any keyed
    /// delivery is unfinished (a key whose every delivery fails moves on
    /// one a turn); else each at even odds.
    pub(super) fn operator_skip(&mut self, again: bool) -> Result<(), String> {
        let blocking = crate::keys::KeyChecker::blocking(&self.store);
        let ids: Vec<_> = blocking
            .into_iter()
            .filter(|_| again || self.key_rng.random_bool(0.5))
            .collect();
        let skipped = self.store.skip(&ids, "sim", self.now);
        if skipped != ids {
            return Err(format!("{} blocking deliveries, {} skipped", ids.len(), skipped.len()));
        }
        self.stats.operator_skipped += skipped.len() as u64;
        let unfinished = self
            .store
            .deliveries()
            .any(|d| d.key_rule.is_some() && !d.state.is_finished());
        if again && unfinished {
            self.push(self.now.plus(Duration::from_secs(600)), Event::OperatorSkip { again });
        }
        self.wake_idle_workers();
        Ok(())
    }
}
