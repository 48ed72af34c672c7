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
//! - [`ScaledClock`], for `jadpo dev --time-scale N`: N times faster, from
//!   the anchor its store keeps, so every process and command on that store
//!   reads the same engine time ([`for_store`]).

use futures::future::BoxFuture;
use jadpo_core::clock::{self, Anchor, Choice, Refusal, Wanted};
use jadpo_core::Timestamp;
use jadpo_store::{Store, StoreError};
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

    /// The store's scaled clock this one runs on; `None` for real time (and
    /// a test's manual clock). Views say "scaled" when it is `Some`.
    fn anchor(&self) -> Option<Anchor> {
        None
    }
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

/// Engine time runs `scale` times faster than real time, as a function of
/// real time given by an [`Anchor`] its store keeps: processes that read the
/// same anchor agree on engine time however far apart they started (to the
/// agreement of their machines' clocks, times the scale).
///
/// The wall clock is read once, at construction; from then on time moves
/// with the monotonic clock, so a wall-clock step does not move engine time
/// by `scale` times as much, backwards or forwards. That one read is exact
/// (to the nanosecond, paired tightly with the monotonic clock): its error
/// stays with the process for good, times the scale.
#[derive(Clone, Debug)]
pub struct ScaledClock {
    anchor: Anchor,
    /// Engine time at `start_real`, since the Unix epoch.
    start_engine: Duration,
    start_real: Instant,
}

/// The wall clock and the monotonic clock read together. Of a few tries,
/// the one whose two monotonic reads around the wall clock's are closest:
/// a preemption between the reads (milliseconds on a loaded machine, a
/// second of engine time at 120x) would otherwise become this process's
/// disagreement with every other on the store.
fn wall_and_instant() -> (Duration, Instant) {
    let mut best: Option<(Duration, Duration, Instant)> = None;
    for _ in 0..16 {
        let before = Instant::now();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let gap = before.elapsed();
        if best.as_ref().is_none_or(|(g, _, _)| gap < *g) {
            best = Some((gap, wall, before + gap / 2));
        }
        if gap <= Duration::from_micros(5) {
            break;
        }
    }
    let (_, wall, at) = best.expect("at least one try");
    (wall, at)
}

impl ScaledClock {
    /// A clock `scale` times faster whose engine time starts now at real
    /// time, for a store of its own (the demo's). `scale` of 0 is taken as 1.
    pub fn new(scale: u32) -> ScaledClock {
        ScaledClock::from_anchor(Anchor::first(scale.max(1), system_now()))
    }

    /// The clock a store's anchor gives.
    pub fn from_anchor(anchor: Anchor) -> ScaledClock {
        let anchor = Anchor {
            scale: anchor.scale.max(1),
            ..anchor
        };
        let (wall, start_real) = wall_and_instant();
        ScaledClock {
            anchor,
            start_engine: anchor.engine_at_exact(wall),
            start_real,
        }
    }

    pub fn scale(&self) -> u32 {
        self.anchor.scale
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Timestamp {
        let engine = self
            .start_engine
            .saturating_add(self.engine_span(self.start_real.elapsed()));
        Timestamp::from_millis(i64::try_from(engine.as_millis()).unwrap_or(i64::MAX))
    }

    fn sleep_until(&self, t: Timestamp) -> BoxFuture<'static, ()> {
        let wait = self.real_span(t.since(self.now()));
        Box::pin(tokio::time::sleep(wait))
    }

    fn engine_span(&self, real: Duration) -> Duration {
        real.saturating_mul(self.anchor.scale)
    }

    fn real_span(&self, engine: Duration) -> Duration {
        engine / self.anchor.scale
    }

    fn anchor(&self) -> Option<Anchor> {
        Some(self.anchor)
    }
}

/// Why a start could not have the clock it asked for.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClockError {
    /// `clock.scale_mismatch`, `clock.store_scaled`: the store keeps a
    /// scaled clock this start cannot run on (docs/decisions.md, "One
    /// scaled clock per store").
    Refused(Refusal),
    /// The store's clock could not be read.
    Store(StoreError),
}

impl ClockError {
    /// The stable code, the same the command line shows.
    pub fn code(&self) -> &'static str {
        match self {
            ClockError::Refused(r) => r.code(),
            ClockError::Store(StoreError::Unavailable(_)) => "store.unavailable",
            ClockError::Store(_) => "store.failed",
        }
    }
}

impl std::fmt::Display for ClockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockError::Refused(Refusal::ScaleMismatch { store, wanted }) => write!(
                f,
                "this store's clock runs {}x faster ({}); a process on it cannot run at {}: \
                 start with `--time-scale {}` (or without it, to follow the store), or use a new store",
                store.scale,
                anchor_text(store),
                if *wanted <= 1 {
                    "real time".to_string()
                } else {
                    format!("{wanted}x")
                },
                store.scale,
            ),
            ClockError::Refused(Refusal::StoreScaled { store }) => write!(
                f,
                "this store's clock runs {}x faster ({}), and this process runs on real time only: \
                 its rows hold engine times ahead of the wall clock; use a store that never ran \
                 with --time-scale",
                store.scale,
                anchor_text(store),
            ),
            ClockError::Store(e) => write!(f, "cannot read the store's clock: {e}"),
        }
    }
}

