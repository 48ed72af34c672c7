//! A lane of runs: the app's interpreter on a paused tokio clock of its
//! own, its connections answered by a provider of its own, so a send's
//! latency, a connection's `retry:` wait and a run's time limit pass in no
//! real time. A run's answers are drawn from a source seeded by the
//! simulation's seed and the run alone, so a run goes the same on any lane,
//! at any moment.

use super::provider::{ScenarioProvider, Timelines};
use jadpo_core::Timestamp;
use jadpo_lang::App;
use jadpo_runtime::interpreter::AppExecutor;
use jadpo_runtime::run::{execute, CallLog, EmitLog, RunContext, RunKind};
use jadpo_runtime::Catalog;
use jadpo_sim::AppRun;
use jadpo_store::Claimed;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;

/// What runs an app's actions: the interpreter on a paused clock of its
/// own, its connections answered by a provider of its own.
pub(crate) struct Lane {
    rt: tokio::runtime::Runtime,
    executor: Arc<AppExecutor>,
    catalog: Catalog,
    provider: Arc<ScenarioProvider>,
    seed: u64,
}

/// A run, with everything it reads owned or shared: a helper's lane
/// borrows nothing from the simulation.
pub(crate) struct Job {
    of: Whose,
    pub(crate) now: Timestamp,
    limit: Duration,
}

/// Whose action a job runs.
enum Whose {
    /// A claimed delivery's: its event is read from the claim, shared
    /// with the simulation's start rather than copied for the run.
    Delivery(Arc<Claimed>),
    /// A schedule's, by name: it has no event.
    Schedule(String),
}

impl Job {
    /// Schedule `name`'s run: it has no event.
    pub(crate) fn schedule(name: &str, now: Timestamp, limit: Duration) -> Job {
        Job {
            of: Whose::Schedule(name.to_owned()),
            now,
            limit,
        }
    }

    /// The run of `claimed`'s action, started at `now`, cut `limit` after.
    pub(crate) fn of(claimed: &Arc<Claimed>, now: Timestamp, limit: Duration) -> Job {
        Job {
            of: Whose::Delivery(claimed.clone()),
            now,
            limit,
        }
    }

    fn kind(&self) -> RunKind {
        match &self.of {
            Whose::Delivery(c) => RunKind::Delivery {
                id: c.delivery.id,
                attempt: c.delivery.attempts,
            },
            Whose::Schedule(_) => RunKind::Schedule,
        }
    }

    /// The subscriber or the schedule whose action runs.
    fn name(&self) -> &str {
        match &self.of {
            Whose::Delivery(c) => &c.delivery.subscriber,
            Whose::Schedule(name) => name,
        }
    }
}

impl Lane {
    pub(crate) fn new(app: &Arc<App>, timelines: &Arc<Timelines>, seed: u64) -> Result<Lane, String> {
        let provider = Arc::new(ScenarioProvider::new(timelines.clone()));
        let connections = jadpo_runtime::connection::Connections::simulated(app, provider.clone());
        let executor =
            AppExecutor::new(app.clone(), Arc::new(connections), |_: &str| None).map_err(|e| format!("{e:?}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Lane {
            rt,
            executor: Arc::new(executor),
            catalog: Catalog::from_app(app),
            provider,
            seed,
        })
    }

