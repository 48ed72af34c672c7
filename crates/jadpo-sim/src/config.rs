//! What a simulation runs: subscribers, scripted providers, workers, faults.

use jadpo_core::{BreakerPolicy, Budget, Timestamp};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// How a provider answers a call, from some time on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Behaviour {
    /// 2xx after `latency`.
    Up { latency: Duration },
    /// 503 after `latency`.
    Down { latency: Duration },
    /// Connection refused: the call never leaves.
    Refused,
    /// Answers after `latency`, longer than a run's limit: the run stops.
    Slow { latency: Duration },
    /// 429 with this `Retry-After`.
    RateLimiting { retry_after: Duration },
    /// Up and down in turns of `period`, starting up.
    Flapping { period: Duration, latency: Duration },
    /// Each call at random: up, down, a 4xx refusal, or a timeout after
    /// sending (`outcome_unknown`), by these weights out of 100.
    Mixed {
        down: u8,
        refuse: u8,
        unknown: u8,
        latency: Duration,
    },
}

/// A provider's behaviour over time: `(from, behaviour)`, sorted by `from`.
#[derive(Clone, Debug, PartialEq)]
pub struct Script(pub Vec<(Timestamp, Behaviour)>);

impl Script {
    pub fn at(&self, now: Timestamp) -> Behaviour {
        self.0
            .iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .or(self.0.first())
            .map(|(_, b)| *b)
            .expect("a script has at least one behaviour")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimSubscriber {
    pub name: String,
    pub budget: Budget,
    /// The connections its action calls, in order; the first failure ends
    /// the run.
    pub connections: Vec<String>,
    /// Out of 100: how often a run skips calling its connections (the
    /// action's own logic decided it needs none), which gives back a probe.
    pub skip_calls: u8,
    /// Out of 1000: how often a run hits a defect before calling anything.
    pub defect: u16,
    pub timeout: Duration,
}

/// A subscriber's `key:` and what it asks of the deliveries sharing a key
/// (`order:` or `concurrency_per_key:`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimKeys {
    pub rule: jadpo_core::key_rule::KeyRule,
    /// How many keys its events spread over: few, so that keys queue.
    pub count: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Emission {
    pub at: Timestamp,
    pub events: usize,
}

/// A process that dies at `at`, as a SIGKILL would, and is started again
/// `back_after` later.
#[derive(Clone, Debug, PartialEq)]
pub struct Crash {
    pub at: Timestamp,
    /// Which worker (process), from 0.
    pub worker: usize,
    pub back_after: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// Out of 1000 runs: the worker is lost mid-run, never to finish it.
    pub lost: u16,
    /// Out of 1000 runs: the worker commits the run's effects, then is lost
    /// before it records the outcome.
    pub lost_after_commit: u16,
    /// Out of 1000 runs: the worker is paused past its lease and finishes
    /// late, after another may have taken the delivery over.
    pub paused: u16,
    /// Out of 1000 claims: the store is unreachable and the claim fails.
    pub store_down: u16,
}

impl Faults {
    pub const NONE: Faults = Faults {
        lost: 0,
        lost_after_commit: 0,
        paused: 0,
        store_down: 0,
    };
}

/// One of an app's schedules: due on its trigger, its run cut `timeout`
/// after it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimSchedule {
    pub name: String,
    pub trigger: jadpo_core::schedule::Trigger,
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    pub seed: u64,
    /// Times an operator runs `jadpo retry` on every failed and parked
    /// delivery: a fresh budget, spread over a minute.
    pub operator_retries: Vec<Timestamp>,
    pub subscribers: Vec<SimSubscriber>,
    pub providers: BTreeMap<String, Script>,
    pub emissions: Vec<Emission>,
    pub workers: usize,
    /// Deliveries one worker runs at once; also its claim's limit.
    pub slots: usize,
    pub policy: BreakerPolicy,
    pub faults: Faults,
    pub tick: Duration,
    /// The simulation stops here; anything unfinished then is stuck.
    pub horizon: Duration,
    /// Check every delivery after every step, not only at ticks and the end.
    pub check_every_step: bool,
    /// Connections' `rate:` and `concurrency:`.
    pub limits: BTreeMap<String, jadpo_core::limit::Limits>,
    /// Subscribers with `key:`, by name, and their rule.
    pub keyed: BTreeMap<String, SimKeys>,
    /// Times an operator skips some of the failed and parked deliveries
    /// that block a `strict` key.
    pub operator_skips: Vec<Timestamp>,
    /// Processes that die and come back at set times.
    pub crashes: Vec<Crash>,
    /// An app's schedules, run by the [`crate::AppRunner`] on their
    /// triggers (the built-in systems have none).
    pub schedules: Vec<SimSchedule>,
    /// Schedules go on running to the horizon (a scenario's `until`);
    /// otherwise the run ends once nothing but schedules is left to happen.
    pub schedules_to_horizon: bool,
    /// The longest `Retry-After` an app's providers answer with (the
    /// scripted providers' is read from `providers`): a retry may wait that
    /// long, past the backoff's ceiling.
    pub longest_retry_after: Duration,
    /// From this time on, an operator skips every delivery that blocks a
    /// `strict` key, every ten minutes while any key's deliveries are
    /// unfinished:
    /// without it, a `strict` key whose delivery failed after the last
    /// operator's retry would wait for ever, as it should.
    pub skip_all_from: Timestamp,
}

impl SimConfig {
    /// The lease a worker takes: the longest run's limit, plus a margin for
    /// recording the outcome, so a live worker always finishes inside it.
    pub fn lease(&self) -> Duration {
        let longest = self
            .subscribers
            .iter()
            .map(|s| s.timeout)
            .max()
            .unwrap_or(Duration::from_secs(30));
        longest + Duration::from_secs(30)
    }

