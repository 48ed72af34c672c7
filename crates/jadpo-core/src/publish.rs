//! How one publish to a message broker ended: the failure it is for the
//! action, and what it says to the connection's breaker. The broker
//! drivers' counterpart of [`crate::call::classify`], with the same rule
//! for the breaker: only an ending that says the broker surely did nothing,
//! or that no answer came back, counts as unavailable; any answer, a
//! refusal included, ends a run of failures.

use crate::breaker::CallVerdict;
use crate::failure::{Failure, FailureKind};
use crate::path::Piece;

/// The code of a publish whose target a parameter's value would not keep
/// to one word of it.
pub const TARGET_WORD_INVALID: &str = "publish.target_word_invalid";

/// The code of a publish whose target is longer than every broker takes.
pub const TARGET_TOO_LONG: &str = "publish.target_too_long";

/// The longest target, in bytes: AMQP's limit on a routing key, and well
/// within the others'.
pub const MAX_TARGET_BYTES: usize = 255;

/// The characters a parameter's value may not hold: each broker's word
/// separators (`.` NATS and AMQP topics, `/` MQTT, `:` Redis key
/// conventions) and wildcards (`*`, `>`, `+`, `#`). One rule for every
/// broker, so a target means the same on each.
pub const TARGET_WORD_FORBIDDEN: [char; 7] = ['.', '/', ':', '*', '>', '+', '#'];

/// Whether `value` can fill one word of a target: not empty, none of
/// [`TARGET_WORD_FORBIDDEN`], no whitespace or control character. A value
/// that fails would publish somewhere the app file never named (an
/// `order_id` of `a.b` moving `orders.{order_id}` one level down), so the
/// publish is never sent.
pub fn is_target_word(value: &str) -> bool {
    !value.is_empty()
        && !value
            .chars()
            .any(|c| TARGET_WORD_FORBIDDEN.contains(&c) || c.is_whitespace() || c.is_control())
}

/// The target to publish to, each parameter's value checked by
/// [`is_target_word`]: `publish.target_word_invalid` (naming the
/// parameter, never its value) or `publish.target_too_long`, both
/// `internal_fault`, since the same input fails the same way.
pub fn render_target<'a>(pieces: impl IntoIterator<Item = Piece<'a>>) -> Result<String, Failure> {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Literal(s) => out.push_str(s),
            Piece::Param { name, value } => {
                if !is_target_word(value) {
                    return Err(Failure::new(TARGET_WORD_INVALID, FailureKind::InternalFault).with_field("param", name));
                }
                out.push_str(value);
            }
        }
    }
    if out.len() > MAX_TARGET_BYTES {
        return Err(Failure::new(TARGET_TOO_LONG, FailureKind::InternalFault));
    }
    Ok(out)
}

/// The broker a connection publishes to (its `driver:`), which names the
/// failure codes (`amqp.unroutable`, `nats.unconfirmed`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Broker {
    /// RabbitMQ and other AMQP 0-9-1 brokers: an exchange and a routing
    /// key, publisher confirms, `mandatory`.
    Amqp,
    /// NATS JetStream: a subject a stream captures, its acknowledgement.
    Nats,
    /// A Redis stream: `XADD`.
    Redis,
    /// An MQTT broker: QoS 1, its `PUBACK`.
    Mqtt,
}

impl Broker {
    /// Every broker, in the order docs/retries.md lists them.
    pub const ALL: [Broker; 4] = [Broker::Amqp, Broker::Nats, Broker::Redis, Broker::Mqtt];

    /// The driver's name in the app file, and its failure codes' prefix.
    pub fn name(self) -> &'static str {
        match self {
            Broker::Amqp => "amqp",
            Broker::Nats => "nats",
            Broker::Redis => "redis",
            Broker::Mqtt => "mqtt",
        }
    }

    /// Whether the broker itself drops a second publish of one idempotency
    /// key: JetStream does, within its stream's duplicate window, for the
    /// key sent as `Nats-Msg-Id`. The others hand the key to the consumer,
    /// which must drop the second itself.
    pub fn drops_duplicates(self) -> bool {
        matches!(self, Broker::Nats)
    }
}

/// How one publish ended, as its driver tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishEnd {
    /// The broker took it: a publisher confirm, a JetStream acknowledgement,
    /// the id `XADD` returns, a `PUBACK`.
    Confirmed,
    /// It never left: the broker unreachable, the connection refused or
    /// reset before the message was written.
    NeverLeft,
    /// It was written, and no confirmation came within the call's timeout,
    /// or the connection died after the bytes left: the broker may have it.
    Unconfirmed,
    /// The broker pushes back: overloaded, a memory or disk alarm, flow
    /// control, Redis out of memory.
    Overloaded,
    /// The broker answered that nothing takes it: an unroutable message
    /// returned under `mandatory`, a subject no stream captures, an exchange
    /// that does not exist.
    NoTarget,
    /// The broker answered and refused this message: a negative confirm, a
    /// JetStream error, a Redis error reply (a key of another type), a
    /// `PUBACK` with a failure reason.
    Refused,
    /// Authentication or the publish's permission was refused.
    Unauthorized,
    /// Larger than the broker takes.
    TooLarge,
}

