//! Alert messages and their sends, as pure decisions.
//!
//! An alert is raised once per outage (a breaker's `connection_unavailable`,
//! see [`crate::breaker`]) or once per run of failures (a schedule's
//! `schedule_failing`, see [`crate::schedule`]); a breaker's alert is
//! followed by a `resolved` message when the breaker closes. Each message is
//! kept in the store (`jadpo_alerts`) and, when the app routes alerts to a
//! connection, POSTed to it. A send that fails is tried again after a
//! jittered backoff, like a delivery, within [`SEND_ATTEMPTS`] sends and
//! [`SEND_WITHIN`] of the alert being raised: an alert is worth sending while
//! someone can still act on it, so old ones are given up rather than sent
//! late. A send never waits behind a breaker and never counts towards one.

use crate::backoff::Backoff;
use crate::breaker::Alert;
use crate::failure::{Disposition, FailureKind, FailureRecord};
use crate::schedule::ScheduleAlert;
use crate::time::Timestamp;
use rand::Rng;
use std::time::Duration;

/// The most sends of one message.
pub const SEND_ATTEMPTS: u32 = 12;

/// How long after it was raised a message may still be sent.
pub const SEND_WITHIN: Duration = Duration::from_secs(3600);

/// Between sends of one message: 5 s doubling, at most 5 min.
pub const SEND_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(5),
    cap: Duration::from_secs(300),
    floor: Duration::from_secs(1),
};

/// The failure code a message gets when its window passed before it was
/// sent.
pub const EXPIRED: &str = "alert.expired";

/// A raised alert, or the message that its outage ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlertKind {
    Raised,
    Resolved,
}

impl AlertKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            AlertKind::Raised => "raised",
            AlertKind::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<AlertKind> {
        [AlertKind::Raised, AlertKind::Resolved]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// What one alert message says: what the store keeps and what is sent.
/// It holds names, times, counts and a failure's code and kind, never a
/// payload or a failure's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertMessage {
    /// `connection_unavailable` or `schedule_failing`.
    pub alert: String,
    pub kind: AlertKind,
    /// The connection of a `connection_unavailable` alert.
    pub connection: Option<String>,
    /// The schedule of a `schedule_failing` alert.
    pub schedule: Option<String>,
    /// When the outage began; for a schedule, when its alert was raised.
    pub since: Timestamp,
    /// Deliveries held when a connection's alert was raised.
    pub held: Option<u64>,
    /// A schedule's failed runs in a row, and the last one's failure.
    pub failures: Option<u32>,
    pub last_failure: Option<FailureRecord>,
    /// When this message was made: the alert raised, or its outage ended.
    pub raised_at: Timestamp,
    /// A `resolved` message's end of the outage.
    pub ended_at: Option<Timestamp>,
    /// Deliveries released when the breaker closed.
    pub released: Option<u64>,
}

impl AlertMessage {
    /// A breaker's alert, raised by the sweep at `now`.
    pub fn raised(a: &Alert, now: Timestamp) -> AlertMessage {
        AlertMessage {
            alert: Alert::NAME.to_owned(),
            kind: AlertKind::Raised,
            connection: Some(a.connection.clone()),
            schedule: None,
            since: a.since,
            held: Some(a.held),
            failures: None,
            last_failure: None,
            raised_at: now,
            ended_at: None,
            released: None,
        }
    }

    /// The breaker of `connection`, whose outage began at `since` and
    /// whose alert was raised, closed at `now`, releasing `released`.
    pub fn resolved(connection: &str, since: Timestamp, now: Timestamp, released: u64) -> AlertMessage {
        AlertMessage {
            alert: Alert::NAME.to_owned(),
            kind: AlertKind::Resolved,
            connection: Some(connection.to_owned()),
            schedule: None,
            since,
            held: None,
            failures: None,
            last_failure: None,
            raised_at: now,
            ended_at: Some(now),
            released: Some(released),
        }
    }

