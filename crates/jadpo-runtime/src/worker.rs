//! The worker: claims batches, runs each delivery under its time limit, and
//! writes back what the core decided.
//!
//! One claim loop per process runs up to `concurrency` deliveries at once.
//! It claims ahead of its free slots into a local queue, each delivery with
//! the last moment it may start inside its lease (`local_queue.rs`), so a
//! slot that frees starts the next run without a round trip to the store;
//! finished runs go to a completer that writes them in batches
//! (`finish_batch`), one transaction for many.

use crate::completer::Completer;
use crate::liveness::{self, Loop};
use crate::local_queue::{Ahead, LocalQueue, Queued};
use crate::log;
use crate::run::{execute, CallLog, Executor, RunContext};
use crate::state::EngineState;
use crate::wake::{Idle, Ticket};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use jadpo_core::{Backoff, Timestamp};
use jadpo_store::{step, ClaimReport, ClaimRequest, Claimed, Finish, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

/// The most deliveries one process runs at once: an explicit bound.
pub(crate) const MAX_CONCURRENCY: usize = 10_000;

/// The most deliveries one process holds claimed ahead of its slots.
pub(crate) const MAX_LOCAL_QUEUE: usize = 10_000;

/// Runs the claim loop until `shutdown` turns true, then gives back what it
/// claimed ahead, lets running deliveries finish (each within its limit),
/// writes their outcomes and returns.
///
/// The loop keeps up to `local_queue` claimed deliveries waiting ahead of
/// the free slots (see `local_queue.rs`) and claims the next batch while
/// runs go on, so no slot waits for the store; outcomes are written by the
/// completer, apart from the runs.
///
/// Long on purpose: the loop's state (queue, claims in flight, idle spell,
/// backoff) is read by one `select!`, and each event's handling is a call.
pub(crate) async fn run<S: Store, E: Executor>(state: Arc<EngineState<S, E>>, mut shutdown: watch::Receiver<bool>) {
    let config = &state.config;
    assert!(config.concurrency >= 1 && config.concurrency <= MAX_CONCURRENCY);
    assert!(config.local_queue <= MAX_LOCAL_QUEUE);
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let (finish_tx, finish_rx) = mpsc::channel::<Box<Finish>>(config.finish_batch.max(1) + config.concurrency);
    let completer = start_completer(&state, finish_rx);
    // A lease covers the longest run plus the margin; a queued delivery must
    // start early enough that its own run and the write of its outcome fit.
    let lease_real = state.catalog.longest_timeout() + config.lease_margin;
    let mut ahead = Ahead::new(config.concurrency, config.local_queue, config.lease_margin / 2);
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel::<Duration>();
    let mut queue = LocalQueue::default();
    let mut runs = JoinSet::new();
    // Claims in flight, each with the number it asked for.
    let mut claiming: FuturesUnordered<ClaimInFlight> = FuturesUnordered::new();
    let mut in_flight = 0usize;
    // The last claim found everything due already taken: look again at its
    // engine time, or at a wake-up (see `wake.rs`).
    let mut idle = Idle::default();
    // The store failed: claim again after this real time.
    let mut backoff_until: Option<tokio::time::Instant> = None;
    // Claims failed in a row.
    let mut store_faults = 0u32;
    let mut schema = state.schema.watch();
    let alive = state.liveness.running(Loop::Worker);
    // Turns the loop at least this often when nothing else does, so that
    // its beat says it is not stuck.
    let mut beat = tokio::time::interval(liveness::BEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        state.liveness.beat(Loop::Worker);
        let stopping = *shutdown.borrow();
        while runs.try_join_next().is_some() {}
        while let Ok(took) = ended_rx.try_recv() {
            ahead.ended(took);
        }
        let now = state.clock.now();
        give_back(&state, queue.take_late(now), now, "delivery.given_back_late");
        if !stopping {
            let ends = Ends {
                finish: &finish_tx,
                took: &ended_tx,
            };
            start_runs(&state, &slots, &mut queue, now, &mut runs, ends);
        }
        if stopping && claiming.is_empty() {
            break;
        }
        let free = slots.available_permits();
        let coming = queue.len() + in_flight;
        let want = (free + ahead.target()).saturating_sub(coming);
        let idling = idle.until().is_some() || backoff_until.is_some_and(|t| tokio::time::Instant::now() < t);
        // Claim again once the queue is down to three quarters of what it
        // should hold ahead, so the next batch arrives before the slots run
        // dry even when a claim is slow.
        let low = coming <= ahead.target() * 3 / 4 || free > coming;
        let refused = schema.borrow_and_update().is_some();
        if claiming.len() < MAX_CLAIMS_IN_FLIGHT
            && !stopping
            && !idling
            && !refused
            && want > 0
            && low
            && !queue.full_of_bytes()
        {
            backoff_until = None;
            // Two claims of half the target each keep the store busy on two
            // connections while the other one's rows are being decided.
            let limit = want
                .min(MAX_CLAIM)
                .min((ahead.target() / MAX_CLAIMS_IN_FLIGHT).max(free).max(1));
            in_flight += limit;
            claiming.push(claim(state.clone(), limit, idle.claim_started(), lease_real));
        }
        let deadline = queue.next_deadline();
        tokio::select! {
            Some((limit, ticket, report)) = claiming.next(), if !claiming.is_empty() => {
                in_flight -= limit;
                match report {
                    Ok(Claim { report, look_again }) => {
                        store_faults = 0;
                        accept(&state, report, &mut queue);
                        idle.claim_ended(ticket, look_again);
                        // Debug only: one line per idle spell, which tests
                        // wait for instead of guessing how long going idle takes.
                        if let Some(until) = idle.until() {
                            tracing::debug!(until = %until, "worker.idle");
                        }
                    }
                    // A newer build's migration took away what the claim
                    // reads: the gate closes and says so once, instead of
                    // a warning at each claim.
                    Err(_) if state.schema.check(&*state.store).await => {}
                    Err(e) => backoff_until = Some(claim_failed(&e, &mut store_faults)),
                }
            }
            Some(took) = ended_rx.recv() => ahead.ended(took),
            _ = state.wake.notified() => {
                idle.woken();
                tracing::debug!(by = "wake-up", "worker.woken");
            }
            _ = crate::wake::sleep_until(&state.clock, idle.until().unwrap_or(now)), if idle.until().is_some() => {
                idle.woken();
                tracing::debug!(by = "poll", "worker.woken");
            }
            _ = tokio::time::sleep_until(backoff_until.unwrap_or_else(tokio::time::Instant::now)), if backoff_until.is_some() => backoff_until = None,
            _ = state.clock.sleep_until(deadline.unwrap_or(now).plus(Duration::from_millis(1))), if deadline.is_some() => {}
            _ = schema.changed() => {}
            _ = beat.tick() => {}
            _ = shutdown.changed(), if !stopping => {}
        }
    }
    drop(alive);
    // Graceful: what was claimed ahead goes back at once, due and with its
    // attempt unspent; running deliveries end within their limit.
    let now = state.clock.now();
    let queued = queue.drain();
    let given_back = give_back(&state, queued, now, "delivery.given_back");
    while runs.join_next().await.is_some() {}
    if let Some(t) = given_back {
        let _ = t.await;
    }
    drop(finish_tx);
    let _ = completer.await;
}

/// A claim on its way: the number it asked for, the wake-ups it saw start,
/// and what it found.
type ClaimInFlight = BoxFuture<'static, (usize, Ticket, Result<Claim, StoreError>)>;

/// A claim's report, and when to look again if it found nothing more due.
struct Claim {
    report: ClaimReport,
    look_again: Option<Timestamp>,
}

/// The completer, on a task of its own in the engine's span, writing what
/// comes on `finished`.
fn start_completer<S: Store, E>(
    state: &EngineState<S, E>,
    finished: mpsc::Receiver<Box<Finish>>,
) -> tokio::task::JoinHandle<()> {
    let completer = Completer {
        store: state.store.clone(),
        clock: state.clock.clone(),
        breakers: state.breakers.clone(),
        pending: state.pending.clone(),
        wake: state.wake.clone(),
        alert_wake: state.alert_wake.clone(),
        minutes: state.minutes.clone(),
        liveness: state.liveness.clone(),
        batch: state.config.finish_batch,
    };
    tokio::spawn(completer.run(finished).in_current_span())
}

/// Where a run's end goes: its finish to the completer, its real time to
/// the loop (which sizes how much it claims ahead by it).
#[derive(Clone, Copy)]
struct Ends<'a> {
    finish: &'a mpsc::Sender<Box<Finish>>,
    took: &'a mpsc::UnboundedSender<Duration>,
}

