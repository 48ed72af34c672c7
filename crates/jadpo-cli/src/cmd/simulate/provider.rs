//! The scenario's providers: every connection of the app answered by its
//! timeline at the scenario time each send leaves, with the calls counted
//! per phase for the report.

use super::timeline::{decide, phase_at, Answer, Phase, State};
use jadpo_core::publish::PublishEnd;
use jadpo_runtime::connection::simulated::Provider;
use jadpo_runtime::connection::Answer as Reply;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Sends to one connection, by phase of its timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counted {
    /// Sends in each phase.
    pub sends: Vec<u64>,
    /// Sends in the first minute of each phase that follows a "down" one.
    pub first_minute: Vec<u64>,
}

pub(crate) struct ScenarioProvider {
    timelines: BTreeMap<String, Vec<Phase>>,
    state: Mutex<Book>,
}

struct Book {
    rng: ChaCha8Rng,
    /// The run's start: its scenario time and the clock's reading then.
    anchor: (Duration, Instant),
    counted: BTreeMap<String, Counted>,
}

impl ScenarioProvider {
    /// Every connection in `connections` follows its timeline in
    /// `timelines`, or is up all along.
    pub(crate) fn new(
        connections: impl IntoIterator<Item = String>,
        timelines: &BTreeMap<String, Vec<Phase>>,
        seed: u64,
    ) -> ScenarioProvider {
        let timelines: BTreeMap<String, Vec<Phase>> = connections
            .into_iter()
            .map(|c| {
                let t = timelines.get(&c).cloned().unwrap_or_else(|| vec![Phase::always_up()]);
                (c, t)
            })
            .collect();
        let counted = timelines
            .iter()
            .map(|(c, t)| {
                let n = t.len();
                (
                    c.clone(),
                    Counted {
                        sends: vec![0; n],
                        first_minute: vec![0; n],
                    },
                )
            })
            .collect();
        ScenarioProvider {
            timelines,
            state: Mutex::new(Book {
                rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7072_6f76_6964_6572),
                anchor: (Duration::ZERO, Instant::now()),
                counted,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run starts at scenario time `at`, the clock reading `now`.
    pub(crate) fn anchor(&self, at: Duration, now: Instant) {
        self.lock().anchor = (at, now);
    }

    /// Each connection's timeline and what was sent to it.
    pub(crate) fn counted(&self) -> Vec<(String, Vec<Phase>, Counted)> {
        let s = self.lock();
        self.timelines
            .iter()
            .map(|(c, t)| (c.clone(), t.clone(), s.counted[c].clone()))
            .collect()
    }

    /// A send to `connection` now: its latency and how it ends.
    fn send(&self, connection: &str) -> (Duration, Option<Answer>, Option<Duration>) {
        let mut s = self.lock();
        let t = s.anchor.0 + Instant::now().saturating_duration_since(s.anchor.1);
        let Some(phases) = self.timelines.get(connection) else {
            return (Duration::ZERO, None, None);
        };
        let Some(i) = phase_at(phases, t) else {
            return (Duration::ZERO, None, None);
        };
        let phase = &phases[i];
        let (latency, answer) = decide(phase, &mut s.rng);
        let counted = s.counted.get_mut(connection).expect("counted from the start");
        counted.sends[i] += 1;
        let after_down = i > 0 && phases[i - 1].state == State::Down;
        if after_down && t < phase.from + Duration::from_secs(60) {
            counted.first_minute[i] += 1;
        }
        (latency, answer, phase.retry_after)
    }
}

impl Provider for ScenarioProvider {
    fn call(&self, connection: &str, _method: &'static str, _path: &str) -> (Duration, Reply) {
        let (latency, answer, retry_after) = self.send(connection);
        let reply = match answer {
            None => Reply::status(200),
            Some(Answer::Status(status)) => {
                let reply = Reply::status(status);
                match retry_after {
                    Some(after) => reply.with_header("retry-after", &after.as_secs().to_string()),
                    None => reply,
                }
            }
            Some(Answer::Timeout) => Reply::TimedOut,
            Some(Answer::Refused) => Reply::NeverLeft,
            // A broker's answers are refused for an HTTP connection when
            // the scenario is read.
            Some(_) => Reply::NeverLeft,
        };
        (latency, reply)
    }

    fn publish(&self, connection: &str, _target: &str) -> (Duration, PublishEnd) {
        let (latency, answer, _) = self.send(connection);
        let end = match answer {
            None => PublishEnd::Confirmed,
            Some(Answer::Timeout) => PublishEnd::Unconfirmed,
            Some(Answer::Refused) => PublishEnd::NeverLeft,
            Some(Answer::Overloaded) => PublishEnd::Overloaded,
            Some(Answer::NoTarget) => PublishEnd::NoTarget,
            Some(Answer::Rejected | Answer::Status(_)) => PublishEnd::Refused,
            Some(Answer::Unauthorized) => PublishEnd::Unauthorized,
        };
        (latency, end)
    }

    fn resend_seed(&self, _connection: &str) -> u64 {
        self.lock().rng.random()
    }
}
