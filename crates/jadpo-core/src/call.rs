//! How one outside call ended: the failure it is for the action, and what
//! it says to the connection's breaker (docs/retries.md: the table of
//! failure kinds, and what counts as unavailable for the breaker).

use crate::breaker::CallVerdict;
use crate::failure::{Failure, FailureKind};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallEnd {
    /// The provider answered with this status.
    Status { status: u16, retry_after: Option<Duration> },
    /// The call never left: DNS, connection refused, reset before sending.
    NeverLeft,
    /// No answer in time after the request was sent.
    TimedOut { idempotent: bool },
}

/// The action's result and the breaker's verdict for one call.
pub fn classify(end: CallEnd) -> (Result<(), Failure>, CallVerdict) {
    use CallVerdict::{Answered, Unavailable};
    match end {
        CallEnd::Status { status, retry_after } => {
            let (kind, verdict) = match status {
                200..=299 => return (Ok(()), Answered),
                404 => (FailureKind::NotFound, Answered),
                409 => (FailureKind::Conflict, Answered),
                401 | 403 => (FailureKind::Unauthorized, Answered),
                408 => (FailureKind::Unavailable, Unavailable),
                429 => (FailureKind::RateLimited, Unavailable),
                500..=599 => (FailureKind::Unavailable, Unavailable),
                // 400, 422, every other 4xx, and a redirect not followed: the
                // provider answered and refused this input.
                100..=499 => (FailureKind::Rejected, Answered),
                // Not HTTP as we know it: something in between is broken.
                _ => (FailureKind::Unavailable, Unavailable),
            };
            let mut failure = Failure::new(format!("http.{status}"), kind);
            if matches!(kind, FailureKind::Unavailable | FailureKind::RateLimited) {
                failure.retry_after = retry_after;
            }
            (Err(failure), verdict)
        }
        CallEnd::NeverLeft => (
            Err(Failure::new("http.never_left", FailureKind::Unavailable)),
            Unavailable,
        ),
        CallEnd::TimedOut { idempotent: true } => {
            (Err(Failure::new("http.timeout", FailureKind::Unavailable)), Unavailable)
        }
        CallEnd::TimedOut { idempotent: false } => (
            Err(Failure::new("http.timeout", FailureKind::OutcomeUnknown)),
            Unavailable,
        ),
    }
}

/// The call is safe to send again: an idempotent method, or an idempotency key.
pub fn is_idempotent(method: &str, has_idempotency_key: bool) -> bool {
    has_idempotency_key
        || matches!(
            method.to_ascii_uppercase().as_str(),
            "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use CallVerdict::{Answered, Unavailable as Down};
    use FailureKind::*;

    fn status(status: u16) -> CallEnd {
        CallEnd::Status {
            status,
            retry_after: Some(Duration::from_secs(7)),
        }
    }

    /// Every way a call ends, row by row: its failure kind and its verdict
    /// for the breaker.
    #[test]
    fn outcome_table() {
        let table: &[(CallEnd, Option<FailureKind>, CallVerdict)] = &[
            (status(200), None, Answered),
            (status(204), None, Answered),
            (status(299), None, Answered),
            (status(404), Some(NotFound), Answered),
            (status(409), Some(Conflict), Answered),
            (status(400), Some(Rejected), Answered),
            (status(422), Some(Rejected), Answered),
            (status(401), Some(Unauthorized), Answered),
            (status(403), Some(Unauthorized), Answered),
            (status(410), Some(Rejected), Answered),
            (status(451), Some(Rejected), Answered),
            (status(302), Some(Rejected), Answered),
            (status(429), Some(RateLimited), Down),
            (status(408), Some(Unavailable), Down),
            (status(500), Some(Unavailable), Down),
            (status(502), Some(Unavailable), Down),
            (status(503), Some(Unavailable), Down),
            (status(599), Some(Unavailable), Down),
            (CallEnd::NeverLeft, Some(Unavailable), Down),
            (CallEnd::TimedOut { idempotent: true }, Some(Unavailable), Down),
            (CallEnd::TimedOut { idempotent: false }, Some(OutcomeUnknown), Down),
        ];
        for &(end, kind, verdict) in table {
            let (result, v) = classify(end);
            assert_eq!(result.as_ref().err().map(|f| f.kind), kind, "{end:?}");
            assert_eq!(v, verdict, "{end:?}");
        }
    }

    #[test]
    fn retry_after_is_kept_for_429_408_and_5xx_only() {
        for s in [429, 408, 503] {
            assert_eq!(
                classify(status(s)).0.unwrap_err().retry_after,
                Some(Duration::from_secs(7)),
                "{s}"
            );
        }
        for s in [404, 400] {
            assert_eq!(classify(status(s)).0.unwrap_err().retry_after, None, "{s}");
        }
    }

    #[test]
    fn codes_name_the_status() {
        assert_eq!(classify(status(503)).0.unwrap_err().code, "http.503");
        assert_eq!(classify(CallEnd::NeverLeft).0.unwrap_err().code, "http.never_left");
    }

    #[test]
    fn idempotent_methods() {
        for m in ["GET", "put", "DELETE", "HEAD"] {
            assert!(is_idempotent(m, false), "{m}");
        }
        for m in ["POST", "PATCH"] {
            assert!(!is_idempotent(m, false), "{m}");
            assert!(is_idempotent(m, true), "{m} with a key");
        }
    }
}
