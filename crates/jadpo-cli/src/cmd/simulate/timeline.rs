//! A connection's behaviour over a scenario's time, as plain data, and the
//! one decision made from it: how a call or a publish sent at a given time
//! ends. Pure: the time and the random draw are passed in.

use rand::Rng;
use std::time::Duration;

/// Up (answering, some calls failing as `fail` says) or down (every call
/// ending as `answer` says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Up,
    Down,
}

/// How a failing call or publish ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// An HTTP status, 400 to 599.
    Status(u16),
    /// No answer: the call waits out its connection's `timeout:` (a
    /// publish: no confirmation).
    Timeout,
    /// The connection refused: nothing left.
    Refused,
    /// A broker pushing back (a memory alarm, `OOM`).
    Overloaded,
    /// Nothing takes the message (unroutable, no stream).
    NoTarget,
    /// The broker refused the message (a nack).
    Rejected,
    /// Credentials or permission refused.
    Unauthorized,
}

impl Answer {
    /// An answer's name in a scenario; `broker`: for a broker connection.
    pub(crate) fn parse(text: &str, broker: bool) -> Option<Answer> {
        Some(match text {
            "timeout" => Answer::Timeout,
            "refused" => Answer::Refused,
            "overloaded" if broker => Answer::Overloaded,
            "no_target" if broker => Answer::NoTarget,
            "rejected" if broker => Answer::Rejected,
            "unauthorized" if broker => Answer::Unauthorized,
            status if !broker => match status.parse::<u16>() {
                Ok(s) if (400..=599).contains(&s) => Answer::Status(s),
                _ => return None,
            },
            _ => return None,
        })
    }
}

/// How long an answer takes: fixed, or drawn evenly from a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Latency {
    pub min: Duration,
    pub max: Duration,
}

impl Latency {
    pub(crate) const DEFAULT: Latency = Latency {
        min: Duration::from_millis(50),
        max: Duration::from_millis(50),
    };

    /// `80ms` or `50ms..300ms`.
    pub(crate) fn parse(text: &str) -> Option<Latency> {
        let (min, max) = match text.split_once("..") {
            Some((a, b)) => (duration(a)?, duration(b)?),
            None => {
                let d = duration(text)?;
                (d, d)
            }
        };
        (min <= max).then_some(Latency { min, max })
    }

    fn draw(self, rng: &mut impl Rng) -> Duration {
        if self.min == self.max {
            return self.min;
        }
        let (a, b) = (self.min.as_micros() as u64, self.max.as_micros() as u64);
        Duration::from_micros(rng.random_range(a..=b))
    }
}

/// `500ms`, `30s`, `5m`, `2h`, `7d`.
pub(crate) fn duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(unit_ms)?))
}

/// From `from` on (scenario time), until the next phase.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Phase {
    pub from: Duration,
    pub state: State,
    pub latency: Latency,
    /// What a call gets while down.
    pub answer: Answer,
    /// Sent with a status answer (a 429's or a 503's `Retry-After`).
    pub retry_after: Option<Duration>,
    /// While up: the fraction of calls that end each way instead.
    pub fail: Vec<(Answer, f64)>,
}

impl Phase {
    /// Up all along: what a connection the scenario does not name does.
    pub(crate) fn always_up() -> Phase {
        Phase {
            from: Duration::ZERO,
            state: State::Up,
            latency: Latency::DEFAULT,
            answer: Answer::Status(503),
            retry_after: None,
            fail: Vec::new(),
        }
    }
}

/// The phase in force at `t`: the last to start at or before it, or the
/// first (a timeline that starts late is in its first phase until then).
pub(crate) fn phase_at(phases: &[Phase], t: Duration) -> Option<usize> {
    if phases.is_empty() {
        return None;
    }
    Some(phases.iter().rposition(|p| p.from <= t).unwrap_or(0))
}

