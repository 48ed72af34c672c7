//! The tick: a periodic sweep, every second on every process. Safe on many
//! at once: each breaker change in it is conditional on the version read.

use crate::liveness::Loop;
use crate::log;
use crate::run::Executor;
use crate::schedules;
use crate::state::EngineState;
use jadpo_core::{Backoff, Timestamp};
use jadpo_store::{ScheduleStore, Store, SweepReport};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// How often, in real time, the tick asks whether this build still runs on
/// the store's schema (`schema_gate.rs`).
const SCHEMA_EVERY: Duration = Duration::from_secs(1);

/// How often the tick prunes, in engine time, while retention keeps up
/// (so a store holds at most this much beyond its retention: 3% over a
/// retention of five minutes), and how many deliveries one batch deletes
/// at most (one short transaction: retention never holds the store for
/// long).
pub(crate) const PRUNE_EVERY: Duration = Duration::from_secs(10);
pub(crate) const PRUNE_BATCH: usize = 1_000;
/// The real time one tick may spend pruning: batch after batch while they
/// come back full, up to this share of its second, so the sweep and the
/// schedules keep their turn. A tick whose batches were all full prunes
/// again at the next tick instead of [`PRUNE_EVERY`] later: retention keeps up
/// with whatever rate the engine drains (docs/decisions.md, "Retention
/// keeps pace").
const PRUNE_SHARE: Duration = Duration::from_millis(250);

/// Whether a prune pass goes on after a batch that deleted `deleted` of
/// [`PRUNE_BATCH`], `spent` into the pass: `None` to go on, else whether
/// retention is behind (the last batch was full: more is old enough).
fn prune_pass_ends(deleted: usize, spent: Duration) -> Option<bool> {
    match (deleted < PRUNE_BATCH, spent >= PRUNE_SHARE) {
        (true, _) => Some(false),
        (false, true) => Some(true),
        (false, false) => None,
    }
}

/// When the next prune pass starts: at once (the next tick) while retention
/// is behind, else after [`PRUNE_EVERY`].
fn next_prune(now: Timestamp, behind: bool) -> Timestamp {
    if behind {
        now
    } else {
        now.plus(PRUNE_EVERY)
    }
}

/// The least real time before the next sweep: 20 ms while the store
/// answers (a scaled clock's second may be a millisecond), a store's backoff
/// after `faults` failed sweeps in a row, so a failing store is not asked
/// again every second by every process.
fn sweep_floor(faults: u32, rng: &mut impl rand::Rng) -> Duration {
    match faults {
        0 => Duration::from_millis(20),
        n => Backoff::STORE.draw(n, None, rng),
    }
}

pub(crate) async fn run<S: ScheduleStore, E: Executor>(
    state: Arc<EngineState<S, E>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (store, clock) = (&state.store, &state.clock);
    let wake_lease = clock.engine_span(state.catalog.longest_timeout() + state.config.lease_margin);
    let mut next_prune_at = clock.now();
    let mut last_flush = tokio::time::Instant::now();
    // Schedules' runs under way: a stop waits for them (each within its
    // time limit), as it does for deliveries, so none is left half-written.
    let mut runs = tokio::task::JoinSet::new();
    // Sweeps failed in a row: the next waits at least a store's backoff.
    let mut store_faults = 0u32;
    let mut last_schema_check: Option<tokio::time::Instant> = None;
    let alive = state.liveness.running(Loop::Tick);
    while !*shutdown.borrow() {
        state.liveness.beat(Loop::Tick);
        while runs.try_join_next().is_some() {}
        if last_flush.elapsed() >= crate::minutes::FLUSH_EVERY {
            last_flush = tokio::time::Instant::now();
            state.minutes.flush(&**store, clock.now()).await;
        }
        // Every second of real time, whatever the clock's scale.
        if last_schema_check.is_none_or(|t| t.elapsed() >= SCHEMA_EVERY) {
            last_schema_check = Some(tokio::time::Instant::now());
            state.schema.check(&**store).await;
        }
        let now = clock.now();
        if let Some(retention) = state.tick.retention.filter(|_| now >= next_prune_at) {
            let behind = prune(
                &**store,
                Timestamp::from_millis(now.as_millis().saturating_sub(retention.as_millis() as i64)),
            )
            .await;
            next_prune_at = next_prune(now, behind);
        }
        match store.sweep(now, wake_lease).await {
            Ok(report) => {
                store_faults = 0;
                swept(&state, &report);
            }
            Err(e) => {
                tracing::warn!(error = %e, "tick.store_unavailable");
                store_faults = store_faults.saturating_add(1);
            }
        }
        schedules::start_due(&state, &mut runs).await;
        // Under a scaled clock a second of engine time may be a millisecond
        // of real time: never sweep more often than every 20 ms of real time,
        // nor than the store's backoff while it fails.
        let floor = tokio::time::sleep(sweep_floor(store_faults, &mut rand::rng()));
        let next = async {
            clock.sleep_until(now.plus(INTERVAL)).await;
            floor.await
        };
        tokio::pin!(next);
        // Beats while it waits: a manual clock may not reach the next
        // second for as long as a test likes, and a store's backoff lasts
        // seconds, neither of which is a stuck tick.
        let mut beat = tokio::time::interval(crate::liveness::BEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut next => break,
                _ = shutdown.changed() => break,
                _ = beat.tick() => state.liveness.beat(Loop::Tick),
            }
        }
    }
    drop(alive);
    while runs.join_next().await.is_some() {}
    // What the workers still write after this is lost: a few seconds of a chart.
    state.minutes.flush(&**store, clock.now()).await;
}

