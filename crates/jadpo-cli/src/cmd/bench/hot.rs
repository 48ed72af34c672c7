//! `--hot-key`: one key with a backlog of every event but the last few,
//! then one delivery on each other key, all emitted before the engine
//! starts: how long after the drain began had every other key's delivery
//! started? The fairness bound of docs/decisions.md ("Per-key order"),
//! measured. The drain is not waited for (under `order:` the backlog runs
//! one at a time).

use crate::output::CliError;
use jadpo_runtime::interpreter::RustAction;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Without every other key's delivery started by then, the bench gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// The key of event `i` of `events` over `keys` keys: key 0, the hot one,
/// for the backlog, then keys 1 to `keys - 1` once each.
pub(super) fn key_of(i: u64, events: u64, keys: u64) -> u64 {
    let first_other = events - (keys - 1);
    if i < first_other {
        0
    } else {
        i - first_other + 1
    }
}

/// The deliveries of the other keys, and how many of them have started.
pub(super) struct Others {
    first: u64,
    count: u64,
    started: AtomicU64,
}

impl Others {
    pub(super) fn new(events: u64, keys: u64) -> Arc<Others> {
        Arc::new(Others {
            first: events - (keys - 1),
            count: keys - 1,
            started: AtomicU64::new(0),
        })
    }

    /// The bench's action, doing nothing but counting the other keys'
    /// deliveries as they start.
    pub(super) fn action(self: &Arc<Self>) -> RustAction {
        let others = self.clone();
        Arc::new(move |args, _| {
            if args
                .args
                .get("n")
                .and_then(serde_json::Value::as_u64)
                .is_some_and(|n| n >= others.first)
            {
                others.started.fetch_add(1, Ordering::Relaxed);
            }
            Box::pin(async { Ok(()) })
        })
    }

    /// Waits until every other key's delivery has started: the time since
    /// `since`, to the nearest millisecond at best (it looks every one).
    pub(super) async fn wait(&self, since: Instant) -> Result<Duration, CliError> {
        loop {
            super::interrupted()?;
            if self.started.load(Ordering::Relaxed) >= self.count {
                return Ok(since.elapsed());
            }
            if since.elapsed() > GIVE_UP_AFTER {
                return Err(CliError::environment(
                    "bench.stalled",
                    format!(
                        "{} of the {} other keys' deliveries started in {}s",
                        self.started.load(Ordering::Relaxed),
                        self.count,
                        GIVE_UP_AFTER.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_one_key_and_each_other_key_comes_once_after_it() {
        let keys: Vec<u64> = (0..8).map(|i| key_of(i, 8, 4)).collect();
        assert_eq!(keys, [0, 0, 0, 0, 0, 1, 2, 3]);
        assert_eq!(Others::new(8, 4).first, 5);
    }
}
