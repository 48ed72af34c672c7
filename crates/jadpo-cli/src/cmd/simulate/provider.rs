//! The scenario's providers: every connection of the app answered by its
//! timeline at the scenario time each send leaves, with the calls counted
//! per phase for the report.

use super::timeline::{decide, phase_at, Answer, Phase, State};
use jadpo_core::publish::PublishEnd;
use jadpo_runtime::connection::simulated::Provider;
use jadpo_runtime::connection::Answer as Reply;
use jadpo_sim::Sent;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
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

/// The scenario's timelines, which every lane's provider answers by.
pub(crate) struct Timelines {
    /// By connection name, in order: a [`Sent`] names one by its place.
    timelines: Vec<(String, Vec<Phase>)>,
}

/// The sends of the runs the simulation used, counted per phase of each
/// connection's timeline. Kept apart from [`Timelines`], which the
/// helper's lane reads at every send, so that the simulation's counting
/// never writes where the helper reads.
pub(crate) struct Tally {
    counted: Mutex<Vec<Counted>>,
}

impl Tally {
    pub(crate) fn new(timelines: &Timelines) -> Tally {
        let counted = timelines
            .timelines
            .iter()
            .map(|(_, t)| Counted {
                sends: vec![0; t.len()],
                first_minute: vec![0; t.len()],
            })
            .collect();
        Tally {
            counted: Mutex::new(counted),
        }
    }

    /// Counts the sends of a run the simulation used.
    pub(crate) fn count(&self, sent: &[Sent]) {
        if sent.is_empty() {
            return;
        }
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        for s in sent {
            let c = &mut counted[s.connection as usize];
            c.sends[s.phase as usize] += 1;
            c.first_minute[s.phase as usize] += u64::from(s.first_minute);
        }
    }

    /// Each connection of `timelines`, its timeline and what was sent to
    /// it.
    pub(crate) fn counted(&self, timelines: &Timelines) -> Vec<(String, Vec<Phase>, Counted)> {
        let counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        timelines
            .timelines
            .iter()
            .zip(counted.iter())
            .map(|((c, t), n)| (c.clone(), t.clone(), n.clone()))
            .collect()
    }
}

impl Timelines {
    /// Every connection in `connections` follows its timeline in
    /// `timelines`, or is up all along.
    pub(crate) fn new(
        connections: impl IntoIterator<Item = String>,
        timelines: &BTreeMap<String, Vec<Phase>>,
    ) -> Timelines {
        let timelines: BTreeMap<String, Vec<Phase>> = connections
            .into_iter()
            .map(|c| {
                let t = timelines.get(&c).cloned().unwrap_or_else(|| vec![Phase::always_up()]);
                (c, t)
            })
            .collect();
        Timelines {
            timelines: timelines.into_iter().collect(),
        }
    }

    /// A send to `connection` at scenario time `t`, its answer drawn from
    /// `rng`: its latency, how it ends, the phase's `Retry-After`, and the
    /// send to count.
    fn send(
        &self,
        connection: &str,
        t: Duration,
        rng: &mut ChaCha8Rng,
    ) -> Option<(Duration, Option<Answer>, Option<Duration>, Sent)> {
        let c = self
            .timelines
            .binary_search_by(|(name, _)| name.as_str().cmp(connection))
            .ok()?;
        let phases = &self.timelines[c].1;
        let i = phase_at(phases, t)?;
        let phase = &phases[i];
        let (latency, answer) = decide(phase, rng);
        let after_down = i > 0 && phases[i - 1].state == State::Down;
        let sent = Sent {
            connection: c as u32,
            phase: i as u32,
            first_minute: after_down && t < phase.from + Duration::from_secs(60),
        };
        Some((latency, answer, phase.retry_after, sent))
    }
}

/// The provider of one lane of runs: each run answered by the timelines
/// from a source of its own (seeded from the scenario's seed and the run),
/// so a run goes the same whichever lane makes it and whatever ran before.
pub(crate) struct ScenarioProvider {
    timelines: Arc<Timelines>,
    run: Mutex<Run>,
}

/// The run under way on a lane.
struct Run {
    rng: ChaCha8Rng,
    /// Its start: its scenario time and the clock's reading then.
    anchor: (Duration, Instant),
    sent: Vec<Sent>,
}

impl ScenarioProvider {
    pub(crate) fn new(timelines: Arc<Timelines>) -> ScenarioProvider {
        ScenarioProvider {
            timelines,
            run: Mutex::new(Run {
                rng: ChaCha8Rng::seed_from_u64(0),
                anchor: (Duration::ZERO, Instant::now()),
                sent: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Run> {
        self.run.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run starts at scenario time `at`, the clock reading `now`; its
    /// answers are drawn from `seed`.
    pub(crate) fn anchor(&self, at: Duration, now: Instant, seed: u64) {
        let mut run = self.lock();
        run.anchor = (at, now);
        run.rng = ChaCha8Rng::seed_from_u64(seed);
        run.sent.clear();
    }

    /// The sends of the run that ended, to count if it is used.
    pub(crate) fn take_sent(&self) -> Vec<Sent> {
        std::mem::take(&mut self.lock().sent)
    }

    /// A send to `connection` now: its latency and how it ends.
    fn send(&self, connection: &str) -> (Duration, Option<Answer>, Option<Duration>) {
        let mut guard = self.lock();
        let run = &mut *guard;
        let t = run.anchor.0 + Instant::now().saturating_duration_since(run.anchor.1);
        match self.timelines.send(connection, t, &mut run.rng) {
            Some((latency, answer, retry_after, sent)) => {
                run.sent.push(sent);
                (latency, answer, retry_after)
            }
            None => (Duration::ZERO, None, None),
        }
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