/// Starts a run of the next queued delivery in each free slot.
fn start_runs<S: Store, E: Executor>(
    state: &Arc<EngineState<S, E>>,
    slots: &Arc<Semaphore>,
    queue: &mut LocalQueue,
    now: Timestamp,
    runs: &mut JoinSet<()>,
    ends: Ends<'_>,
) {
    while let Ok(permit) = slots.clone().try_acquire_owned() {
        let Some(q) = queue.pop(now) else {
            drop(permit);
            break;
        };
        let (state, finish_tx, ended_tx) = (state.clone(), ends.finish.clone(), ends.took.clone());
        let run = async move {
            let started = std::time::Instant::now();
            run_one(&state, q.claimed, &finish_tx).await;
            drop(permit);
            let _ = ended_tx.send(started.elapsed());
        };
        // Boxed where it is made: a run's future is about 4 KB, which
        // spawning it by value would copy several times over. Not inside
        // the engine's span: entering it at each poll of each run cost 2-3 %
        // of a drain (docs/performance.md); the one line a run logs that
        // `/metrics` counts enters it itself.
        runs.spawn(Box::pin(run));
    }
}

/// One claim of at most `limit`, timed; when it finds fewer than asked
/// for, also when to look again, found while still off the loop.
fn claim<S: Store, E: Executor>(
    s: Arc<EngineState<S, E>>,
    limit: usize,
    ticket: Ticket,
    lease_real: Duration,
) -> ClaimInFlight {
    Box::pin(async move {
        let now = s.clock.now();
        let req = ClaimRequest {
            worker: &s.config.name,
            routes: &s.catalog.routes,
            now,
            limit,
            lease: s.clock.engine_span(lease_real),
        };
        let started = std::time::Instant::now();
        let claimed = s.store.claim(&req).await;
        let took = started.elapsed();
        s.claims.claimed(took);
        s.timings.claim.observe(took);
        let report = match claimed {
            Ok(r) => r,
            Err(e) => return (limit, ticket, Err(e)),
        };
        // Those told to wait for room on a connection count: they were moved
        // to their turns, and what is due behind them is looked at now.
        let looked_at = report.claimed.len()
            + report.succeeded.len()
            + report.gave_up.len()
            + report.held.len()
            + report.waiting.len();
        // Fewer than asked for: nothing more is due now.
        let look_again = if looked_at < limit {
            Some(crate::wake::next_look(&*s.store, &s.clock, now, s.config.poll).await)
        } else {
            None
        };
        (limit, ticket, Ok(Claim { report, look_again }))
    })
}

