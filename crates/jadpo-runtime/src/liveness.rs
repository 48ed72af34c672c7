//! Whether an engine's loops are alive, for `GET /livez`: the claim loop
//! (the worker), the completer and the tick each beat at every turn and
//! while they wait, and a loop that has not beaten for a few of its
//! intervals is stalled.
//!
//! On the process's own monotonic time, never the engine's clock: a scaled
//! clock runs engine time many times faster and a manual one stands still,
//! and neither says anything about whether a loop still turns.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One of the loops `/livez` answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loop {
    /// The claim loop: claims, queues and starts runs (`worker.rs`).
    Worker,
    /// Writes finished runs' outcomes in batches (`completer.rs`).
    Completer,
    /// The sweep every second, retention and schedules (`tick.rs`).
    Tick,
}

impl Loop {
    pub const ALL: [Loop; 3] = [Loop::Worker, Loop::Completer, Loop::Tick];

    /// Its name in `/livez`'s answer.
    pub fn name(self) -> &'static str {
        match self {
            Loop::Worker => "worker",
            Loop::Completer => "completer",
            Loop::Tick => "tick",
        }
    }

    /// The longest a healthy loop goes between beats, its store calls
    /// aside: the worker and the tick beat at least every [`BEAT`] while
    /// they wait; the completer may sleep a store's backoff (at most 5 s)
    /// between two tries of a batch.
    pub fn interval(self) -> Duration {
        match self {
            Loop::Worker | Loop::Tick => BEAT,
            Loop::Completer => Duration::from_secs(5),
        }
    }

    /// Silent this long, the loop is stalled: a few of its intervals, and
    /// never less than [`STALL_FLOOR`], because one turn may wait on the
    /// store through several calls, each bounded by the store's own
    /// timeouts (5 s). A slow store is `/readyz`'s to report; restarting
    /// the process for it would not make the store answer.
    pub fn stalled_after(self) -> Duration {
        (self.interval() * STALL_INTERVALS).max(STALL_FLOOR)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How often a waiting loop beats.
pub const BEAT: Duration = Duration::from_secs(1);

/// How many of its intervals a loop may miss before it counts as stalled.
pub const STALL_INTERVALS: u32 = 3;

/// The least silence that counts as stalled (see [`Loop::stalled_after`]).
pub const STALL_FLOOR: Duration = Duration::from_secs(30);

/// One loop as `/livez` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopHealth {
    pub name: &'static str,
    /// `None` until the loop's first beat.
    pub quiet: Option<Duration>,
    /// The loop returned (the engine stopped, or the loop panicked).
    pub stopped: bool,
    pub stalled_after: Duration,
}

impl LoopHealth {
    /// Started, not stopped, and beaten within its allowance.
    pub fn alive(&self) -> bool {
        !self.stopped && self.quiet.is_some_and(|q| q <= self.stalled_after)
    }
}

/// The beats of one engine's loops.
pub struct Liveness {
    origin: Instant,
    /// Each loop's last beat, in milliseconds after `origin` plus one: 0 is
    /// never.
    beats: [AtomicU64; 3],
    stopped: [AtomicBool; 3],
    /// Added to the process's time by a test, so that a loop looks silent
    /// without the test waiting for real.
    #[cfg(feature = "testing")]
    skew_ms: AtomicU64,
    /// Loops whose beats a test drops, as if they were stuck.
    #[cfg(feature = "testing")]
    frozen: [AtomicBool; 3],
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            origin: Instant::now(),
            beats: Default::default(),
            stopped: Default::default(),
            #[cfg(feature = "testing")]
            skew_ms: AtomicU64::new(0),
            #[cfg(feature = "testing")]
            frozen: Default::default(),
        }
    }
}

impl Liveness {
    /// The process's monotonic time since this engine was made.
    fn now(&self) -> Duration {
        let now = self.origin.elapsed();
        #[cfg(feature = "testing")]
        let now = now + Duration::from_millis(self.skew_ms.load(Ordering::Relaxed));
        now
    }

