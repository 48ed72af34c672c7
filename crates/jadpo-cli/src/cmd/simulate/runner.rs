//! The app's own code in a simulation: its events made from the
//! scenario's traffic, and its actions run by the real interpreter on a
//! paused tokio clock, so a send's latency, a connection's `retry:` wait
//! and a run's time limit pass in no real time, their calls answered by the
//! scenario's providers.

use super::provider::ScenarioProvider;
use super::scenario::{Arrivals, Scenario, Traffic};
use jadpo_core::Timestamp;
use jadpo_lang::{App, Type};
use jadpo_runtime::interpreter::AppExecutor;
use jadpo_runtime::run::{execute, CallLog, EmitLog, RunContext, RunKind};
use jadpo_runtime::Catalog;
use jadpo_sim::{AppRun, AppRunner, Emission};
use jadpo_store::{Claimed, NewEvent};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;

pub(crate) struct Runner {
    rt: tokio::runtime::Runtime,
    executor: Arc<AppExecutor>,
    catalog: Catalog,
    provider: Arc<ScenarioProvider>,
    app: Arc<App>,
    traffic: Vec<Traffic>,
    /// Per emission: its traffic, and the number of its first event.
    plan: Vec<(usize, u64)>,
}

impl Runner {
    /// The runner of `app`'s code, its connections answered by `provider`;
    /// `plan` says which traffic each emission comes from.
    pub(crate) fn new(
        app: Arc<App>,
        provider: Arc<ScenarioProvider>,
        traffic: Vec<Traffic>,
        plan: Vec<(usize, u64)>,
    ) -> Result<Runner, String> {
        let connections = jadpo_runtime::connection::Connections::simulated(&app, provider.clone());
        let executor =
            AppExecutor::new(app.clone(), Arc::new(connections), |_: &str| None).map_err(|e| format!("{e:?}"))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Runner {
            rt,
            executor: Arc::new(executor),
            catalog: Catalog::from_app(&app),
            provider,
            app,
            traffic,
            plan,
        })
    }
}

/// The emissions of a scenario's traffic, in time order, and for each its
/// traffic and the number of its first event. A rate arrives once a second
/// (the fraction carried over), or event by event when slower.
pub(crate) fn emissions(scenario: &Scenario) -> (Vec<Emission>, Vec<(usize, u64)>) {
    let mut all: Vec<(Duration, usize, u64)> = Vec::new();
    for (t, traffic) in scenario.traffic.iter().enumerate() {
        match &traffic.arrivals {
            Arrivals::Burst { count, at } => all.push((*at, t, *count)),
            Arrivals::Replay { counts, from } => {
                for (minute, n) in counts.iter().enumerate() {
                    // Spread over the minute, a second at a time.
                    let per_second = spread(*n, 60);
                    for (s, k) in per_second.into_iter().enumerate() {
                        if k > 0 {
                            let at = *from + Duration::from_secs(minute as u64 * 60 + s as u64);
                            all.push((at, t, k));
                        }
                    }
                }
            }
            Arrivals::Rate { n, per, from, length } => {
                let seconds = length.as_secs();
                let per_s = *n as f64 / per.as_secs_f64();
                if per_s >= 1.0 {
                    let mut carried = 0.0;
                    for s in 0..seconds {
                        carried += per_s;
                        let k = carried.floor();
                        carried -= k;
                        all.push((*from + Duration::from_secs(s), t, k as u64));
                    }
                } else {
                    let gap = Duration::from_secs_f64(1.0 / per_s);
                    let mut at = Duration::ZERO;
                    while at < *length {
                        all.push((*from + at, t, 1));
                        at += gap;
                    }
                }
            }
        }
    }
    all.sort_by_key(|(at, t, _)| (*at, *t));
    let mut numbers = vec![0u64; scenario.traffic.len()];
    let mut emissions = Vec::with_capacity(all.len());
    let mut plan = Vec::with_capacity(all.len());
    for (at, t, n) in all {
        emissions.push(Emission {
            at: Timestamp::EPOCH.plus(at),
            events: n as usize,
        });
        plan.push((t, numbers[t]));
        numbers[t] += n;
    }
    (emissions, plan)
}