    /// A random system, fully determined by `seed`: a few subscribers over
    /// a few providers that go down, slow down, rate-limit and flap, then
    /// come back for good; workers that are lost, paused or cut off from
    /// the store.
    pub fn random(seed: u64) -> SimConfig {
        use rand::SeedableRng;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6a61_6470_6f73_696d);
        let s = Duration::from_secs;
        let providers: BTreeMap<String, Script> = (0..rng.random_range(1..=3))
            .map(|i| (format!("p{i}"), random_script(&mut rng)))
            .collect();
        let names: Vec<String> = providers.keys().cloned().collect();
        let subscribers: Vec<SimSubscriber> = (0..rng.random_range(1..=4))
            .map(|i| random_subscriber(&mut rng, format!("s{i}"), &names))
            .collect();
        let emissions = (0..rng.random_range(1..=4))
            .map(|_| Emission {
                at: Timestamp::from_millis(rng.random_range(0..=7_200_000)),
                events: rng.random_range(1..=40),
            })
            .collect();
        let faulty = rng.random_bool(0.5);
        let mut fault = |max: u16| if faulty { rng.random_range(0..=max) } else { 0 };
        let faults = Faults {
            lost: fault(30),
            lost_after_commit: fault(30),
            paused: fault(30),
            store_down: fault(50),
        };
        let operator_retries = (0..rng.random_range(0..=2))
            .map(|_| Timestamp::from_millis(rng.random_range(600_000..=2 * 86_400_000)))
            .collect();
        let keyed = random_keys(seed, &subscribers);
        SimConfig {
            seed,
            operator_retries,
            subscribers,
            providers,
            emissions,
            workers: rng.random_range(1..=4),
            slots: rng.random_range(1..=8),
            policy: BreakerPolicy::DEFAULT,
            faults,
            tick: s(1),
            horizon: s(40 * 86_400),
            check_every_step: true,
            limits: random_limits(seed, &names),
            keyed,
            operator_skips: random_skips(seed),
            skip_all_from: Timestamp::EPOCH.plus(s(8 * 86_400)),
            crashes: Vec::new(),
            schedules: Vec::new(),
            schedules_to_horizon: false,
            longest_retry_after: Duration::ZERO,
        }
    }
}

