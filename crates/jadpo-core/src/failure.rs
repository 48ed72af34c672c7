//! How an action failed, and what that means for its delivery.
//!
//! A failure is `{code, kind, fields}`. The `kind` alone decides what happens
//! next (the table of failure kinds in docs/retries.md); the `code` says precisely what went wrong;
//! the `fields` are detail for the caller and may hold personal data, so they
//! never reach a delivery's record, a log line or a `Debug` print.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The kinds of failure (docs/retries.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    Unavailable,
    RateLimited,
    NotFound,
    Conflict,
    Rejected,
    Unauthorized,
    Invalid,
    OutcomeUnknown,
    DeadlineExceeded,
    LeaseExpired,
    InternalFault,
    Overflow,
}

/// What a failure of some kind does to its delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// It may pass: try again after a wait, while the budget lasts.
    Retry,
    /// The same input fails the same way: failed, not retried.
    Fail,
    /// A defect in the code: failed until an operator retries it.
    Defect,
    /// An outside call may have happened: parked for an operator, never
    /// retried automatically.
    Park,
}

impl FailureKind {
    pub const ALL: [FailureKind; 12] = [
        FailureKind::Unavailable,
        FailureKind::RateLimited,
        FailureKind::NotFound,
        FailureKind::Conflict,
        FailureKind::Rejected,
        FailureKind::Unauthorized,
        FailureKind::Invalid,
        FailureKind::OutcomeUnknown,
        FailureKind::DeadlineExceeded,
        FailureKind::LeaseExpired,
        FailureKind::InternalFault,
        FailureKind::Overflow,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Unavailable => "unavailable",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::NotFound => "not_found",
            FailureKind::Conflict => "conflict",
            FailureKind::Rejected => "rejected",
            FailureKind::Unauthorized => "unauthorized",
            FailureKind::Invalid => "invalid",
            FailureKind::OutcomeUnknown => "outcome_unknown",
            FailureKind::DeadlineExceeded => "deadline_exceeded",
            FailureKind::LeaseExpired => "lease_expired",
            FailureKind::InternalFault => "internal_fault",
            FailureKind::Overflow => "overflow",
        }
    }

    pub fn parse(s: &str) -> Option<FailureKind> {
        FailureKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The table of failure kinds in docs/retries.md, as a function of the
    /// kind alone.
    ///
    /// A store fault and a run out of time are `unavailable`; a run stopped
    /// by its limit and a worker lost under its lease are retried as
    /// `unavailable` is, counted against the budget.
    pub const fn disposition(self) -> Disposition {
        match self {
            FailureKind::Unavailable
            | FailureKind::RateLimited
            | FailureKind::DeadlineExceeded
            | FailureKind::LeaseExpired => Disposition::Retry,
            FailureKind::NotFound
            | FailureKind::Conflict
            | FailureKind::Rejected
            | FailureKind::Unauthorized
            | FailureKind::Invalid => Disposition::Fail,
            FailureKind::OutcomeUnknown => Disposition::Park,
            FailureKind::InternalFault | FailureKind::Overflow => Disposition::Defect,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest failure code a record keeps; longer codes are cut, so a
/// runaway code cannot bloat every row.
pub const MAX_CODE_LEN: usize = 128;

/// A failure as an action returns it.
#[derive(Clone, PartialEq, Eq)]
pub struct Failure {
    /// Specific: `payments.card_declined`, `http.503`.
    pub code: String,
    pub kind: FailureKind,
    /// Detail for the caller. Never recorded, logged or printed.
    pub fields: BTreeMap<String, String>,
    /// The provider's `Retry-After`, honoured by the next wait.
    pub retry_after: Option<Duration>,
}

impl Failure {
    pub fn new(code: impl Into<String>, kind: FailureKind) -> Failure {
        Failure {
            code: code.into(),
            kind,
            fields: BTreeMap::new(),
            retry_after: None,
        }
    }

    pub fn with_field(mut self, name: impl Into<String>, value: impl Into<String>) -> Failure {
        self.fields.insert(name.into(), value.into());
        self
    }

    pub fn with_retry_after(mut self, wait: Duration) -> Failure {
        self.retry_after = Some(wait);
        self
    }

    /// A fault reaching a store before anything committed.
    pub fn store_unavailable() -> Failure {
        Failure::new("store.unavailable", FailureKind::Unavailable)
    }

    /// The run's time limit stopped the action.
    pub fn deadline_exceeded() -> Failure {
        Failure::new("run.deadline_exceeded", FailureKind::DeadlineExceeded)
    }

    /// The worker holding the delivery was lost before it finished.
    pub fn lease_expired() -> Failure {
        Failure::new("run.lease_expired", FailureKind::LeaseExpired)
    }

    /// The action panicked: a defect.
    pub fn panicked() -> Failure {
        Failure::new("run.panicked", FailureKind::InternalFault)
    }

    /// What the record keeps: code and kind, never fields.
    pub fn record(&self) -> FailureRecord {
        FailureRecord::new(&self.code, self.kind)
    }
}

// Hand-written so that `{:?}` in a log or a panic message can never print a
// field's value.
impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failure")
            .field("code", &self.code)
            .field("kind", &self.kind)
            .field("fields", &format_args!("<{} redacted>", self.fields.len()))
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

/// A failure as a delivery's record keeps it: code and kind only.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FailureRecord {
    pub code: String,
    pub kind: FailureKind,
}

impl FailureRecord {
    pub fn new(code: &str, kind: FailureKind) -> FailureRecord {
        let code = match code.char_indices().nth(MAX_CODE_LEN) {
            Some((cut, _)) => &code[..cut],
            None => code,
        };
        let code = if code.is_empty() { kind.as_str() } else { code };
        FailureRecord {
            code: code.to_owned(),
            kind,
        }
    }

    pub fn deadline_exceeded() -> FailureRecord {
        Failure::deadline_exceeded().record()
    }

    pub fn lease_expired() -> FailureRecord {
        Failure::lease_expired().record()
    }

    /// The record of a delivery whose subscriber the app no longer
    /// declares: failed at its claim (docs/decisions.md, "Unknown
    /// subscriber at the claim").
    pub fn unknown_subscriber() -> FailureRecord {
        FailureRecord::new("subscriber.unknown", FailureKind::InternalFault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_name() {
        for kind in FailureKind::ALL {
            assert_eq!(FailureKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(FailureKind::parse("Unavailable"), None);
    }

    /// The table of failure kinds in docs/retries.md, row by row.
    #[test]
    fn failure_kinds_table_how_the_action_ended() {
        use Disposition::*;
        use FailureKind::*;
        let table = [
            (Unavailable, Retry),
            (RateLimited, Retry),
            (NotFound, Fail),
            (Conflict, Fail),
            (Rejected, Fail),
            (Unauthorized, Fail),
            (Invalid, Fail),
            (OutcomeUnknown, Park),
            (DeadlineExceeded, Retry),
            (LeaseExpired, Retry),
            (InternalFault, Defect),
            (Overflow, Defect),
        ];
        assert_eq!(table.len(), FailureKind::ALL.len(), "every kind has a row");
        for (kind, want) in table {
            assert_eq!(kind.disposition(), want, "{kind}");
        }
        assert_eq!(Failure::store_unavailable().kind.disposition(), Retry);
        assert_eq!(Failure::panicked().kind.disposition(), Defect);
    }

    #[test]
    fn debug_never_prints_fields() {
        let f = Failure::new("payments.card_declined", FailureKind::Rejected).with_field("card_holder", "Ada Lovelace");
        let printed = format!("{f:?}");
        assert!(!printed.contains("Ada"), "{printed}");
        assert!(printed.contains("1 redacted"), "{printed}");
    }

    #[test]
    fn record_keeps_code_and_kind_only() {
        let f = Failure::new("crm.duplicate", FailureKind::Conflict).with_field("email", "a@b.c");
        let r = f.record();
        assert_eq!(
            r,
            FailureRecord {
                code: "crm.duplicate".into(),
                kind: FailureKind::Conflict
            }
        );
    }

    #[test]
    fn record_cuts_long_codes_and_names_empty_ones() {
        let long = "x".repeat(MAX_CODE_LEN + 50);
        assert_eq!(FailureRecord::new(&long, FailureKind::Invalid).code.len(), MAX_CODE_LEN);
        assert_eq!(FailureRecord::new("", FailureKind::Invalid).code, "invalid");
        let multibyte = "é".repeat(MAX_CODE_LEN + 1);
        assert_eq!(
            FailureRecord::new(&multibyte, FailureKind::Invalid)
                .code
                .chars()
                .count(),
            MAX_CODE_LEN
        );
    }
}