/// Says what a sweep did, and wakes who has work from it: the alert sender
/// for alerts raised, the workers for probes woken and deliveries released.
fn swept<S, E>(state: &EngineState<S, E>, report: &SweepReport) {
    for alert in &report.alerts {
        log::alert(alert);
    }
    if !report.alerts.is_empty() {
        state.alert_wake.notify_one();
    }
    for id in &report.woken {
        tracing::info!(delivery = id.0, "delivery.woken_as_probe");
    }
    if report.released > 0 {
        tracing::info!(released = report.released, "delivery.released");
    }
    if !report.woken.is_empty() || report.released > 0 {
        state.wake.notify_one();
    }
}

/// Deletes finished deliveries older than `before`, in bounded batches,
/// for at most [`PRUNE_SHARE`] of real time. Returns whether retention is
/// behind (more is old enough than this pass deleted). Several processes
/// prune at once without waiting on each other: each batch skips rows
/// another is deleting.
async fn prune<S: Store>(store: &S, before: Timestamp) -> bool {
    let started = std::time::Instant::now();
    let mut total = 0;
    let behind = loop {
        match store.prune(before, PRUNE_BATCH).await {
            Ok(n) => {
                total += n;
                if let Some(behind) = prune_pass_ends(n, started.elapsed()) {
                    break behind;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention.store_unavailable");
                break false;
            }
        }
    };
    if total > 0 {
        tracing::info!(pruned = total, behind, before = %crate::rfc3339(before), "retention.pruned");
    }
    behind
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TickConfig;
    use rand::SeedableRng;

    #[test]
    fn finished_deliveries_are_kept_seven_days_by_default() {
        assert_eq!(TickConfig::default().retention, Some(Duration::from_secs(7 * 86_400)));
    }

    #[test]
    fn a_prune_pass_goes_on_while_batches_are_full_within_its_share() {
        let ms = Duration::from_millis;
        let cases = [
            (PRUNE_BATCH, ms(0), None),
            (PRUNE_BATCH, PRUNE_SHARE - ms(1), None),
            (PRUNE_BATCH, PRUNE_SHARE, Some(true)),
            (PRUNE_BATCH - 1, ms(0), Some(false)),
            (0, PRUNE_SHARE * 2, Some(false)),
        ];
        for (deleted, spent, ends) in cases {
            assert_eq!(prune_pass_ends(deleted, spent), ends, "{deleted} after {spent:?}");
        }
        let now = Timestamp::from_millis(1_000_000);
        assert_eq!(next_prune(now, true), now, "behind: the next tick");
        assert_eq!(next_prune(now, false), now.plus(PRUNE_EVERY));
    }

    #[test]
    fn a_failing_store_is_swept_no_sooner_than_its_backoff() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        assert_eq!(sweep_floor(0, &mut rng), Duration::from_millis(20));
        for faults in 1..=10 {
            for _ in 0..100 {
                let wait = sweep_floor(faults, &mut rng);
                assert!(wait >= Duration::from_millis(50), "{faults}: {wait:?}");
                assert!(wait <= Backoff::STORE.ceiling(faults), "{faults}: {wait:?}");
            }
        }
    }
}