/// How a send at a time in `phase` ends: its latency, and its answer, or
/// `None` for a success.
pub(crate) fn decide(phase: &Phase, rng: &mut impl Rng) -> (Duration, Option<Answer>) {
    let latency = phase.latency.draw(rng);
    match phase.state {
        State::Down => (latency, Some(phase.answer)),
        State::Up => {
            if phase.fail.is_empty() {
                return (latency, None);
            }
            let mut r: f64 = rng.random();
            for (answer, share) in &phase.fail {
                if r < *share {
                    return (latency, Some(*answer));
                }
                r -= share;
            }
            (latency, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn phase(from: u64, state: State) -> Phase {
        Phase {
            from: Duration::from_secs(from),
            state,
            ..Phase::always_up()
        }
    }

    #[test]
    fn the_phase_in_force_is_the_last_started() {
        let t = [phase(0, State::Up), phase(3600, State::Down), phase(7200, State::Up)];
        let s = Duration::from_secs;
        let table = [(0, 0), (3599, 0), (3600, 1), (7199, 1), (7200, 2), (99_999, 2)];
        for (at, want) in table {
            assert_eq!(phase_at(&t, s(at)), Some(want), "{at}");
        }
        assert_eq!(
            phase_at(&[phase(60, State::Down)], s(0)),
            Some(0),
            "before the first: the first"
        );
        assert_eq!(phase_at(&[], s(0)), None);
    }

    #[test]
    fn answers_are_named_per_driver() {
        let table: &[(&str, bool, Option<Answer>)] = &[
            ("503", false, Some(Answer::Status(503))),
            ("429", false, Some(Answer::Status(429))),
            ("200", false, None),
            ("600", false, None),
            ("timeout", false, Some(Answer::Timeout)),
            ("refused", true, Some(Answer::Refused)),
            ("overloaded", true, Some(Answer::Overloaded)),
            ("overloaded", false, None),
            ("503", true, None),
            ("down", false, None),
        ];
        for (text, broker, want) in table {
            assert_eq!(Answer::parse(text, *broker), *want, "{text} broker={broker}");
        }
    }

    #[test]
    fn latencies_are_a_duration_or_a_range() {
        let ms = Duration::from_millis;
        assert_eq!(
            Latency::parse("80ms"),
            Some(Latency {
                min: ms(80),
                max: ms(80)
            })
        );
        assert_eq!(
            Latency::parse("50ms..2s"),
            Some(Latency {
                min: ms(50),
                max: ms(2000)
            })
        );
        for bad in ["", "2s..50ms", "fast", "50..80"] {
            assert_eq!(Latency::parse(bad), None, "{bad}");
        }
    }

    /// Down, every call ends as `answer`; up, the `fail` shares hold over
    /// many draws (within 1 %), and the latency stays in its range.
    #[test]
    fn a_send_ends_by_its_phase() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let down = Phase {
            answer: Answer::Timeout,
            ..phase(0, State::Down)
        };
        assert_eq!(decide(&down, &mut rng).1, Some(Answer::Timeout));
        let up = Phase {
            latency: Latency::parse("10ms..20ms").unwrap(),
            fail: vec![(Answer::Status(503), 0.2), (Answer::Timeout, 0.05)],
            ..phase(0, State::Up)
        };
        let n = 100_000;
        let (mut s503, mut timeouts) = (0, 0);
        for _ in 0..n {
            let (latency, answer) = decide(&up, &mut rng);
            assert!((Duration::from_millis(10)..=Duration::from_millis(20)).contains(&latency));
            match answer {
                Some(Answer::Status(503)) => s503 += 1,
                Some(Answer::Timeout) => timeouts += 1,
                None => {}
                other => panic!("{other:?}"),
            }
        }
        assert!((s503 as f64 / n as f64 - 0.2).abs() < 0.01, "{s503}");
        assert!((timeouts as f64 / n as f64 - 0.05).abs() < 0.01, "{timeouts}");
    }
}