/// `n` shared as evenly as can be over `parts`.
fn spread(n: u64, parts: u64) -> Vec<u64> {
    (0..parts).map(|i| n / parts + u64::from(i < n % parts)).collect()
}

/// Event number `n` of `traffic`: its fields as the scenario sets them,
/// the others made from `n` (wrapped at `keys`).
fn payload(event: &jadpo_lang::Event, traffic: &Traffic, n: u64) -> Value {
    let k = traffic.keys.map_or(n, |keys| n % keys);
    let fields = event
        .fields
        .iter()
        .map(|f| {
            let value = match traffic.payload.get(&f.name) {
                Some(v) => v.clone(),
                None => match f.ty {
                    Type::String => Value::String(format!("{}-{k}", f.name)),
                    Type::Int => Value::from(k),
                    Type::Float => Value::from(k as f64),
                    Type::Bool => Value::Bool(k.is_multiple_of(2)),
                    Type::Object => Value::Object(Default::default()),
                    Type::List => Value::Array(Vec::new()),
                },
            };
            (f.name.clone(), value)
        })
        .collect();
    Value::Object(fields)
}

impl AppRunner for Runner {
    fn events(&mut self, index: usize, emission: &Emission) -> Vec<NewEvent> {
        let (t, first) = self.plan[index];
        let traffic = &self.traffic[t];
        let Some(event) = self.app.events.get(&traffic.event) else {
            return Vec::new();
        };
        let events = (0..emission.events as u64)
            .map(|i| (traffic.event.clone(), payload(event, traffic, first + i)))
            .collect();
        self.catalog.emits(events, 0, None).events
    }

    fn run(&mut self, claimed: &Claimed, now: Timestamp, limit: Duration) -> AppRun {
        let kind = RunKind::Delivery {
            id: claimed.delivery.id,
            attempt: claimed.delivery.attempts,
        };
        let event = (
            claimed.event_name.clone(),
            claimed.event_public_id.clone(),
            serde_json::from_str(&claimed.payload).unwrap_or(Value::Null),
        );
        self.execute(
            kind,
            &claimed.delivery.subscriber,
            event,
            claimed.event_depth,
            now,
            limit,
        )
    }

    fn run_schedule(&mut self, name: &str, now: Timestamp, limit: Duration) -> AppRun {
        // A schedule has no event; its emits start a chain.
        let no_event = (String::new(), String::new(), Value::Null);
        self.execute(RunKind::Schedule, name, no_event, 0, now, limit)
    }
}

impl Runner {
    /// Runs the action of `name` (a subscriber or a schedule, as `kind`
    /// says) for `event` (its name, public id and payload) in the
    /// interpreter, on the paused clock from `now`.
    fn execute(
        &mut self,
        kind: RunKind,
        name: &str,
        event: (String, String, Value),
        depth: u32,
        now: Timestamp,
        limit: Duration,
    ) -> AppRun {
        let calls = CallLog::default();
        let emits = EmitLog::default();
        let (event_name, event_public_id, payload) = event;
        // A delivery's emits are one deeper than its event; a schedule's
        // start a chain, as the engine's do.
        let emits_depth = if matches!(kind, RunKind::Schedule) {
            0
        } else {
            depth + 1
        };
        let subscriber = name.to_owned();
        let (log, emitted) = (calls.clone(), emits.clone());
        let at = Duration::from_millis(u64::try_from(now.as_millis()).unwrap_or(0));
        let (executor, provider) = (self.executor.clone(), self.provider.clone());
        let run = async move {
            // Made here, on the paused clock, where its deadline is read.
            let start = Instant::now();
            provider.anchor(at, start);
            let ctx = RunContext {
                kind,
                subscriber,
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
        }
    }
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

    #[test]
    fn counts_are_spread_evenly() {
        assert_eq!(spread(7, 3), [3, 2, 2]);
        assert_eq!(spread(2, 4), [1, 1, 0, 0]);
        assert_eq!(spread(0, 2), [0, 0]);
    }
}
