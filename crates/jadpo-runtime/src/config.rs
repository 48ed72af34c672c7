//! The engine's settings: the workers' and the tick's, each read only by
//! the loop it sets.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Names this process's leases.
    pub name: String,
    /// Deliveries run at once.
    pub concurrency: usize,
    /// How long an idle worker waits before looking again, in engine time.
    pub poll: Duration,
    /// Added to the longest run's limit to make a lease, in real time: the
    /// time to write the outcome.
    pub lease_margin: Duration,
    /// The most finishes written in one transaction.
    pub finish_batch: usize,
    /// The most claimed deliveries held waiting for a slot, ahead of the
    /// free ones. The worker holds fewer when runs are slow, so that each
    /// starts well inside its lease (see `local_queue.rs`); 0 claims only
    /// what the free slots can start. The default, 2,000, lets each of the
    /// two claims in flight take a whole store batch (1,000) when runs are
    /// short.
    pub local_queue: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: format!("jadpo-{}", std::process::id()),
            concurrency: 16,
            poll: Duration::from_secs(1),
            lease_margin: Duration::from_secs(30),
            finish_batch: 1_000,
            local_queue: 2_000,
        }
    }
}

/// What the tick does beyond its sweep, set apart from the workers' settings:
/// only the tick reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickConfig {
    /// Finished deliveries older than this are pruned, with their events
    /// and attempts; `None` keeps everything. Seven days by default
    /// (docs/decisions.md, "Seven days of finished deliveries").
    pub retention: Option<Duration>,
}

impl Default for TickConfig {
    fn default() -> Self {
        TickConfig {
            retention: Some(Duration::from_secs(7 * 86_400)),
        }
    }
}
