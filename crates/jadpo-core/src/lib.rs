//! Jadpo's rules, as pure functions over plain data and a time.
//!
//! No I/O, no async, no clock reads: "now" and the random source are always
//! arguments. The stores, the workers, HTTP and the command line feed these
//! functions and write down what they return.
//!
//! - [`failure`]: failure kinds and what each does to a delivery.
//! - [`alert`]: alert messages, and when a failed send is tried again.
//! - [`backoff`]: the wait before the next try.
//! - [`budget`]: how many tries, within how long.
//! - [`claim`]: the decisions taken when a due delivery is claimed.
//! - [`attempt`]: the decision after an attempt ends.
//! - [`breaker`]: a connection's circuit breaker.
//! - [`key`]: a delivery's key, from its event's value.
//! - [`key_rule`]: per-key order and caps: which deliveries sharing a key
//!   may be due at once.
//! - [`limit`]: a connection's rate and concurrency limits.
//! - [`call`]: how an outside call ended, for the action and the breaker.
//! - [`clock`]: which clock a start runs on: real time or the store's
//!   scaled clock.
//! - [`path`]: a call's path, each parameter exactly one segment.
//! - [`schedule`]: a schedule's due time, lease and alert.
//! - [`trace`]: the W3C trace context an event was emitted in.

pub mod alert;
pub mod attempt;
pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod call;
pub mod claim;
pub mod clock;
pub mod delivery;
pub mod delivery_state;
pub mod failure;
pub mod ids;
pub mod key;
pub mod key_rule;
pub mod limit;
pub mod path;
pub mod publish;
pub mod schedule;
pub mod time;
pub mod trace;

pub use attempt::{AttemptEnd, Outcome};
pub use backoff::Backoff;
pub use breaker::{Alert, Breaker, BreakerPolicy, BreakerState, CallVerdict, Gate, Transition};
pub use budget::{Budget, BudgetError};
pub use claim::{Claim, ClaimDecision, ClaimInput};
pub use delivery::{Delivery, DeliveryId, DeliveryState, EventId, Held, Lease, LeaseToken, Skipped, Waiting};
pub use failure::{Disposition, Failure, FailureKind, FailureRecord};
pub use limit::WaitFor;
pub use time::Timestamp;
pub use trace::TraceContext;
