//! A delivery's state: what it is waiting for, or how it ended
//! (docs/retries.md). Its own file so that the rules over states
//! (`crate::key_rule`) and the delivery's record can both use it.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeliveryState {
    /// Waiting for an earlier delivery of its key to end (its subscriber's
    /// `order:` or `concurrency_per_key:`): not due until one does. Not an
    /// attempt, spends no budget, not held (`crate::key_rule`).
    Queued,
    /// Waiting for `due_at`.
    Due,
    /// Claimed by a worker under a lease.
    Running,
    /// Behind an open circuit breaker; not due until it closes.
    Held,
    Succeeded,
    Failed,
    Parked,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 7] = [
        DeliveryState::Queued,
        DeliveryState::Due,
        DeliveryState::Running,
        DeliveryState::Held,
        DeliveryState::Succeeded,
        DeliveryState::Failed,
        DeliveryState::Parked,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Queued => "queued",
            DeliveryState::Due => "due",
            DeliveryState::Running => "running",
            DeliveryState::Held => "held",
            DeliveryState::Succeeded => "succeeded",
            DeliveryState::Failed => "failed",
            DeliveryState::Parked => "parked",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        DeliveryState::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Nothing happens to a finished delivery until an operator retries it.
    pub const fn is_finished(self) -> bool {
        matches!(
            self,
            DeliveryState::Succeeded | DeliveryState::Failed | DeliveryState::Parked
        )
    }
}

impl fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
