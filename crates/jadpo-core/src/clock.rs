//! Which clock a process runs on, decided once per store at its start
//! (docs/decisions.md, "One scaled clock per store").
//!
//! A store that a process first started on with `--time-scale N` keeps an
//! [`Anchor`]: the scale and one instant of real time with the engine time
//! it maps to. Engine time is then a function of real time alone, so every
//! process and command on that store (a second `jadpo dev`, `jadpo emit`,
//! `jadpo retry`, the console) reads the same engine time however late it
//! starts, and the first start's dates look like today's because the anchor
//! maps real "now" to itself.
//!
//! A store without an anchor runs on real time. The anchor is never moved:
//! rows hold engine times, and moving the clock under them would make a
//! lease or a backoff written by one process mean another time to the next.

use crate::Timestamp;

/// A store's scaled clock: engine time runs `scale` times faster than real
/// time, and real time `real` is engine time `engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// At least 2: a scale of 1 is real time and keeps no anchor.
    pub scale: u32,
    pub real: Timestamp,
    pub engine: Timestamp,
}

impl Anchor {
    /// The anchor a first scaled start writes: engine time starts at the
    /// real time of that start.
    pub fn first(scale: u32, real_now: Timestamp) -> Anchor {
        Anchor {
            scale,
            real: real_now,
            engine: real_now,
        }
    }

    /// Engine time at real time `real`. Real time before the anchor (a
    /// machine whose clock is behind the one that wrote it) reads as the
    /// anchor's engine time: engine time never runs backwards from it.
    pub fn engine_at(&self, real: Timestamp) -> Timestamp {
        self.engine.plus(real.since(self.real).saturating_mul(self.scale))
    }

    /// As [`Anchor::engine_at`], to the nanosecond: `real` and the result
    /// are spans since the Unix epoch. A millisecond of real time is
    /// `scale` ms of engine time, so a clock that took real time to the
    /// millisecond would start up to `scale` ms away from another's.
    pub fn engine_at_exact(&self, real: std::time::Duration) -> std::time::Duration {
        let ms = |t: Timestamp| std::time::Duration::from_millis(u64::try_from(t.as_millis()).unwrap_or(0));
        ms(self.engine).saturating_add(real.saturating_sub(ms(self.real)).saturating_mul(self.scale))
    }
}

/// What a process or command asks for at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Whatever clock the store keeps: real time, or its anchor. Operator
    /// commands, the embedded API by default, `jadpo dev` without
    /// `--time-scale`.
    Store,
    /// `jadpo dev --time-scale N`: N times faster; 1 is real time.
    Scale(u32),
    /// Real time only: `jadpo serve`, where a scaled store is a mistake.
    Real,
}

/// The clock a start runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Real,
    Scaled(Anchor),
    /// The store has no anchor yet: keep this one, unless another process
    /// kept one first, then decide again with what the store kept.
    Keep(Anchor),
}

/// Why a start was refused. Nothing is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `clock.scale_mismatch`: the store's clock runs at another scale.
    ScaleMismatch { store: Anchor, wanted: u32 },
    /// `clock.store_scaled`: real time was asked of a store whose clock is
    /// scaled.
    StoreScaled { store: Anchor },
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::ScaleMismatch { .. } => "clock.scale_mismatch",
            Refusal::StoreScaled { .. } => "clock.store_scaled",
        }
    }
}

