//! A delivery's and a breaker's row as plain column values, and the one
//! way they become the core's types and back, for every database.
//!
//! Each driver only moves values between its rows and these structs; what
//! a column means, its unit, and what counts as corrupt are decided here.
//! A value no rule could have written (an unknown state, a negative count,
//! a failure code without its kind) is [`Corrupt`]: an error naming the
//! column, never a silent zero.
//!
//! Units: a column named `*_at`, `*_since`, `*_until` or `due_at` holds a
//! timestamp in milliseconds since the epoch ([`at_ms`]); one named `*_ms`
//! holds a duration in milliseconds ([`span_ms`]).

use jadpo_core::breaker::{Breaker, BreakerState, Probe};
use jadpo_core::key_rule::KeyRule;
use jadpo_core::{
    Delivery, DeliveryId, DeliveryState, EventId, FailureKind, FailureRecord, Held, Lease, LeaseToken, Skipped,
    Timestamp, WaitFor, Waiting,
};
use std::fmt;
use std::time::Duration;

/// A column whose value no rule could have written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Corrupt {
    pub column: &'static str,
    pub value: String,
}

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unreadable row: {} {:?}", self.column, self.value)
    }
}

fn corrupt(column: &'static str, value: impl fmt::Debug) -> Corrupt {
    Corrupt {
        column,
        value: format!("{value:?}"),
    }
}

/// A timestamp as its column holds it: milliseconds since the epoch.
pub(crate) fn at_ms(t: Timestamp) -> i64 {
    t.as_millis()
}

/// A duration as its `*_ms` column holds it, saturating.
pub(crate) fn span_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn span(column: &'static str, ms: i64) -> Result<Duration, Corrupt> {
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| corrupt(column, ms))
}

fn count(column: &'static str, n: i64) -> Result<u32, Corrupt> {
    u32::try_from(n).map_err(|_| corrupt(column, n))
}

/// A `state` column of deliveries or attempts.
pub(crate) fn state_of(s: &str) -> Result<DeliveryState, Corrupt> {
    DeliveryState::parse(s).ok_or_else(|| corrupt("state", s))
}

/// A failure's `code` and `kind` columns: both or neither.
pub(crate) fn failure_of(code: Option<String>, kind: Option<String>) -> Result<Option<FailureRecord>, Corrupt> {
    match (code, kind) {
        (Some(code), Some(kind)) => Ok(Some(FailureRecord {
            code,
            kind: FailureKind::parse(&kind).ok_or_else(|| corrupt("failure kind", &kind))?,
        })),
        (None, None) => Ok(None),
        (code, kind) => Err(corrupt("failure code and kind", (code, kind))),
    }
}

/// An event's `traceparent` and `tracestate` columns. They were checked on
/// the way in; one that no longer parses (written by hand) is read as no
/// trace rather than refusing its delivery's run.
pub(crate) fn trace(traceparent: Option<String>, tracestate: Option<String>) -> Option<jadpo_core::TraceContext> {
    jadpo_core::TraceContext::parse(&traceparent?, tracestate.as_deref()).ok()
}

/// A count column (attempts, an attempt's number): never negative.
#[cfg(feature = "sqlite")]
pub(crate) fn count_of(column: &'static str, n: i64) -> Result<u32, Corrupt> {
    count(column, n)
}

/// The columns of `jadpo_deliveries` that make a [`Delivery`], in the
/// drivers' `delivery_columns!` order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeliveryRow {
    pub id: i64,
    pub event_id: i64,
    pub subscriber: String,
    pub state: String,
    pub attempts: i64,
    pub due_at: i64,
    pub budget_from: i64,
    pub held_for_ms: i64,
    pub lease_owner: Option<String>,
    /// Kept after the lease ends: the next claim issues this plus one.
    pub lease_token: i64,
    pub lease_until: Option<i64>,
    pub last_failure_code: Option<String>,
    pub last_failure_kind: Option<String>,
    pub held_connection: Option<String>,
    pub held_since: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub waiting_on: Option<String>,
    pub waiting_for: Option<String>,
    pub delivery_key: Option<String>,
    pub key_rule: Option<String>,
    pub skipped_by: Option<String>,
    pub skipped_at: Option<i64>,
}

