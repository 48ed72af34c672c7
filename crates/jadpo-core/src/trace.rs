//! The trace an event belongs to: W3C Trace Context's `traceparent` and
//! `tracestate`, as the emitter sent them (docs/observability.md).
//!
//! An event keeps the context it was emitted in, so an attempt made in
//! another process an hour later still belongs to the emitter's trace. Only
//! the format is checked here; spans and their export are the shell's.
//! The parser is ours rather than OpenTelemetry's propagator so that this
//! crate stays free of the OpenTelemetry API: the format is four fixed
//! fields, and the stores keep the two headers as text.

use std::fmt;

/// The longest `tracestate` kept, in bytes: what the specification asks
/// every participant to pass on. A longer one is dropped whole.
pub const MAX_TRACESTATE: usize = 512;

/// The most list members a `tracestate` may have.
const MAX_TRACESTATE_MEMBERS: usize = 32;

/// A valid `traceparent`, and the `tracestate` that came with it when that
/// one was valid too.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// Why a `traceparent` was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError(&'static str);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; a traceparent is VERSION-TRACEID-PARENTID-FLAGS in lowercase hex, \
             such as 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            self.0
        )
    }
}

impl std::error::Error for TraceError {}

impl TraceContext {
    /// Checks `traceparent` (version 00 exactly; a later version's first
    /// four fields, as the specification asks), and keeps `tracestate` only
    /// if it is well formed and at most [`MAX_TRACESTATE`] bytes: a bad
    /// `tracestate` never costs the trace itself.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceError> {
        let traceparent = traceparent.trim_matches([' ', '\t']);
        let b = traceparent.as_bytes();
        if b.len() < 55 {
            return Err(TraceError("the traceparent is shorter than 55 characters"));
        }
        if b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return Err(TraceError(
                "the traceparent's fields are not separated by `-` where expected",
            ));
        }
        if ![&b[..2], &b[3..35], &b[36..52], &b[53..55]]
            .iter()
            .all(|f| is_lower_hex(f))
        {
            return Err(TraceError("the traceparent has a character that is not lowercase hex"));
        }
        // Every byte sliced is ASCII hex now.
        let (version, trace_id, parent_id, flags) = (
            &traceparent[..2],
            &traceparent[3..35],
            &traceparent[36..52],
            &traceparent[53..55],
        );
        match version {
            "ff" => return Err(TraceError("version ff is not a valid traceparent version")),
            "00" if b.len() != 55 => return Err(TraceError("a version 00 traceparent is exactly 55 characters")),
            // A later version may add fields after the flags, after a `-`.
            _ if b.len() > 55 && b[55] != b'-' => {
                return Err(TraceError(
                    "the traceparent's flags are followed by something other than `-`",
                ))
            }
            _ => {}
        }
        if trace_id.bytes().all(|c| c == b'0') {
            return Err(TraceError("the trace id is all zeros"));
        }
        if parent_id.bytes().all(|c| c == b'0') {
            return Err(TraceError("the parent id is all zeros"));
        }
        Ok(TraceContext {
            // A later version is passed on as version 00: the only one whose
            // fields we know.
            traceparent: format!("00-{trace_id}-{parent_id}-{flags}"),
            tracestate: tracestate.and_then(tracestate_kept),
        })
    }

    /// The `traceparent`, version 00.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate`, when one came and was kept.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the emitter's span: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// A context from its parts, as a tracing library holds them: `None`
    /// when either id is zero (invalid). `tracestate` is kept as
    /// [`TraceContext::parse`] keeps it.
    pub fn from_ids(trace_id: u128, span_id: u64, flags: u8, tracestate: Option<&str>) -> Option<TraceContext> {
        if trace_id == 0 || span_id == 0 {
            return None;
        }
        Some(TraceContext {
            traceparent: format!("00-{trace_id:032x}-{span_id:016x}-{flags:02x}"),
            tracestate: tracestate.and_then(tracestate_kept),
        })
    }

    /// The context a span of this trace passes on: the same trace, flags
    /// and `tracestate`, with `span_id` (random, from the caller) as the
    /// parent its receiver sees. An id of zero, which is invalid, is 1.
    pub fn child(&self, span_id: u64) -> TraceContext {
        TraceContext {
            traceparent: format!(
                "00-{}-{:016x}-{}",
                self.trace_id(),
                span_id.max(1),
                &self.traceparent[53..55]
            ),
            tracestate: self.tracestate.clone(),
        }
    }

    /// The emitter sampled its trace (the flags' lowest bit).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }
}