/// Decides the clock of a start on a store that keeps `stored`.
///
/// Two scales on one store would disagree on every time they wrote, and
/// engine time cannot go back to real time without leaving rows months
/// ahead of it, so either is refused rather than reconciled.
pub fn choose(wanted: Wanted, stored: Option<Anchor>, real_now: Timestamp) -> Result<Choice, Refusal> {
    match (wanted, stored) {
        (Wanted::Store | Wanted::Real, None) => Ok(Choice::Real),
        (Wanted::Store, Some(a)) => Ok(Choice::Scaled(a)),
        (Wanted::Real, Some(a)) => Err(Refusal::StoreScaled { store: a }),
        (Wanted::Scale(n), None) if n <= 1 => Ok(Choice::Real),
        (Wanted::Scale(n), None) => Ok(Choice::Keep(Anchor::first(n, real_now))),
        (Wanted::Scale(n), Some(a)) if a.scale == n => Ok(Choice::Scaled(a)),
        (Wanted::Scale(n), Some(a)) => Err(Refusal::ScaleMismatch { store: a, wanted: n }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    const NOW: i64 = 1_764_650_000_000;

    #[test]
    fn every_start_on_every_store() {
        let a = Anchor {
            scale: 600,
            real: at(NOW - 60_000),
            engine: at(NOW - 60_000),
        };
        use Choice::{Keep, Scaled};
        use Wanted::{Scale, Store};
        let real = Ok(Choice::Real);
        let table: &[(Wanted, Option<Anchor>, Result<Choice, Refusal>)] = &[
            (Store, None, real),
            (Wanted::Real, None, real),
            (Scale(1), None, real),
            (Scale(0), None, real),
            (Scale(600), None, Ok(Keep(Anchor::first(600, at(NOW))))),
            (Store, Some(a), Ok(Scaled(a))),
            (Scale(600), Some(a), Ok(Scaled(a))),
            (Scale(60), Some(a), Err(Refusal::ScaleMismatch { store: a, wanted: 60 })),
            (Scale(1), Some(a), Err(Refusal::ScaleMismatch { store: a, wanted: 1 })),
            (Wanted::Real, Some(a), Err(Refusal::StoreScaled { store: a })),
        ];
        for (wanted, stored, expected) in table {
            assert_eq!(choose(*wanted, *stored, at(NOW)), *expected, "{wanted:?} on {stored:?}");
        }
    }

    #[test]
    fn the_first_anchor_reads_as_real_time_at_its_start() {
        let a = Anchor::first(600, at(NOW));
        assert_eq!(a.engine_at(at(NOW)), at(NOW));
        assert_eq!(a.engine_at(at(NOW + 1_000)), at(NOW + 600_000));
        assert_eq!(a.engine_at(at(NOW - 5_000)), at(NOW), "never before the anchor");
    }

    #[test]
    fn exact_engine_time_keeps_the_fraction_of_a_millisecond() {
        let a = Anchor::first(1_000, at(NOW));
        let real = |us: u64| Duration::from_millis(NOW as u64) + Duration::from_micros(us);
        let engine = |ms: u64| Duration::from_millis(NOW as u64 + ms);
        assert_eq!(a.engine_at_exact(real(0)), engine(0));
        assert_eq!(a.engine_at_exact(real(1_500)), engine(1_500), "1.5 ms real, not 1");
        assert_eq!(a.engine_at_exact(real(7)), engine(7));
        assert_eq!(
            a.engine_at_exact(Duration::from_millis(NOW as u64 - 5)),
            engine(0),
            "never before the anchor"
        );
        assert_eq!(
            a.engine_at_exact(real(2_000_000)),
            Duration::from_millis(a.engine_at(at(NOW + 2_000)).as_millis() as u64),
            "agrees with engine_at on whole milliseconds"
        );
    }

    #[test]
    fn codes_are_stable() {
        let a = Anchor::first(2, at(0));
        assert_eq!(Refusal::StoreScaled { store: a }.code(), "clock.store_scaled");
        assert_eq!(
            Refusal::ScaleMismatch { store: a, wanted: 3 }.code(),
            "clock.scale_mismatch"
        );
    }

    proptest! {
        /// Two processes that read the anchor at any two real times agree
        /// on engine time to the scale of the gap between their reads, and
        /// engine time never runs backwards.
        #[test]
        fn engine_time_is_a_monotonic_function_of_real_time(
            scale in 2u32..=100_000,
            anchor in 0i64..4_000_000_000_000,
            a in 0i64..400_000_000,
            b in 0i64..400_000_000,
        ) {
            let anchor = Anchor::first(scale, at(anchor));
            let (early, late) = (a.min(b), a.max(b));
            let (e1, e2) = (anchor.engine_at(at(anchor.real.as_millis() + early)),
                            anchor.engine_at(at(anchor.real.as_millis() + late)));
            prop_assert!(e1 <= e2);
            prop_assert_eq!(e2.since(e1), Duration::from_millis((late - early) as u64) * scale);
        }
    }
}