impl std::error::Error for ClockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClockError::Store(e) => Some(e),
            ClockError::Refused(_) => None,
        }
    }
}

/// `600x since 2026-12-02T04:16:24Z`: how views name a scaled clock.
pub fn anchor_text(a: &Anchor) -> String {
    let since = jiff::Timestamp::from_millisecond(a.real.as_millis())
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
        .unwrap_or_else(|_| a.real.to_string());
    format!("scaled {}x since {since}", a.scale)
}

/// The clock a process or command runs on with `store`: real time, or the
/// scaled clock the store keeps (kept now, when this is the first scaled
/// start on it). See `jadpo_core::clock::choose` for every case.
pub async fn for_store<S: Store>(store: &S, wanted: Wanted) -> Result<SharedClock, ClockError> {
    let stored = store.clock_anchor().await.map_err(ClockError::Store)?;
    let mut choice = clock::choose(wanted, stored, system_now()).map_err(ClockError::Refused)?;
    if let Choice::Keep(anchor) = choice {
        let kept = store.keep_clock_anchor(anchor).await.map_err(ClockError::Store)?;
        choice = clock::choose(wanted, Some(kept), system_now()).map_err(ClockError::Refused)?;
    }
    Ok(match choice {
        Choice::Real => Arc::new(SystemClock),
        Choice::Scaled(anchor) => Arc::new(ScaledClock::from_anchor(anchor)),
        Choice::Keep(_) => unreachable!("a kept anchor is chosen as Scaled"),
    })
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

    /// A clock made from a store's anchor reads engine time as the anchor
    /// gives it, not from its own start: a process starting an hour after
    /// the anchor was kept is 600 hours of engine time past it. (The exact
    /// function is the core's, property-tested there; this bounds only what
    /// real time cannot make flaky: at least the hour, at most a day more.)
    #[test]
    fn a_clock_made_late_from_an_anchor_reads_the_anchors_engine_time() {
        let hour_ago = system_now().minus(Duration::from_secs(3600));
        let anchor = Anchor {
            scale: 600,
            real: hour_ago,
            engine: Timestamp::from_millis(1_000),
        };
        let late = ScaledClock::from_anchor(anchor);
        let engine = late.now().since(anchor.engine);
        assert!(engine >= Duration::from_secs(600 * 3600), "{engine:?}");
        assert!(engine < Duration::from_secs(600 * (3600 + 86_400)), "{engine:?}");
        assert_eq!(late.anchor(), Some(anchor));
        assert_eq!(SystemClock.anchor(), None);
    }

    /// Clocks built from one anchor at different moments (two processes on
    /// one store) read the same engine time: each starts from an exact read
    /// of the wall clock. One rounded to the millisecond started up to a
    /// second of engine time apart at 1000x.
    #[test]
    fn clocks_built_apart_from_one_anchor_agree() {
        // 50 ms of engine time at 1000x: 50 us of real time.
        const NEAR: Duration = Duration::from_millis(50);
        let anchor = Anchor::first(1_000, system_now().minus(Duration::from_secs(1)));
        let first = ScaledClock::from_anchor(anchor);
        // Built over a few milliseconds: at every fraction of one.
        let building = Instant::now();
        while building.elapsed() < Duration::from_millis(5) {
            let later = ScaledClock::from_anchor(anchor);
            let (a, b, c) = (first.now(), later.now(), first.now());
            assert!(
                b >= a.minus(NEAR) && b <= c.plus(NEAR),
                "a clock built later reads {b}, the first read {a} before it and {c} after"
            );
        }
    }

    /// Every start goes through the store: the first scaled start keeps its
    /// anchor, later starts follow it or are refused, and nothing a refused
    /// start asked for is written.
    #[tokio::test]
    async fn for_store_keeps_the_first_scaled_start_and_follows_it() {
        use jadpo_store::memory::SharedMemoryStore;
        let store = SharedMemoryStore::new(jadpo_core::BreakerPolicy::default());
        let real = for_store(&store, Wanted::Store).await.unwrap();
        assert_eq!(real.anchor(), None, "a new store runs on real time");
        assert_eq!(
            store.clock_anchor().await.unwrap(),
            None,
            "and following it keeps nothing"
        );
        let first = for_store(&store, Wanted::Scale(600)).await.unwrap();
        let kept = store.clock_anchor().await.unwrap().expect("kept");
        assert_eq!((first.anchor(), kept.scale), (Some(kept), 600));
        let gap = system_now().since(first.now()).max(first.now().since(system_now()));
        assert!(gap < Duration::from_secs(3600), "dates look like today's: {gap:?}");
        for wanted in [Wanted::Store, Wanted::Scale(600)] {
            assert_eq!(for_store(&store, wanted).await.unwrap().anchor(), Some(kept));
        }
        let e = for_store(&store, Wanted::Scale(60)).await.err().unwrap();
        assert_eq!(e.code(), "clock.scale_mismatch");
        assert!(e.to_string().contains("--time-scale 600"), "{e}");
        let e = for_store(&store, Wanted::Real).await.err().unwrap();
        assert_eq!(e.code(), "clock.store_scaled");
        assert_eq!(
            store.clock_anchor().await.unwrap(),
            Some(kept),
            "refusals write nothing"
        );
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
