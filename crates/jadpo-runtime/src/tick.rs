//! The tick: a periodic sweep, every second on every process. Safe on many
//! at once: each breaker change in it is conditional on the version read.

use crate::log;
use crate::run::Executor;
use crate::schedules;
use crate::worker::Shared;
use jadpo_store::ScheduleStore;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub const INTERVAL: Duration = Duration::from_secs(1);

pub(crate) async fn run<S: ScheduleStore, E: Executor>(shared: Arc<Shared<S, E>>, mut shutdown: watch::Receiver<bool>) {
    let (store, clock, wake) = (&shared.store, &shared.clock, &shared.wake);
    let wake_lease = clock.engine_span(shared.catalog.longest_timeout() + shared.config.lease_margin);
    while !*shutdown.borrow() {
        let now = clock.now();
        match store.sweep(now, wake_lease).await {
            Ok(report) => {
                for alert in &report.alerts {
                    log::alert(alert);
                }
                for id in &report.woken {
                    tracing::info!(delivery = id.0, "delivery.woken_as_probe");
                }
                if report.released > 0 {
                    tracing::info!(released = report.released, "delivery.released");
                }
                if !report.woken.is_empty() || report.released > 0 {
                    wake.notify_waiters();
                }
            }
            Err(e) => tracing::warn!(error = %e, "tick.store_unavailable"),
        }
        schedules::start_due(
            store,
            &shared.executor,
            clock,
            &shared.catalog.schedules,
            &shared.config.name,
            shared.config.lease_margin,
        )
        .await;
        // Under a scaled clock a second of engine time may be a millisecond
        // of real time: never sweep more often than every 20 ms of real time.
        let floor = tokio::time::sleep(Duration::from_millis(20));
        tokio::select! {
            _ = async { clock.sleep_until(now.plus(INTERVAL)).await; floor.await } => {}
            _ = shutdown.changed() => {}
        }
    }
}
