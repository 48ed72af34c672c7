//! What an emit carries beside its event's name and payload.

use jadpo_core::TraceContext;

/// An emit's options: an idempotency key, the trace it belongs to.
///
/// ```
/// use jadpo::EmitOptions;
/// use jadpo::core::TraceContext;
///
/// let trace = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)?;
/// let options = EmitOptions::default().idempotency_key("order-1").trace(trace);
/// # Ok::<(), jadpo::core::trace::TraceError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmitOptions {
    /// Unique per event name while the event is kept: emitting again with
    /// the same key and payload returns the first event and makes nothing
    /// (see [`crate::Jadpo::emit_idempotent`]).
    pub idempotency_key: Option<String>,
    /// The trace the event joins (W3C Trace Context): every attempt of its
    /// deliveries, in any process and however late, belongs to it, and the
    /// provider calls carry it on (docs/observability.md).
    pub trace: Option<TraceContext>,
}

impl EmitOptions {
    /// Under this idempotency key (1 to 255 bytes of visible ASCII).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// In this trace.
    pub fn trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }
}