    /// The loop moved now.
    pub(crate) fn beat(&self, l: Loop) {
        self.beat_at(l, self.now());
    }

    fn beat_at(&self, l: Loop, at: Duration) {
        #[cfg(feature = "testing")]
        if self.frozen[l.index()].load(Ordering::Relaxed) {
            return;
        }
        let ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX - 1) + 1;
        self.beats[l.index()].store(ms, Ordering::Relaxed);
        self.stopped[l.index()].store(false, Ordering::Relaxed);
    }

    /// A guard that beats once now and marks the loop stopped when dropped:
    /// when it returns, or its task panics or is aborted.
    pub(crate) fn running(&self, l: Loop) -> Running<'_> {
        self.beat(l);
        Running { liveness: self, l }
    }

    /// Every loop as it stands now.
    pub fn report(&self) -> Vec<LoopHealth> {
        self.report_at(self.now())
    }

    fn report_at(&self, now: Duration) -> Vec<LoopHealth> {
        Loop::ALL
            .iter()
            .map(|&l| {
                let beat = self.beats[l.index()].load(Ordering::Relaxed);
                LoopHealth {
                    name: l.name(),
                    quiet: (beat > 0).then(|| now.saturating_sub(Duration::from_millis(beat - 1))),
                    stopped: self.stopped[l.index()].load(Ordering::Relaxed),
                    stalled_after: l.stalled_after(),
                }
            })
            .collect()
    }

    /// Moves this engine's view of the process's time on by `by`, so every
    /// loop's last beat looks that much older until it beats again.
    #[cfg(feature = "testing")]
    pub fn skew(&self, by: Duration) {
        self.skew_ms.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }

    /// Drops `l`'s beats from now on, as if it were stuck.
    #[cfg(feature = "testing")]
    pub fn freeze(&self, l: Loop) {
        self.frozen[l.index()].store(true, Ordering::Relaxed);
    }
}

/// A running loop's mark: stopped once dropped.
pub(crate) struct Running<'a> {
    liveness: &'a Liveness,
    l: Loop,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.liveness.stopped[self.l.index()].store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(report: &[LoopHealth], l: Loop) -> LoopHealth {
        report.iter().find(|h| h.name == l.name()).unwrap().clone()
    }

    #[test]
    fn a_loop_is_alive_until_it_has_been_silent_past_its_allowance() {
        let live = Liveness::default();
        let t0 = Duration::from_secs(100);
        for l in Loop::ALL {
            live.beat_at(l, t0);
        }
        let after = Loop::Worker.stalled_after();
        assert!(of(&live.report_at(t0 + after), Loop::Worker).alive());
        let late = of(&live.report_at(t0 + after + Duration::from_millis(1)), Loop::Worker);
        assert!(!late.alive());
        assert_eq!(late.quiet, Some(after + Duration::from_millis(1)));
        live.beat_at(Loop::Worker, t0 + after * 2);
        assert!(of(&live.report_at(t0 + after * 2), Loop::Worker).alive());
    }

    #[test]
    fn a_loop_never_started_or_stopped_is_not_alive() {
        let live = Liveness::default();
        let never = of(&live.report_at(Duration::from_secs(1)), Loop::Tick);
        assert_eq!(never.quiet, None);
        assert!(!never.alive());
        {
            let _running = live.running(Loop::Tick);
            assert!(of(&live.report(), Loop::Tick).alive());
        }
        let stopped = of(&live.report(), Loop::Tick);
        assert!(stopped.stopped && !stopped.alive());
    }

    #[test]
    fn each_loop_is_stalled_after_a_few_intervals_and_never_within_the_stores_timeouts() {
        for l in Loop::ALL {
            assert!(l.stalled_after() >= l.interval() * STALL_INTERVALS, "{l:?}");
            assert!(l.stalled_after() >= STALL_FLOOR, "{l:?}");
        }
    }
}
