//! The run of a simulated delivery: its action's calls, in order, to
//! scripted providers on the virtual clock. The rest of its step, before and
//! after the run, is the worker's own (`jadpo_store::step`).

use super::Sim;
use crate::config::{Behaviour, SimSubscriber};
use jadpo_core::call::{classify, CallEnd};
use jadpo_core::{AttemptEnd, CallVerdict, Failure, FailureKind, Timestamp};
use jadpo_store::Claimed;
use rand::Rng;
use std::time::Duration;

impl Sim {
    /// The action's run: its calls, in order, until the first failure or the
    /// run's time limit.
    pub(super) fn perform(
        &mut self,
        sub: &SimSubscriber,
        claimed: &Claimed,
    ) -> (AttemptEnd, Vec<(String, CallVerdict)>, Timestamp) {
        let limit = self.now.plus(sub.timeout);
        if self.roll(sub.defect) {
            let f = if self.rng.random_bool(0.5) {
                Failure::panicked()
            } else {
                Failure::new("run.overflow", FailureKind::Overflow)
            };
            return (AttemptEnd::Failed(f), vec![], self.now);
        }
        if self.rng.random_range(0..100) < sub.skip_calls {
            return (AttemptEnd::Succeeded, vec![], self.now.plus(Duration::from_millis(1)));
        }
        let mut t = self.now;
        let mut calls = Vec::new();
        for c in &claimed.connections {
            let behaviour = self.cfg.providers[c].at(t);
            let (latency, call_end) = self.provider_answer(behaviour, t);
            self.stats.call(c, behaviour, t);
            if t.plus(latency) > limit {
                // The run's limit stops it mid-call: nothing it did is kept.
                calls.push((c.clone(), CallVerdict::Unavailable));
                return (AttemptEnd::Failed(Failure::deadline_exceeded()), calls, limit);
            }
            t = t.plus(latency);
            let (result, verdict) = classify(call_end);
            calls.push((c.clone(), verdict));
            if let Err(f) = result {
                return (AttemptEnd::Failed(f), calls, t);
            }
        }
        (AttemptEnd::Succeeded, calls, t.plus(Duration::from_millis(1)))
    }

    fn provider_answer(&mut self, b: Behaviour, t: Timestamp) -> (Duration, CallEnd) {
        let status = |s: u16| CallEnd::Status {
            status: s,
            retry_after: None,
        };
        match b {
            Behaviour::Up { latency } => (latency, status(200)),
            Behaviour::Down { latency } => (latency, status(503)),
            Behaviour::Refused => (Duration::ZERO, CallEnd::NeverLeft),
            Behaviour::Slow { latency } => (latency, status(200)),
            Behaviour::RateLimiting { retry_after } => (
                Duration::from_millis(5),
                CallEnd::Status {
                    status: 429,
                    retry_after: Some(retry_after),
                },
            ),
            Behaviour::Flapping { period, latency } => {
                let turn = t.as_millis() / i64::try_from(period.as_millis().max(1)).unwrap_or(i64::MAX);
                (latency, status(if turn % 2 == 0 { 200 } else { 503 }))
            }
            Behaviour::Mixed {
                down,
                refuse,
                unknown,
                latency,
            } => {
                let r = self.rng.random_range(0..100u8);
                if r < down {
                    (latency, status(503))
                } else if r < down.saturating_add(refuse) {
                    (latency, status([400, 401, 404, 409, 422][self.rng.random_range(0..5)]))
                } else if r < down.saturating_add(refuse).saturating_add(unknown) {
                    (latency, CallEnd::TimedOut { idempotent: false })
                } else {
                    (latency, status(200))
                }
            }
        }
    }
}