    /// Runs `job`'s action in the interpreter, on the paused clock from
    /// its start, its answers drawn from a source seeded by the
    /// simulation's seed and the run alone.
    pub(crate) fn run(&self, job: Job) -> AppRun {
        let calls = CallLog::default();
        let emits = EmitLog::default();
        let (event_name, event_public_id, payload, depth) = match &job.of {
            Whose::Delivery(c) => (
                c.event_name.clone(),
                c.event_public_id.clone(),
                serde_json::from_str(&c.payload).unwrap_or(Value::Null),
                c.event_depth,
            ),
            Whose::Schedule(_) => (String::new(), String::new(), Value::Null, 0),
        };
        // A delivery's emits are one deeper than its event; a schedule's
        // start a chain, as the engine's do.
        let emits_depth = match &job.of {
            Whose::Schedule(_) => 0,
            Whose::Delivery(_) => depth + 1,
        };
        let seed = run_seed(self.seed, &job);
        let (log, emitted) = (calls.clone(), emits.clone());
        let (now, limit, kind, name) = (job.now, job.limit, job.kind(), job.name().to_owned());
        let at = Duration::from_millis(u64::try_from(now.as_millis()).unwrap_or(0));
        let (executor, provider) = (self.executor.clone(), self.provider.clone());
        let run = async move {
            // Made here, on the paused clock, where its deadline is read.
            let start = Instant::now();
            provider.anchor(at, start, seed);
            let ctx = RunContext {
                kind,
                subscriber: name,
                event_name,
                event_public_id,
                payload,
                started_at: now,
                deadline: start + limit,
                calls: log,
                path: Default::default(),
                depth,
                emits: emitted,
                trace: None,
                spans: Default::default(),
            };
            let (end, stopped) = execute(&*executor, ctx, limit).await;
            (end, stopped, start.elapsed())
        };
        let (end, stopped, took) = drive(&self.rt, run);
        AppRun {
            end,
            calls: calls.verdicts(stopped),
            took,
            emits: self.catalog.emits(emits.take(), emits_depth, None),
            rate_limited: calls.rate_limits(),
            sent: self.provider.take_sent(),
        }
    }
}

/// The seed of one run's answers: the simulation's, mixed with what tells
/// the run from every other (its delivery and attempt, or its schedule,
/// and its start), so that no two runs draw alike and none depends on
/// which ran before it.
fn run_seed(seed: u64, job: &Job) -> u64 {
    let who = match job.kind() {
        RunKind::Delivery { id, attempt } => (id.0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(attempt),
        // A simulation runs no routes; named as a schedule is.
        RunKind::Schedule | RunKind::Route => job.name().bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }),
    };
    let at = job.now.as_millis() as u64;
    mix(mix(mix(seed) ^ who) ^ at)
}

/// SplitMix64's finaliser: every bit of the input moves every bit of the
/// output.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs `run` to its end on `rt`'s paused clock. A simulated send moves
/// the clock on and yields once (`Connections::simulated`), so a run is
/// polled here in a loop, in the runtime's context but without entering
/// its scheduler, for as long as each poll moves the clock: a tenth of a
/// simulation's time was the scheduler's, entered for every run. A run
/// that waits without moving the clock waits on a timer (a connection's
/// `retry:` wait), which only the runtime fires: it goes on there.
fn drive<T>(rt: &tokio::runtime::Runtime, run: impl Future<Output = T>) -> T {
    let _in_runtime = rt.enter();
    let mut run = std::pin::pin!(run);
    let mut cx = Context::from_waker(Waker::noop());
    let mut clock = Instant::now();
    loop {
        match run.as_mut().poll(&mut cx) {
            Poll::Ready(out) => return out,
            Poll::Pending => {
                let now = Instant::now();
                if now == clock {
                    return rt.block_on(run);
                }
                clock = now;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// How long `run` took on the paused clock, driven to its end.
    fn took<T>(rt: &tokio::runtime::Runtime, run: impl Future<Output = T>) -> (T, Duration) {
        drive(rt, async {
            let start = Instant::now();
            let out = run.await;
            (out, start.elapsed())
        })
    }

    /// A run that moves the clock on ends where it moved it; one that then
    /// waits on a timer (a connection's `retry:` wait) goes on in the
    /// runtime, and so does a time limit around it that passes first.
    #[test]
    fn a_run_is_driven_to_its_end_on_the_paused_clock() {
        use tokio::time::{advance, sleep, timeout};
        let rt = paused();
        let ms = Duration::from_millis;
        let sends = took(&rt, async {
            advance(ms(80)).await;
            advance(ms(20)).await;
        });
        assert_eq!(sends.1, ms(100));
        let retried = took(&rt, async {
            advance(ms(5)).await;
            sleep(ms(3_000)).await;
        });
        assert_eq!(retried.1, ms(3_005));
        let cut = took(&rt, async {
            timeout(ms(1_000), async {
                advance(ms(5)).await;
                sleep(ms(10_000)).await;
            })
            .await
            .is_ok()
        });
        assert_eq!(cut, (false, ms(1_000)));
    }
}