fn is_lower_hex(s: &[u8]) -> bool {
    s.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// `tracestate` as kept: the list trimmed of blank members, or nothing if it
/// is too long, has too many members or a member is not `key=value`.
fn tracestate_kept(raw: &str) -> Option<String> {
    let members: Vec<&str> = raw
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    if members.is_empty() || members.len() > MAX_TRACESTATE_MEMBERS {
        return None;
    }
    if !members.iter().all(|m| member_ok(m)) {
        return None;
    }
    let kept = members.join(",");
    (kept.len() <= MAX_TRACESTATE).then_some(kept)
}

/// `key=value`: a key of lowercase letters, digits and `_-*/@` starting with
/// a letter or digit (at most 256), a value of printable ASCII other than
/// `,` and `=` not ending in a space (at most 256).
fn member_ok(m: &str) -> bool {
    let Some((key, value)) = m.split_once('=') else {
        return false;
    };
    let key_ok = !key.is_empty()
        && key.len() <= 256
        && key
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-*/@".contains(&c));
    let value_ok = !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=');
    key_ok && value_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    proptest! {
        /// A context from its parts is the one its `traceparent` parses to.
        #[test]
        fn a_context_from_ids_is_the_one_parsed_from_its_text(trace in 1u128.., span in 1u64.., flags: u8) {
            let t = TraceContext::from_ids(trace, span, flags, Some("rojo=1")).unwrap();
            let text = format!("00-{trace:032x}-{span:016x}-{flags:02x}");
            prop_assert_eq!(Some(t), TraceContext::parse(&text, Some("rojo=1")).ok());
        }
    }

    #[test]
    fn a_context_with_a_zero_id_is_none() {
        assert_eq!(TraceContext::from_ids(0, 1, 1, None), None);
        assert_eq!(TraceContext::from_ids(1, 0, 1, None), None);
    }

    #[test]
    fn a_valid_traceparent_is_kept_with_its_parts() {
        let t = TraceContext::parse(VALID, None).unwrap();
        assert_eq!(t.traceparent(), VALID);
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id(), "00f067aa0ba902b7");
        assert!(t.sampled());
        assert_eq!(t.tracestate(), None);
        let unsampled = TraceContext::parse(&VALID.replace("-01", "-00"), None).unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        let cases = [
            ("", "shorter"),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "shorter"),
            ("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "separated"),
            ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "lowercase"),
            ("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "lowercase"),
            ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "exactly 55"),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "trace id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "parent id is all zeros",
            ),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
                "followed by",
            ),
        ];
        for (input, why) in cases {
            let e = TraceContext::parse(input, None).expect_err(input);
            assert!(e.to_string().contains(why), "{input}: {e}");
        }
    }

    #[test]
    fn a_child_keeps_the_trace_flags_and_state_under_a_new_parent() {
        let t = TraceContext::parse(VALID, Some("rojo=1")).unwrap();
        let c = t.child(0xabc);
        assert_eq!(
            c.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000abc-01"
        );
        assert_eq!(c.tracestate(), Some("rojo=1"));
        assert_eq!(
            t.child(0).parent_id(),
            "0000000000000001",
            "never the invalid all-zero id"
        );
        assert_eq!(
            TraceContext::parse(c.traceparent(), None).unwrap().trace_id(),
            t.trace_id()
        );
    }

    #[test]
    fn a_later_version_is_read_by_its_first_four_fields() {
        let t = TraceContext::parse(
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-else",
            None,
        )
        .unwrap();
        assert_eq!(t.traceparent(), VALID);
    }

    #[test]
    fn tracestate_is_kept_only_when_well_formed() {
        let keep = |s: &str| {
            TraceContext::parse(VALID, Some(s))
                .unwrap()
                .tracestate()
                .map(str::to_owned)
        };
        assert_eq!(
            keep("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into())
        );
        assert_eq!(keep("vendor@tenant=x,,"), Some("vendor@tenant=x".into()));
        assert_eq!(keep(""), None);
        assert_eq!(keep("no-equals"), None);
        assert_eq!(keep("Upper=x"), None);
        assert_eq!(keep("k=a,b"), None);
        let many = (0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        assert_eq!(keep(&many), None);
        let long = (0..3)
            .map(|i| format!("k{i}={}", "v".repeat(200)))
            .collect::<Vec<_>>()
            .join(",");
        assert!(long.len() > MAX_TRACESTATE);
        assert_eq!(keep(&long), None);
    }

    proptest! {
        #[test]
        fn any_well_formed_traceparent_round_trips(
            trace in "[0-9a-f]{32}", parent in "[0-9a-f]{16}", flags in "[0-9a-f]{2}"
        ) {
            prop_assume!(trace.bytes().any(|c| c != b'0') && parent.bytes().any(|c| c != b'0'));
            let raw = format!("00-{trace}-{parent}-{flags}");
            let t = TraceContext::parse(&raw, None).unwrap();
            prop_assert_eq!(t.traceparent(), raw.as_str());
            prop_assert_eq!(t.trace_id(), trace.as_str());
            prop_assert_eq!(t.parent_id(), parent.as_str());
        }

        #[test]
        fn nothing_panics_and_what_is_kept_is_well_formed(raw in ".{0,80}", state in proptest::option::of(".{0,600}")) {
            if let Ok(t) = TraceContext::parse(&raw, state.as_deref()) {
                prop_assert_eq!(t.traceparent().len(), 55);
                prop_assert!(t.tracestate().is_none_or(|s| s.len() <= MAX_TRACESTATE));
            }
        }
    }
}
