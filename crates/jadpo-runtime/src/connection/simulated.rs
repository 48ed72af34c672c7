//! Connections answered by a simulation (`jadpo simulate`, docs/simulate.md).
//!
//! Each send asks a [`Provider`] how it ends at the moment it is sent (the
//! scenario's timeline decides), then waits the provider's latency, the
//! connection's `timeout:` or the run's deadline, whichever comes first, on
//! tokio's clock: a simulation pauses that clock, so no send waits for
//! real. Unlike a fake's, a simulated answer is judged as a real
//! provider's, breaker verdict included: the breakers, the probes and the
//! limits see a simulated outage exactly as they would a real one. Nothing
//! is signed or sent anywhere.

use super::double::Answer;
use jadpo_core::publish::{Broker, PublishEnd};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What answers a simulated connection's sends.
pub trait Provider: Send + Sync {
    /// How a call sent now on `connection` ends: the time its answer takes
    /// and the answer. [`Answer::TimedOut`] is a provider that never
    /// answers: the send waits out the connection's `timeout:`.
    fn call(&self, connection: &str, method: &'static str, path: &str) -> (Duration, Answer);

    /// How a publish sent now on `connection` ends: the time its
    /// confirmation takes and the ending. [`PublishEnd::Unconfirmed`] waits
    /// out the connection's `timeout:`.
    fn publish(&self, connection: &str, target: &str) -> (Duration, PublishEnd);

    /// The seed of the waits between one call's resends on `connection`
    /// (its `retry: { attempts }`), asked once per call that may resend.
    /// A real call's waits are seeded at random; a simulation's must come
    /// from its own seed, or the same seed would not give the same report.
    fn resend_seed(&self, connection: &str) -> u64;
}

/// A connection whose sends a [`Provider`] answers, with the app's
/// `timeout:` and `retry:` for it.
pub(crate) struct Simulated {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) timeout: Duration,
    pub(crate) attempts: u32,
    pub(crate) broker: Option<Broker>,
}

/// How a simulated send ended, on the clock.
pub(crate) enum Waited<T> {
    /// The provider's ending came within the timeout and the deadline.
    Ended(T),
    /// The connection's `timeout:` passed first.
    NoAnswer,
    /// The run's deadline passed first.
    CutByDeadline,
}

impl Simulated {
    /// Waits out a send that ends `after` (never, when `None`): the
    /// provider's latency, the connection's timeout or the run's deadline.
    async fn wait<T>(&self, after: Option<Duration>, ending: T, deadline: Instant) -> Waited<T> {
        let left = deadline.saturating_duration_since(Instant::now());
        let (wait, waited) = match after {
            Some(latency) if latency <= self.timeout && latency <= left => (latency, Waited::Ended(ending)),
            _ if self.timeout <= left => (self.timeout, Waited::NoAnswer),
            _ => (left, Waited::CutByDeadline),
        };
        // A simulated connection runs on a paused clock (`jadpo simulate`),
        // where nothing else waits beside the send (an action's calls run
        // one after another): moving the clock on is the sleep without a
        // timer to set and a park to fire it. Rounded up to the
        // millisecond, as a timer fires, so a run takes the time it took
        // when it slept.
        if !wait.is_zero() {
            tokio::time::advance(whole_millis(wait)).await;
        }
        waited
    }

    pub(crate) async fn call(
        &self,
        connection: &str,
        method: &'static str,
        path: &str,
        deadline: Instant,
    ) -> Waited<Answer> {
        let (latency, answer) = self.provider.call(connection, method, path);
        let after = (answer != Answer::TimedOut).then_some(latency);
        self.wait(after, answer, deadline).await
    }

    pub(crate) async fn publish(&self, connection: &str, target: &str, deadline: Instant) -> Waited<PublishEnd> {
        let (latency, end) = self.provider.publish(connection, target);
        let after = (end != PublishEnd::Unconfirmed).then_some(latency);
        self.wait(after, end, deadline).await
    }
}

/// `d` rounded up to a whole millisecond: tokio's timers fire on
/// millisecond ticks.
fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Duration, Answer);

    impl Provider for Fixed {
        fn call(&self, _: &str, _: &'static str, _: &str) -> (Duration, Answer) {
            (self.0, self.1.clone())
        }
        fn publish(&self, _: &str, _: &str) -> (Duration, PublishEnd) {
            (self.0, PublishEnd::Confirmed)
        }
        fn resend_seed(&self, _: &str) -> u64 {
            0
        }
    }

    fn simulated(latency: Duration, answer: Answer) -> Simulated {
        Simulated {
            provider: Arc::new(Fixed(latency, answer)),
            timeout: Duration::from_secs(10),
            attempts: 1,
            broker: None,
        }
    }

    /// On a paused clock: the answer after its latency; a provider slower
    /// than the timeout, or one that never answers, after the timeout; a
    /// deadline nearer than both cuts the send there.
    #[tokio::test(start_paused = true)]
    async fn a_send_ends_at_its_latency_its_timeout_or_the_deadline() {
        let s = Duration::from_secs;
        let cases = [
            (s(2), Answer::status(200), s(60), s(2), "answered"),
            (s(20), Answer::status(200), s(60), s(10), "no answer"),
            (s(1), Answer::TimedOut, s(60), s(10), "no answer"),
            (s(20), Answer::status(200), s(5), s(5), "cut"),
            (s(2), Answer::status(503), s(1), s(1), "cut"),
        ];
        for (latency, answer, deadline, took, want) in cases {
            let start = Instant::now();
            let got = simulated(latency, answer)
                .call("c", "POST", "/x", start + deadline)
                .await;
            let got = match got {
                Waited::Ended(_) => "answered",
                Waited::NoAnswer => "no answer",
                Waited::CutByDeadline => "cut",
            };
            assert_eq!((got, start.elapsed()), (want, took), "{latency:?} {deadline:?}");
        }
    }

    /// A send takes what a sleep of its latency takes, to the tick: a
    /// simulation's report is the one it was when sends slept.
    #[tokio::test(start_paused = true)]
    async fn a_send_takes_what_a_sleep_of_its_latency_takes() {
        for micros in [0, 1, 999, 1_000, 80_400, 80_999, 250_001] {
            let latency = Duration::from_micros(micros);
            let start = Instant::now();
            tokio::time::sleep(latency).await;
            let slept = start.elapsed();
            let start = Instant::now();
            simulated(latency, Answer::status(200))
                .call("c", "POST", "/x", start + Duration::from_secs(60))
                .await;
            assert_eq!(start.elapsed(), slept, "{latency:?}");
        }
    }
}