/// A claim failed before anything committed: nothing was claimed. Runs
/// already queued go on; the next claim waits until the real time returned,
/// a store's backoff after `faults` failures in a row.
fn claim_failed(e: &StoreError, faults: &mut u32) -> tokio::time::Instant {
    *faults = faults.saturating_add(1);
    let wait = Backoff::STORE.draw(*faults, None, &mut rand::rng());
    tracing::warn!(error = %e, wait_ms = wait.as_millis() as u64, "store.unavailable");
    tokio::time::Instant::now() + wait
}

/// The most a single claim asks for: one batch of the store's.
const MAX_CLAIM: usize = 1_000;

/// Claims in flight at once from one worker loop.
const MAX_CLAIMS_IN_FLIGHT: usize = 2;

/// Takes a claim's report in: its breakers into the cache, its deliveries
/// into the queue with the last time each may start.
fn accept<S: Store, E>(state: &EngineState<S, E>, report: ClaimReport, queue: &mut LocalQueue) {
    log::claim(&report);
    let now = state.clock.now();
    let mut tally = crate::minutes::Tally::default();
    tally.add(now, "held", report.held.len() as u64);
    for c in report.claimed.iter().filter(|c| !c.probe_for.is_empty()) {
        for connection in &c.probe_for {
            tally.add(now, format!("probe:{connection}"), 1);
        }
    }
    state.minutes.add(tally);
    for h in &report.held_in_trace {
        // A moment, not a stretch: the hold's end is a release, which
        // the delivery's next attempt shows.
        let _ = state
            .spans
            .hold(&h.event_name, Some(&h.event_trace), h.delivery.0, &h.connection);
    }
    state.breakers.merge(report.breakers.iter().cloned());
    for claimed in report.claimed {
        let own_limit = state.catalog.timeout(&claimed.delivery.subscriber);
        // Its run and half the margin (the write of its outcome) must fit
        // between its start and its lease's end.
        let reserve = state.clock.engine_span(own_limit + state.config.lease_margin / 2);
        let until = claimed.delivery.lease.as_ref().map_or(state.clock.now(), |l| l.until);
        let start_by = until.minus(reserve);
        queue.push(claimed, start_by);
    }
}

/// Gives claimed deliveries back unstarted, in the background: due again
/// at once, their attempts unspent, their probe places freed.
fn give_back<S: Store, E>(
    state: &Arc<EngineState<S, E>>,
    queued: Vec<Queued>,
    now: Timestamp,
    why: &'static str,
) -> Option<tokio::task::JoinHandle<()>> {
    if queued.is_empty() {
        return None;
    }
    let store = state.store.clone();
    let wake = state.wake.clone();
    Some(tokio::spawn(
        async move {
            for q in queued {
                let id = q.claimed.delivery.id;
                match store.give_back(id, q.claimed.token(), now).await {
                    Ok(()) => tracing::info!(delivery = id.0, "{why}"),
                    // Its lease ends and the next claim takes it over: nothing
                    // is lost, it only waits longer.
                    Err(e) => tracing::warn!(delivery = id.0, error = %e, "delivery.give_back_failed"),
                }
            }
            wake.notify_one();
        }
        .in_current_span(),
    ))
}