impl DeliveryRow {
    /// The delivery, and the lease token the row keeps (the core's
    /// `Delivery` forgets it once the lease ends).
    pub(crate) fn decode(self) -> Result<(Delivery, i64), Corrupt> {
        let state = state_of(&self.state)?;
        let lease = match (self.lease_owner, self.lease_until) {
            (Some(owner), Some(until)) => Some(Lease {
                owner,
                token: LeaseToken(self.lease_token),
                until: Timestamp::from_millis(until),
            }),
            (None, None) => None,
            (owner, until) => return Err(corrupt("lease_owner, lease_until", (owner, until))),
        };
        let last_failure = failure_of(self.last_failure_code, self.last_failure_kind)?;
        let held = match (self.held_connection, self.held_since) {
            (Some(connection), Some(since)) => Some(Held {
                connection,
                since: Timestamp::from_millis(since),
            }),
            (None, None) => None,
            (c, s) => return Err(corrupt("held_connection, held_since", (c, s))),
        };
        let waiting = match (self.waiting_on, self.waiting_for) {
            (Some(connection), Some(reason)) => Some(Waiting {
                connection,
                reason: WaitFor::parse(&reason).ok_or_else(|| corrupt("waiting_for", &reason))?,
            }),
            (None, None) => None,
            (c, r) => return Err(corrupt("waiting_on, waiting_for", (c, r))),
        };
        let d = Delivery {
            id: DeliveryId(self.id),
            event_id: EventId(self.event_id),
            subscriber: self.subscriber,
            state,
            attempts: count("attempts", self.attempts)?,
            due_at: Timestamp::from_millis(self.due_at),
            budget_from: Timestamp::from_millis(self.budget_from),
            held_for: span("held_for_ms", self.held_for_ms)?,
            lease,
            last_failure,
            held,
            waiting,
            created_at: Timestamp::from_millis(self.created_at),
            updated_at: Timestamp::from_millis(self.updated_at),
            finished_at: self.finished_at.map(Timestamp::from_millis),
            key: self.delivery_key.map(jadpo_core::key::Key::stored),
            key_rule: match self.key_rule {
                Some(r) => Some(KeyRule::from_stored(&r).ok_or_else(|| corrupt("key_rule", &r))?),
                None => None,
            },
            skipped: match (self.skipped_by, self.skipped_at) {
                (Some(by), Some(at)) => Some(Skipped {
                    by,
                    at: Timestamp::from_millis(at),
                }),
                (None, None) => None,
                (b, a) => return Err(corrupt("skipped_by, skipped_at", (b, a))),
            },
        };
        Ok((d, self.lease_token))
    }

    /// The row of `d`; `token` is the row's stored token, kept when `d`
    /// holds no lease.
    #[cfg(any(feature = "sqlite", test))]
    pub(crate) fn encode(d: &Delivery, token: i64) -> DeliveryRow {
        DeliveryRow {
            id: d.id.0,
            event_id: d.event_id.0,
            subscriber: d.subscriber.clone(),
            state: d.state.as_str().to_owned(),
            attempts: i64::from(d.attempts),
            due_at: at_ms(d.due_at),
            budget_from: at_ms(d.budget_from),
            held_for_ms: span_ms(d.held_for),
            lease_owner: d.lease.as_ref().map(|l| l.owner.clone()),
            lease_token: d.lease.as_ref().map_or(token, |l| l.token.0),
            lease_until: d.lease.as_ref().map(|l| at_ms(l.until)),
            last_failure_code: d.last_failure.as_ref().map(|f| f.code.clone()),
            last_failure_kind: d.last_failure.as_ref().map(|f| f.kind.as_str().to_owned()),
            held_connection: d.held.as_ref().map(|h| h.connection.clone()),
            held_since: d.held.as_ref().map(|h| at_ms(h.since)),
            created_at: at_ms(d.created_at),
            updated_at: at_ms(d.updated_at),
            finished_at: d.finished_at.map(at_ms),
            waiting_on: d.waiting.as_ref().map(|w| w.connection.clone()),
            waiting_for: d.waiting.as_ref().map(|w| w.reason.as_str().to_owned()),
            delivery_key: d.key.as_ref().map(|k| k.as_str().to_owned()),
            key_rule: d.key_rule.map(KeyRule::stored),
            skipped_by: d.skipped.as_ref().map(|s| s.by.clone()),
            skipped_at: d.skipped.as_ref().map(|s| at_ms(s.at)),
        }
    }
}

/// The columns of `jadpo_circuit_breakers`, in the drivers'
/// `breaker_columns!` order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BreakerRow {
    pub connection: String,
    pub state: String,
    pub consecutive_unavailable: i64,
    pub opened_at: Option<i64>,
    pub outage_since: Option<i64>,
    pub pause_ms: i64,
    pub probe_delivery: Option<i64>,
    pub probe_until: Option<i64>,
    pub alert_raised: bool,
    pub version: i64,
}

impl BreakerRow {
    pub(crate) fn decode(self) -> Result<Breaker, Corrupt> {
        let probe = match (self.probe_delivery, self.probe_until) {
            (Some(delivery), Some(until)) => Some(Probe {
                delivery: DeliveryId(delivery),
                until: Timestamp::from_millis(until),
            }),
            (None, None) => None,
            (d, u) => return Err(corrupt("probe_delivery, probe_until", (d, u))),
        };
        Ok(Breaker {
            state: BreakerState::parse(&self.state).ok_or_else(|| corrupt("state", &self.state))?,
            consecutive_unavailable: count("consecutive_unavailable", self.consecutive_unavailable)?,
            opened_at: self.opened_at.map(Timestamp::from_millis),
            outage_since: self.outage_since.map(Timestamp::from_millis),
            pause: span("pause_ms", self.pause_ms)?,
            probe,
            alert_raised: self.alert_raised,
            version: self.version,
            connection: self.connection,
        })
    }