    /// A schedule's alert, raised at `now`.
    pub fn schedule_failing(a: &ScheduleAlert, now: Timestamp) -> AlertMessage {
        AlertMessage {
            alert: ScheduleAlert::NAME.to_owned(),
            kind: AlertKind::Raised,
            connection: None,
            schedule: Some(a.schedule.clone()),
            since: now,
            held: None,
            failures: Some(a.failures),
            last_failure: Some(a.last_failure.clone()),
            raised_at: now,
            ended_at: None,
            released: None,
        }
    }
}

/// Where a message's send stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendState {
    /// Never tried: no process routes alerts, or none has reached it yet.
    Unsent,
    /// Tried and failed, to be tried again.
    Retrying,
    Sent,
    /// Given up: refused for good, out of sends, or out of time.
    Failed,
}

impl SendState {
    pub const fn as_str(self) -> &'static str {
        match self {
            SendState::Unsent => "unsent",
            SendState::Retrying => "retrying",
            SendState::Sent => "sent",
            SendState::Failed => "failed",
        }
    }
}

/// A message's sends as the store keeps them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sends {
    /// Sends claimed so far; also the fence of the latest claim.
    pub attempts: u32,
    /// When the next send may go; `None` before the first.
    pub due_at: Option<Timestamp>,
    pub sent_at: Option<Timestamp>,
    pub failed_at: Option<Timestamp>,
    /// The last failure's code, never its fields.
    pub last_error: Option<String>,
}

impl Sends {
    pub fn state(&self) -> SendState {
        match (self.sent_at, self.failed_at, self.attempts) {
            (Some(_), _, _) => SendState::Sent,
            (None, Some(_), _) => SendState::Failed,
            (None, None, 0) => SendState::Unsent,
            (None, None, _) => SendState::Retrying,
        }
    }

    /// Still to be sent.
    pub fn open(&self) -> bool {
        self.sent_at.is_none() && self.failed_at.is_none()
    }

    /// Whether a sender may claim it at `now`: open and due, and either
    /// still within its window or already tried (then the claim gives it
    /// up, see [`expired`]).
    pub fn claimable(&self, raised_at: Timestamp, now: Timestamp) -> bool {
        self.open() && self.due_at.unwrap_or(raised_at) <= now && (self.attempts > 0 || !expired(raised_at, now))
    }
}

/// The message's window has passed: it is given up, not sent.
pub fn expired(raised_at: Timestamp, now: Timestamp) -> bool {
    now >= raised_at.plus(SEND_WITHIN)
}

/// How a claimed send ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendEnd {
    /// The receiver answered 2xx.
    Sent,
    /// The send failed with this code and kind, the receiver perhaps asking
    /// to wait (`Retry-After`).
    Failed {
        code: String,
        kind: FailureKind,
        retry_after: Option<Duration>,
    },
}

/// What the store writes after a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendDecision {
    Sent { at: Timestamp },
    Retry { at: Timestamp, code: String },
    GiveUp { at: Timestamp, code: String },
}