async fn run_one<S: Store, E: Executor>(
    state: &EngineState<S, E>,
    claimed: Claimed,
    finish_tx: &mpsc::Sender<Box<Finish>>,
) {
    let id = claimed.delivery.id;
    let token = claimed.token();
    if !claimed.connections.is_empty() {
        state.pending.wait(&claimed.connections).await;
    }
    let started_at = state.clock.now();
    if let Some(connection) = state.breakers.holding(&claimed.connections, id, started_at) {
        // Boxed: a store's future is several KB, and kept inline it would
        // make every run's task that large, copied at each spawn.
        let _hold = state
            .spans
            .hold(&claimed.event_name, claimed.event_trace.as_ref(), id.0, &connection);
        match Box::pin(state.store.hold_claimed(id, token, &connection, started_at)).await {
            Ok(()) => state.in_span(|| log::held(&claimed, &connection)),
            Err(e) => tracing::warn!(delivery = id.0, error = %e, "delivery.hold_failed"),
        }
        return;
    }
    let timeout = state.catalog.timeout(&claimed.delivery.subscriber);
    let calls = CallLog::default();
    let emits = crate::run::EmitLog::default();
    let payload = serde_json::from_str(&claimed.payload).unwrap_or(serde_json::Value::Null);
    let mut span = state.spans.attempt(&crate::spans::Attempt {
        event: &claimed.event_name,
        event_id: &claimed.event_public_id,
        event_trace: claimed.event_trace.as_ref(),
        subscriber: &claimed.delivery.subscriber,
        worker: &state.config.name,
        delivery: id.0,
        attempt: claimed.delivery.attempts,
        probe_for: &claimed.probe_for,
        lease_expired: claimed
            .delivery
            .last_failure
            .as_ref()
            .is_some_and(|f| f.kind == jadpo_core::FailureKind::LeaseExpired),
        held_for_ms: claimed.delivery.held_for.as_millis().try_into().unwrap_or(i64::MAX),
        released: claimed.released,
    });
    // The run's calls and emits hang under its attempt; with spans off,
    // under its event's emit.
    let attempt_trace = span.context();
    let ctx = RunContext {
        kind: crate::run::RunKind::Delivery {
            id,
            attempt: claimed.delivery.attempts,
        },
        subscriber: claimed.delivery.subscriber.clone(),
        event_name: claimed.event_name.clone(),
        event_public_id: claimed.event_public_id.clone(),
        payload,
        started_at,
        deadline: tokio::time::Instant::now() + timeout,
        calls: calls.clone(),
        path: Default::default(),
        depth: claimed.event_depth,
        emits: emits.clone(),
        trace: attempt_trace.clone().or_else(|| claimed.event_trace.clone()),
        spans: state.spans.clone(),
    };
    // Only the very first attempt since the emit: a later one, or one after
    // an operator's retry (a new budget), would measure the backoff or the
    // operator, not the queue.
    let first = claimed.delivery.attempts == 1 && claimed.delivery.budget_from == claimed.delivery.created_at;
    if first {
        let waited = started_at.since(claimed.delivery.created_at);
        state.timings.emit_to_start.observe(waited);
    }
    let ran_for = std::time::Instant::now();
    let (end, stopped) = execute(&*state.executor, ctx, timeout).await;
    state.timings.attempted(ran_for.elapsed(), &calls.called());
    let ended_at = state.clock.now();
    let ran = step::Ran {
        end: &end,
        started_at,
        ended_at,
        calls: calls.verdicts(stopped),
        rate_limited: calls.rate_limits(),
    };
    let depth = claimed.event_depth + 1;
    let trace = attempt_trace.as_ref().or(claimed.event_trace.as_ref());
    let built = || state.catalog.emits(emits.take(), depth, trace);
    // The finish carries the outcome, and the claim's row for its log line
    // and its lease's end.
    let finish = step::finish(&claimed, &state.catalog.routes, ran, built, &mut rand::rng());
    drop(claimed);
    if span.is_recording() {
        crate::spans::outcome(&mut span, &finish.outcome);
    }
    drop(span);
    let finish = Box::new(finish);
    state.pending.sent(&finish.calls);
    // Waits only while the completer is a full batch behind: a slow store
    // slows new starts, never a run under way.
    if let Err(unsent) = finish_tx.send(finish).await {
        state.pending.settled(&unsent.0.calls);
    }
}