    pub(crate) fn encode(b: &Breaker) -> BreakerRow {
        BreakerRow {
            connection: b.connection.clone(),
            state: b.state.as_str().to_owned(),
            consecutive_unavailable: i64::from(b.consecutive_unavailable),
            opened_at: b.opened_at.map(at_ms),
            outage_since: b.outage_since.map(at_ms),
            pause_ms: span_ms(b.pause),
            probe_delivery: b.probe.map(|p| p.delivery.0),
            probe_until: b.probe.map(|p| at_ms(p.until)),
            alert_raised: b.alert_raised,
            version: b.version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jadpo_core::BreakerPolicy;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + ms)
    }

    fn every_field() -> Delivery {
        let mut d = Delivery::new(DeliveryId(7), EventId(3), "record", t(0));
        d.state = DeliveryState::Running;
        d.attempts = 2;
        d.held_for = Duration::from_millis(1_500);
        d.lease = Some(Lease {
            owner: "w".into(),
            token: LeaseToken(9),
            until: t(60_000),
        });
        d.last_failure = Some(FailureRecord::new("http.503", FailureKind::Unavailable));
        d.updated_at = t(5);
        d.key = Some(jadpo_core::key::Key::stored("c-42".into()));
        d
    }

    #[test]
    fn a_delivery_comes_back_as_it_went_in() {
        let mut cases = vec![every_field(), Delivery::new(DeliveryId(1), EventId(1), "s", t(0))];
        let mut held = Delivery::new(DeliveryId(2), EventId(1), "s", t(0));
        held.state = DeliveryState::Held;
        held.held = Some(Held {
            connection: "pay".into(),
            since: t(10),
        });
        cases.push(held);
        let mut waiting = Delivery::new(DeliveryId(3), EventId(1), "s", t(0));
        waiting.waiting = Some(Waiting {
            connection: "pay".into(),
            reason: WaitFor::Slot,
        });
        cases.push(waiting);
        let mut finished = Delivery::new(DeliveryId(4), EventId(1), "s", t(0));
        finished.state = DeliveryState::Succeeded;
        finished.finished_at = Some(t(20));
        cases.push(finished);
        for d in cases {
            let row = DeliveryRow::encode(&d, 4);
            let (back, token) = row.decode().unwrap();
            assert_eq!(back, d);
            assert_eq!(token, d.lease.as_ref().map_or(4, |l| l.token.0));
        }
    }

    #[test]
    fn a_corrupt_delivery_column_is_an_error_never_a_zero() {
        let good = DeliveryRow::encode(&every_field(), 0);
        let cases: Vec<(&str, DeliveryRow)> = vec![
            (
                "attempts",
                DeliveryRow {
                    attempts: -1,
                    ..good.clone()
                },
            ),
            (
                "attempts",
                DeliveryRow {
                    attempts: i64::from(u32::MAX) + 1,
                    ..good.clone()
                },
            ),
            (
                "state",
                DeliveryRow {
                    state: "lost".into(),
                    ..good.clone()
                },
            ),
            (
                "held_for_ms",
                DeliveryRow {
                    held_for_ms: -5,
                    ..good.clone()
                },
            ),
            (
                "failure kind",
                DeliveryRow {
                    last_failure_kind: Some("nope".into()),
                    ..good.clone()
                },
            ),
            (
                "failure code and kind",
                DeliveryRow {
                    last_failure_kind: None,
                    ..good.clone()
                },
            ),
            (
                "lease_owner, lease_until",
                DeliveryRow {
                    lease_until: None,
                    ..good.clone()
                },
            ),
            (
                "waiting_for",
                DeliveryRow {
                    waiting_on: Some("p".into()),
                    waiting_for: Some("x".into()),
                    ..good.clone()
                },
            ),
        ];
        for (column, row) in cases {
            assert_eq!(row.decode().unwrap_err().column, column);
        }
    }

    #[test]
    fn a_breaker_comes_back_as_it_went_in_and_a_corrupt_one_is_refused() {
        let mut b = Breaker::new("pay");
        for _ in 0..5 {
            b.record(
                jadpo_core::CallVerdict::Unavailable,
                DeliveryId(1),
                t(0),
                &BreakerPolicy::DEFAULT,
            );
        }
        b.take_probe(DeliveryId(2), t(120_000), t(61_000));
        for b in [Breaker::new("mail"), b] {
            assert_eq!(BreakerRow::encode(&b).decode().unwrap(), b);
        }
        let good = BreakerRow::encode(&Breaker::new("mail"));
        let bad = [
            (
                "consecutive_unavailable",
                BreakerRow {
                    consecutive_unavailable: -1,
                    ..good.clone()
                },
            ),
            (
                "state",
                BreakerRow {
                    state: "ajar".into(),
                    ..good.clone()
                },
            ),
            (
                "pause_ms",
                BreakerRow {
                    pause_ms: -1,
                    ..good.clone()
                },
            ),
            (
                "probe_delivery, probe_until",
                BreakerRow {
                    probe_delivery: Some(1),
                    ..good.clone()
                },
            ),
        ];
        for (column, row) in bad {
            assert_eq!(row.decode().unwrap_err().column, column);
        }
    }
}
