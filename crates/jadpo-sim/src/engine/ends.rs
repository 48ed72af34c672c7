//! An app's simulation over days: each delivery counted for the report as
//! it finishes, then forgotten by the store and the checks, so memory and
//! the checks' sweeps follow the backlog, not the days behind it; and the
//! backlog counted each minute.

use super::Sim;
use jadpo_core::{DeliveryId, Timestamp};
use std::time::Duration;

/// Finished deliveries are forgotten in batches of at least this many: the
/// store's sweep of its events is as long as the backlog.
const FORGET_BATCH: usize = 10_000;

impl Sim {
    /// An app's delivery finished: counted for its subscriber and queued to
    /// be forgotten. The built-in subscribers keep theirs: an operator may
    /// retry them.
    pub(super) fn app_ended(&mut self, id: DeliveryId) {
        if self.app.is_none() {
            return;
        }
        if let Some(d) = self.store.delivery(id) {
            // Looked up before it is made: one name copied per subscriber,
            // not per delivery.
            match self.stats.ends.get_mut(&d.subscriber) {
                Some(ends) => ends.count(d),
                None => self.stats.ends.entry(d.subscriber.clone()).or_default().count(d),
            }
            self.finished.push(id);
        }
    }

    /// Forgets the finished deliveries counted so far, once there are
    /// enough of them: the store's (which keeps a `strict` key's failed
    /// delivery, blocking its key as it should), then the checks' of the
    /// same ones.
    pub(super) fn forget_finished(&mut self) {
        let live = self.store.delivery_count();
        if self.finished.len() < FORGET_BATCH.max(live / 2) {
            return;
        }
        let ids = std::mem::take(&mut self.finished);
        let forgotten = self.store.forget(&ids, self.now);
        self.checker.forget(&forgotten);
    }

    /// The backlog (deliveries made and not finished) at each whole minute
    /// up to `until`, as it stood then.
    pub(super) fn sample_backlog(&mut self, until: Timestamp) {
        while self.next_sample <= until {
            let backlog = self.stats.created.saturating_sub(self.stats.ended);
            self.stats.backlog.push((self.next_sample, backlog));
            self.next_sample = self.next_sample.plus(Duration::from_secs(60));
        }
    }
}