/// Decides what follows the `attempts`-th send (1 for the first) of a
/// message raised at `raised_at`, which ended `end` at `now`.
///
/// A failure that may pass ([`Disposition::Retry`]), and one whose outcome
/// is unknown (a receiver dedupes on `webhook-id`, so a resend is safe), is
/// tried again after [`SEND_BACKOFF`], while sends and the window last; any
/// other failure (a refusal, a wrong path) would fail the same way again.
pub fn after_send(
    attempts: u32,
    raised_at: Timestamp,
    end: &SendEnd,
    now: Timestamp,
    rng: &mut impl Rng,
) -> SendDecision {
    let (code, kind, retry_after) = match end {
        SendEnd::Sent => return SendDecision::Sent { at: now },
        SendEnd::Failed {
            code,
            kind,
            retry_after,
        } => (code.clone(), *kind, *retry_after),
    };
    let may_pass = matches!(kind.disposition(), Disposition::Retry | Disposition::Park);
    if !may_pass || attempts >= SEND_ATTEMPTS {
        return SendDecision::GiveUp { at: now, code };
    }
    let at = now.plus(SEND_BACKOFF.draw(attempts, retry_after, rng));
    if expired(raised_at, at) {
        return SendDecision::GiveUp { at: now, code };
    }
    SendDecision::Retry { at, code }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn failed(kind: FailureKind) -> SendEnd {
        SendEnd::Failed {
            code: "http.x".into(),
            kind,
            retry_after: None,
        }
    }

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    #[test]
    fn a_send_the_receiver_took_is_sent() {
        let now = T0.plus(Duration::from_secs(3));
        assert_eq!(
            after_send(1, T0, &SendEnd::Sent, now, &mut rng()),
            SendDecision::Sent { at: now }
        );
    }

    #[test]
    fn each_kind_of_failure_retries_or_gives_up() {
        for kind in FailureKind::ALL {
            let retries = matches!(kind.disposition(), Disposition::Retry | Disposition::Park);
            let d = after_send(1, T0, &failed(kind), T0, &mut rng());
            match d {
                SendDecision::Retry { at, ref code } => {
                    assert!(retries, "{kind:?} retried");
                    assert_eq!(code, "http.x");
                    assert!(
                        at >= T0.plus(SEND_BACKOFF.floor) && at <= T0.plus(SEND_BACKOFF.base),
                        "{at}"
                    );
                }
                SendDecision::GiveUp { at, .. } => {
                    assert!(!retries, "{kind:?} given up");
                    assert_eq!(at, T0);
                }
                SendDecision::Sent { .. } => panic!("a failure is never sent"),
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let end = SendEnd::Failed {
            code: "http.429".into(),
            kind: FailureKind::RateLimited,
            retry_after: Some(Duration::from_secs(120)),
        };
        match after_send(1, T0, &end, T0, &mut rng()) {
            SendDecision::Retry { at, .. } => assert!(at >= T0.plus(Duration::from_secs(120))),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn the_last_send_gives_up() {
        let d = after_send(SEND_ATTEMPTS, T0, &failed(FailureKind::Unavailable), T0, &mut rng());
        assert!(matches!(d, SendDecision::GiveUp { .. }), "{d:?}");
    }

    #[test]
    fn a_retry_past_the_window_gives_up() {
        let now = T0.plus(SEND_WITHIN).minus(Duration::from_millis(500));
        let d = after_send(1, T0, &failed(FailureKind::Unavailable), now, &mut rng());
        assert!(matches!(d, SendDecision::GiveUp { .. }), "{d:?}");
    }

    #[test]
    fn send_states() {
        let mut s = Sends::default();
        assert_eq!(s.state(), SendState::Unsent);
        assert!(s.claimable(T0, T0));
        assert!(
            !s.claimable(T0, T0.plus(SEND_WITHIN)),
            "never sent once its window passed"
        );
        s.attempts = 1;
        s.due_at = Some(T0.plus(Duration::from_secs(10)));
        assert_eq!(s.state(), SendState::Retrying);
        assert!(!s.claimable(T0, T0.plus(Duration::from_secs(9))));
        assert!(s.claimable(T0, T0.plus(Duration::from_secs(10))));
        assert!(
            s.claimable(T0, T0.plus(SEND_WITHIN)),
            "a tried message past its window is claimed to be given up"
        );
        s.sent_at = Some(T0);
        assert_eq!(s.state(), SendState::Sent);
        assert!(!s.claimable(T0, T0.plus(Duration::from_secs(10))));
        s.sent_at = None;
        s.failed_at = Some(T0);
        assert_eq!(s.state(), SendState::Failed);
        assert!(!s.open());
    }

    proptest! {
        #[test]
        fn sends_stop_within_their_number_and_window(seed: u64, retry_after_s in proptest::option::of(0u64..4000)) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let end = SendEnd::Failed {
                code: "http.503".into(),
                kind: FailureKind::Unavailable,
                retry_after: retry_after_s.map(Duration::from_secs),
            };
            let mut now = T0;
            let mut sends = 0;
            loop {
                sends += 1;
                match after_send(sends, T0, &end, now, &mut rng) {
                    SendDecision::Retry { at, .. } => {
                        prop_assert!(at > now);
                        prop_assert!(!expired(T0, at));
                        now = at;
                    }
                    SendDecision::GiveUp { .. } => break,
                    SendDecision::Sent { .. } => prop_assert!(false),
                }
            }
            prop_assert!(sends <= SEND_ATTEMPTS);
            prop_assert!(now < T0.plus(SEND_WITHIN));
        }
    }
}