impl PublishEnd {
    /// Every ending, for tables and tests.
    pub const ALL: [PublishEnd; 8] = [
        PublishEnd::Confirmed,
        PublishEnd::NeverLeft,
        PublishEnd::Unconfirmed,
        PublishEnd::Overloaded,
        PublishEnd::NoTarget,
        PublishEnd::Refused,
        PublishEnd::Unauthorized,
        PublishEnd::TooLarge,
    ];
}

/// The action's result and the breaker's verdict for one publish to
/// `broker`. A publish whose confirmation never came is sent again later
/// only when that is safe: it carries an idempotency key, which the
/// broker (JetStream) or the consumer drops a second copy by; without one
/// it may already be out, and is `outcome_unknown` (parked).
pub fn classify(broker: Broker, end: PublishEnd, idempotency_key: bool) -> (Result<(), Failure>, CallVerdict) {
    use CallVerdict::{Answered, Unavailable};
    let (what, kind, verdict) = match end {
        PublishEnd::Confirmed => return (Ok(()), Answered),
        PublishEnd::NeverLeft => ("never_left", FailureKind::Unavailable, Unavailable),
        PublishEnd::Unconfirmed if idempotency_key => ("unconfirmed", FailureKind::Unavailable, Unavailable),
        PublishEnd::Unconfirmed => ("unconfirmed", FailureKind::OutcomeUnknown, Unavailable),
        PublishEnd::Overloaded => ("overloaded", FailureKind::Unavailable, Unavailable),
        PublishEnd::NoTarget => ("no_target", FailureKind::NotFound, Answered),
        PublishEnd::Refused => ("refused", FailureKind::Rejected, Answered),
        PublishEnd::Unauthorized => ("unauthorized", FailureKind::Unauthorized, Answered),
        PublishEnd::TooLarge => ("too_large", FailureKind::Rejected, Answered),
    };
    (Err(Failure::new(format!("{}.{what}", broker.name()), kind)), verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_value_fills_one_word_or_the_publish_is_refused() {
        #[rustfmt::skip]
        let table: &[(&str, bool)] = &[
            ("p_1", true), ("42", true), ("ÄÖ-ü", true), ("a@b", true),
            ("", false), ("a.b", false), (".", false), ("..", false), ("a/b", false),
            ("a:b", false), ("*", false), (">", false), ("+", false), ("#", false),
            ("a b", false), ("a\tb", false), ("a\nb", false), ("\u{0}", false), ("a\u{2003}b", false),
        ];
        for &(value, ok) in table {
            assert_eq!(is_target_word(value), ok, "{value:?}");
            let rendered = render_target([Piece::Literal("orders."), Piece::Param { name: "id", value }]);
            match rendered {
                Ok(t) => {
                    assert!(ok, "{value:?}");
                    assert_eq!(t, format!("orders.{value}"));
                }
                Err(f) => {
                    assert!(!ok, "{value:?}");
                    assert_eq!(
                        (f.code.as_str(), f.kind),
                        (TARGET_WORD_INVALID, FailureKind::InternalFault)
                    );
                    assert_eq!(
                        f.fields.get("param").map(String::as_str),
                        Some("id"),
                        "names the parameter"
                    );
                    assert!(
                        !f.fields.values().any(|v| v == value && !value.is_empty()),
                        "never the value"
                    );
                }
            }
        }
    }

    #[test]
    fn a_target_is_at_most_255_bytes() {
        let long = "x".repeat(MAX_TARGET_BYTES - 2);
        assert!(render_target([
            Piece::Literal("a."),
            Piece::Param {
                name: "p",
                value: &long
            }
        ])
        .is_ok());
        let f = render_target([
            Piece::Literal("ab."),
            Piece::Param {
                name: "p",
                value: &long,
            },
        ])
        .unwrap_err();
        assert_eq!(f.code, TARGET_TOO_LONG);
    }

    proptest! {
        /// Whatever the value, a target that renders holds the template's
        /// literals in place and the value as one word: splitting it at
        /// any separator gives back exactly the template's words.
        #[test]
        fn a_rendered_target_keeps_its_words(value in "\\PC{0,12}") {
            if let Ok(t) = render_target([Piece::Literal("a."), Piece::Param { name: "p", value: &value }, Piece::Literal(".z")]) {
                let words: Vec<&str> = t.split(|c| TARGET_WORD_FORBIDDEN.contains(&c)).collect();
                prop_assert_eq!(words, vec!["a", value.as_str(), "z"]);
            }
        }
    }
    use crate::failure::Disposition;
    use CallVerdict::{Answered, Unavailable as Down};
    use FailureKind::*;

    /// An ending, whether it carried an idempotency key, the failure's code
    /// suffix and kind (none: succeeded), and the breaker's verdict.
    type Row = (PublishEnd, bool, Option<(&'static str, FailureKind)>, CallVerdict);

    /// Every ending, row by row, with and without an idempotency key: its
    /// code, kind and verdict (the table in docs/retries.md, "Publishing
    /// to a broker").
    #[test]
    fn every_ending_has_its_kind_and_verdict() {
        #[rustfmt::skip]
        let table: &[Row] = &[
            (PublishEnd::Confirmed, false, None, Answered),
            (PublishEnd::Confirmed, true, None, Answered),
            (PublishEnd::NeverLeft, false, Some(("never_left", Unavailable)), Down),
            (PublishEnd::NeverLeft, true, Some(("never_left", Unavailable)), Down),
            (PublishEnd::Unconfirmed, false, Some(("unconfirmed", OutcomeUnknown)), Down),
            (PublishEnd::Unconfirmed, true, Some(("unconfirmed", Unavailable)), Down),
            (PublishEnd::Overloaded, false, Some(("overloaded", Unavailable)), Down),
            (PublishEnd::Overloaded, true, Some(("overloaded", Unavailable)), Down),
            (PublishEnd::NoTarget, false, Some(("no_target", NotFound)), Answered),
            (PublishEnd::NoTarget, true, Some(("no_target", NotFound)), Answered),
            (PublishEnd::Refused, false, Some(("refused", Rejected)), Answered),
            (PublishEnd::Refused, true, Some(("refused", Rejected)), Answered),
            (PublishEnd::Unauthorized, false, Some(("unauthorized", FailureKind::Unauthorized)), Answered),
            (PublishEnd::Unauthorized, true, Some(("unauthorized", FailureKind::Unauthorized)), Answered),
            (PublishEnd::TooLarge, false, Some(("too_large", Rejected)), Answered),
            (PublishEnd::TooLarge, true, Some(("too_large", Rejected)), Answered),
        ];
        assert_eq!(table.len(), PublishEnd::ALL.len() * 2, "every ending, both ways");
        for broker in Broker::ALL {
            for &(end, key, want, verdict) in table {
                let (result, got) = classify(broker, end, key);
                let got_failure = result.err().map(|f| (f.code, f.kind));
                let want_failure = want.map(|(what, kind)| (format!("{}.{what}", broker.name()), kind));
                assert_eq!(
                    (got_failure, got),
                    (want_failure, verdict),
                    "{broker:?} {end:?} key={key}"
                );
            }
        }
    }

    /// Only a publish that may be out already, without a key to drop the
    /// second copy by, is parked; what the broker surely did not take is
    /// retried; what it answered and refused is not.
    #[test]
    fn a_publish_is_sent_again_only_when_that_is_safe() {
        for broker in Broker::ALL {
            for end in PublishEnd::ALL {
                for key in [false, true] {
                    let Err(f) = classify(broker, end, key).0 else { continue };
                    let disposition = f.kind.disposition();
                    let may_be_out = end == PublishEnd::Unconfirmed;
                    if may_be_out && !key {
                        assert_eq!(disposition, Disposition::Park, "{broker:?} {end:?}");
                    } else if matches!(
                        end,
                        PublishEnd::NeverLeft | PublishEnd::Unconfirmed | PublishEnd::Overloaded
                    ) {
                        assert_eq!(disposition, Disposition::Retry, "{broker:?} {end:?} key={key}");
                    } else {
                        assert_eq!(disposition, Disposition::Fail, "{broker:?} {end:?} key={key}");
                    }
                }
            }
        }
    }

    /// The breaker counts what HTTP counts: no answer, or one that says the
    /// broker could not take anything now. Every answer about the message
    /// itself ends a run of failures.
    #[test]
    fn only_a_broker_that_took_nothing_counts_for_the_breaker() {
        for end in PublishEnd::ALL {
            let (_, verdict) = classify(Broker::Amqp, end, false);
            let down = matches!(
                end,
                PublishEnd::NeverLeft | PublishEnd::Unconfirmed | PublishEnd::Overloaded
            );
            assert_eq!(verdict == Down, down, "{end:?}");
        }
    }

    #[test]
    fn only_jetstream_drops_a_duplicate_itself() {
        let dropping: Vec<Broker> = Broker::ALL.into_iter().filter(|b| b.drops_duplicates()).collect();
        assert_eq!(dropping, [Broker::Nats]);
    }
}
