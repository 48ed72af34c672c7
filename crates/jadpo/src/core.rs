//! The core's types a program names: a delivery and its ids, a failure an
//! action returns, the time, a trace. The rules themselves (backoff, the
//! budget, the breaker) run inside the engine and are not called from here.
//!
//! ```
//! use jadpo::core::{Failure, FailureKind};
//! // A Rust action's declared failure: the same input fails the same way.
//! let failure = Failure::new("fraud.too_large", FailureKind::Rejected);
//! assert_eq!(failure.code, "fraud.too_large");
//! ```

pub use jadpo_core::delivery::OperatorNameInvalid;
pub use jadpo_core::{
    Delivery, DeliveryId, DeliveryState, EventId, Failure, FailureKind, FailureRecord, Held, Skipped, Timestamp,
    TraceContext, Waiting,
};

/// W3C trace context (docs/observability.md, "The trace an event belongs to").
pub mod trace {
    pub use jadpo_core::trace::TraceError;
}