/// About half the subscribers keyed, over one to eight keys each, drawn
/// from a source of their own as the limits are.
fn random_keys(seed: u64, subscribers: &[SimSubscriber]) -> BTreeMap<String, SimKeys> {
    use jadpo_core::key_rule::KeyRule;
    use rand::SeedableRng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6b65_7973);
    let mut out = BTreeMap::new();
    for s in subscribers {
        if !rng.random_bool(0.5) {
            continue;
        }
        let rule = match rng.random_range(0..3) {
            0 => KeyRule::Fifo,
            1 => KeyRule::Strict,
            _ => KeyRule::Cap(rng.random_range(1..=3)),
        };
        let count = rng.random_range(1..=8);
        out.insert(s.name.clone(), SimKeys { rule, count });
    }
    out
}

fn random_skips(seed: u64) -> Vec<Timestamp> {
    use rand::SeedableRng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x736b_6970);
    (0..rng.random_range(0..=2))
        .map(|_| Timestamp::from_millis(rng.random_range(600_000..=2 * 86_400_000)))
        .collect()
}

/// One provider's script: a few phases of trouble, each from one second
/// to an hour and a half long, then up for good.
fn random_script(rng: &mut ChaCha8Rng) -> Script {
    let ms = Duration::from_millis;
    let mut t = 0i64;
    let mut phases = Vec::new();
    for _ in 0..rng.random_range(1..=4) {
        phases.push((Timestamp::from_millis(t), random_behaviour(rng)));
        t += rng.random_range(1_000..=5_400_000);
    }
    phases.push((
        Timestamp::from_millis(t),
        Behaviour::Up {
            latency: ms(rng.random_range(5..=200)),
        },
    ));
    Script(phases)
}

/// One phase of a provider; down is drawn twice as often as up, refused,
/// slow or rate-limiting.
fn random_behaviour(rng: &mut ChaCha8Rng) -> Behaviour {
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    let latency = ms(rng.random_range(5..=400));
    match rng.random_range(0..7) {
        0 => Behaviour::Up { latency },
        1 | 2 => Behaviour::Down { latency },
        3 => Behaviour::Refused,
        4 => Behaviour::Slow {
            latency: s(rng.random_range(31..=90)),
        },
        5 => Behaviour::RateLimiting {
            retry_after: s(rng.random_range(1..=300)),
        },
        _ => {
            if rng.random_bool(0.5) {
                Behaviour::Flapping {
                    period: s(rng.random_range(5..=900)),
                    latency,
                }
            } else {
                Behaviour::Mixed {
                    down: rng.random_range(0..=60),
                    refuse: rng.random_range(0..=10),
                    unknown: rng.random_range(0..=5),
                    latency,
                }
            }
        }
    }
}

/// A subscriber calling some of the `providers` (now and then none), with
/// a budget, a run limit, and sometimes a defect.
fn random_subscriber(rng: &mut ChaCha8Rng, name: String, providers: &[String]) -> SimSubscriber {
    let s = Duration::from_secs;
    let mut connections: Vec<String> = providers.iter().filter(|_| rng.random_bool(0.6)).cloned().collect();
    if connections.is_empty() && rng.random_bool(0.8) {
        connections.push(providers[rng.random_range(0..providers.len())].clone());
    }
    let budget = Budget::new(rng.random_range(1..=30), s(rng.random_range(60..=3 * 86_400))).expect("in range");
    SimSubscriber {
        name,
        budget,
        connections,
        skip_calls: if rng.random_bool(0.2) {
            rng.random_range(1..=50)
        } else {
            0
        },
        defect: if rng.random_bool(0.1) {
            rng.random_range(1..=50)
        } else {
            0
        },
        timeout: s(rng.random_range(5..=60)),
    }
}

/// Some connections limited, drawn from a source of their own so every
/// seed's system is otherwise the one it was before limits existed.
fn random_limits(seed: u64, connections: &[String]) -> BTreeMap<String, jadpo_core::limit::Limits> {
    use jadpo_core::limit::{Limits, Rate};
    use rand::SeedableRng;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6c69_6d69_7473);
    let mut out = BTreeMap::new();
    for c in connections {
        if !rng.random_bool(0.4) {
            continue;
        }
        let rate = rng
            .random_bool(0.7)
            .then(|| Rate::new(rng.random_range(1..=20), Duration::from_secs(1)).expect("in range"));
        let concurrency = rng.random_bool(0.6).then(|| rng.random_range(1..=4));
        let limits = Limits { rate, concurrency };
        if !limits.is_none() {
            out.insert(c.clone(), limits);
        }
    }
    out
}
