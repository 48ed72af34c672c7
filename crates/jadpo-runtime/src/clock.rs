//! The one source of time (docs/decisions.md, "Engine time and real time").
//!
//! Engine time (`Timestamp`) drives backoffs, pauses, budgets, schedules and
//! leases; everything written to a store comes from here, never from the
//! database. A run's time limit and a call's timeout are real time: they
//! measure the provider, not the engine. [`Clock::engine_span`] converts such
//! a real span to engine time, so a lease always outlasts the run it covers.
//!
//! - [`SystemClock`], in production.
//! - [`ManualClock`], in tests: time moves only when the test says so.
//! - [`ScaledClock`], for `jadpo dev --time-scale N`: N times faster.

use futures::future::BoxFuture;
use jadpo_core::Timestamp;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;

    /// Resolves once engine time reaches `t`.
    fn sleep_until(&self, t: Timestamp) -> BoxFuture<'static, ()>;

    /// How much engine time passes during `real` of real time.
    fn engine_span(&self, real: Duration) -> Duration;

    /// How much real time `engine` of engine time takes; the shortest
    /// real wait the tick and the workers' polls use.
    fn real_span(&self, engine: Duration) -> Duration;
}

pub type SharedClock = Arc<dyn Clock>;

fn system_now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp::from_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        system_now()
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFuture<'static, ()> {
        let wait = t.since(system_now());
        Box::pin(tokio::time::sleep(wait))
    }

    fn engine_span(&self, real: Duration) -> Duration {
        real
    }

    fn real_span(&self, engine: Duration) -> Duration {
        engine
    }
}

/// Engine time runs `scale` times faster than real time, counted from the
/// start of the current UTC day, so that processes started the same day
/// (several `jadpo dev --time-scale N` on one store) agree on engine time:
/// counted from each one's own start, they would disagree by N times the
/// gap between their starts, and one would take over the other's leases
/// early.
#[derive(Clone, Debug)]
pub struct ScaledClock {
    scale: u32,
    start_engine: Timestamp,
    start_real: Instant,
}

impl ScaledClock {
    /// `scale` of 1 is the system clock; 0 is taken as 1.
    pub fn new(scale: u32) -> ScaledClock {
        let scale = scale.max(1);
        let real = system_now();
        let day = Timestamp::from_millis(real.as_millis() - real.as_millis().rem_euclid(86_400_000));
        ScaledClock {
            scale,
            start_engine: day.plus(real.since(day).saturating_mul(scale)),
            start_real: Instant::now(),
        }
    }

    pub fn scale(&self) -> u32 {
        self.scale
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Timestamp {
        self.start_engine.plus(self.engine_span(self.start_real.elapsed()))
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFuture<'static, ()> {
        let wait = self.real_span(t.since(self.now()));
        Box::pin(tokio::time::sleep(wait))
    }

    fn engine_span(&self, real: Duration) -> Duration {
        real.saturating_mul(self.scale)
    }

    fn real_span(&self, engine: Duration) -> Duration {
        engine / self.scale
    }
}

/// Time that moves only when told. Sleepers wake when [`ManualClock::advance`]
/// or [`ManualClock::set`] passes their time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<watch::Sender<Timestamp>>,
    // Serialises moves so two advances cannot interleave their reads.
    moving: Arc<Mutex<()>>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> ManualClock {
        let (tx, _) = watch::channel(start);
        ManualClock {
            now: Arc::new(tx),
            moving: Arc::new(Mutex::new(())),
        }
    }

    pub fn advance(&self, by: Duration) {
        let _guard = self.moving.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.now.borrow().plus(by);
        self.now.send_replace(next);
    }

    /// Moves time to `t`; never backwards.
    pub fn set(&self, t: Timestamp) {
        let _guard = self.moving.lock().unwrap_or_else(|p| p.into_inner());
        let next = t.max(*self.now.borrow());
        self.now.send_replace(next);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFuture<'static, ()> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // An error means the clock is gone: nothing will ever wake us,
            // so return rather than hang a shutting-down test.
            let _ = rx.wait_for(|now| *now >= t).await;
        })
    }

    fn engine_span(&self, real: Duration) -> Duration {
        real
    }

    fn real_span(&self, _engine: Duration) -> Duration {
        // Real waits under a manual clock are only polling intervals.
        Duration::from_millis(5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes started apart agree on engine time: both count from
    /// the start of the day, not from their own start.
    #[test]
    fn scaled_clocks_made_apart_agree_on_engine_time() {
        let first = ScaledClock::new(1_000);
        std::thread::sleep(Duration::from_millis(50));
        let second = ScaledClock::new(1_000);
        let (a, b) = (first.now(), second.now());
        let gap = if a > b { a.since(b) } else { b.since(a) };
        // Counted from each one's start they would differ by 50 s of engine
        // time; what is left is how far apart the two reads were.
        assert!(gap < Duration::from_secs(5), "{gap:?}");
        assert!(a > system_now(), "engine time runs ahead of the day");
    }

    #[tokio::test]
    async fn manual_sleepers_wake_only_when_time_passes_them() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000));
        let sleeper = tokio::spawn(clock.sleep_until(Timestamp::from_millis(5_000)));
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!sleeper.is_finished(), "woke before its time");
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(clock.now(), Timestamp::from_millis(5_000));
        clock.set(Timestamp::from_millis(10));
        assert_eq!(clock.now(), Timestamp::from_millis(5_000), "never backwards");
    }

    #[test]
    fn scaled_clock_converts_both_ways() {
        let c = ScaledClock::new(600);
        assert_eq!(c.engine_span(Duration::from_secs(1)), Duration::from_secs(600));
        assert_eq!(c.real_span(Duration::from_secs(600)), Duration::from_secs(1));
        let before = c.now();
        std::thread::sleep(Duration::from_millis(10));
        assert!(
            c.now().since(before) >= Duration::from_secs(6),
            "ten real ms are six engine seconds"
        );
        assert_eq!(ScaledClock::new(0).scale(), 1);
    }

    #[test]
    fn system_clock_is_wall_time() {
        let a = SystemClock.now();
        assert!(a.as_millis() > 1_700_000_000_000);
        assert_eq!(SystemClock.engine_span(Duration::from_secs(3)), Duration::from_secs(3));
    }
}
