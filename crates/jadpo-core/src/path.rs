//! A call's path from its template (docs/app-file.md, `call`): each
//! parameter's value is exactly one segment of the path, so no value moves
//! a call to another path, nor out from under its connection's `base_url`.
//!
//! Percent-encoding alone can't promise that: `.` is unreserved and is
//! sent as it is, and URL parsers (the `url` crate, browsers, proxies,
//! servers) remove the dot segments `.` and `..` even when written `%2E`.
//! So a segment that a value makes empty, `.` or `..` is refused, and the
//! call is never sent (`call.path_segment_invalid`, `internal_fault`: the
//! same input fails the same way, retrying won't help).

use crate::failure::{Failure, FailureKind};

/// The code of a call whose path a value would not keep to one segment.
pub const SEGMENT_INVALID: &str = "call.path_segment_invalid";

/// A piece of a path template, with its value when it is a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Written in the template: sent as it is.
    Literal(&'a str),
    /// A parameter's name and its value, as text.
    Param { name: &'a str, value: &'a str },
}

/// Whether `value` can stand as a path segment of its own: not empty, `.`
/// or `..`. Checked on a value already percent-decoded, as a route's path
/// parameter is.
pub fn is_segment(value: &str) -> bool {
    !matches!(value, "" | "." | "..")
}

/// The path to send: literals as written, each parameter's value
/// percent-encoded (all but RFC 3986's unreserved characters, so a value
/// adds no `/`, `?` or `#`). A segment holding a parameter that would be
/// empty or a dot segment is refused with [`SEGMENT_INVALID`], its field
/// `param` naming the parameter (never its value).
pub fn render<'a>(pieces: impl IntoIterator<Item = Piece<'a>>) -> Result<String, Failure> {
    // Room for most paths at once, rather than grown four times over.
    let mut path = String::with_capacity(64);
    // Where the segment being written starts, and the last parameter in it.
    let mut start = 0;
    let mut param: Option<&str> = None;
    for piece in pieces {
        match piece {
            Piece::Literal(text) => {
                let mut rest = text.split('/');
                path.push_str(rest.next().unwrap_or_default());
                for next in rest {
                    check(&path[start..], param)?;
                    path.push('/');
                    start = path.len();
                    param = None;
                    path.push_str(next);
                }
            }
            Piece::Param { name, value } => {
                if !is_segment(value) {
                    return Err(invalid(name));
                }
                encode(value, &mut path);
                param = Some(name);
            }
        }
    }
    check(&path[start..], param)?;
    Ok(path)
}

fn invalid(param: &str) -> Failure {
    Failure::new(SEGMENT_INVALID, FailureKind::InternalFault).with_field("param", param)
}

/// A segment a parameter is part of: literals around it may still make a
/// dot segment of it (`/x/.{id}` with `.`).
fn check(segment: &str, param: Option<&str>) -> Result<(), Failure> {
    match param {
        Some(name) if is_dot_segment(segment) => Err(invalid(name)),
        _ => Ok(()),
    }
}

/// A segment a URL parser would remove or empty: `""`, `.`, `..`, a dot
/// written `%2E` or `%2e`, and any of them with the tabs and line breaks
/// a parser strips from a URL.
fn is_dot_segment(segment: &str) -> bool {
    // Asked of every segment of every call's path: read without a copy.
    let mut bytes = segment.bytes().filter(|b| !matches!(b, b'\t' | b'\n' | b'\r'));
    let mut dots = 0;
    while let Some(b) = bytes.next() {
        match b {
            b'.' => {}
            b'%' if bytes.next() == Some(b'2') && matches!(bytes.next(), Some(b'e' | b'E')) => {}
            _ => return false,
        }
        dots += 1;
    }
    dots <= 2
}

/// Percent-encodes all but RFC 3986's unreserved characters.
pub fn encode(value: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    // Runs of unreserved bytes are copied whole: an id is most often one
    // run, and this is done for every call.
    let mut run = 0;
    for (i, b) in value.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            continue;
        }
        // A run that is not empty is ASCII, so both its ends are
        // character boundaries.
        if run < i {
            out.push_str(&value[run..i]);
        }
        out.push('%');
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
        run = i + 1;
    }
    if run < value.len() {
        out.push_str(&value[run..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(value: &str) -> Result<String, Failure> {
        render([
            Piece::Literal("/payments/"),
            Piece::Param { name: "id", value },
            Piece::Literal("/record"),
        ])
    }

    #[test]
    fn values_that_are_not_one_segment_are_refused() {
        for value in ["", ".", ".."] {
            let refused = one(value).expect_err(value);
            assert_eq!(refused.code, SEGMENT_INVALID);
            assert_eq!(refused.kind, FailureKind::InternalFault);
            assert_eq!(refused.fields["param"], "id", "the parameter, never the value");
        }
    }

    #[test]
    fn every_other_value_is_one_encoded_segment() {
        let table = [
            ("p1", "/payments/p1/record"),
            ("...", "/payments/.../record"),
            (".a", "/payments/.a/record"),
            ("a/../b", "/payments/a%2F..%2Fb/record"),
            ("%2E%2E", "/payments/%252E%252E/record"),
            ("%2e", "/payments/%252e/record"),
            (". ", "/payments/.%20/record"),
            (".\t.", "/payments/.%09./record"),
            ("\\..", "/payments/%5C../record"),
            ("a b?c#d", "/payments/a%20b%3Fc%23d/record"),
            ("é", "/payments/%C3%A9/record"),
            ("\u{0}", "/payments/%00/record"),
        ];
        for (value, want) in table {
            assert_eq!(one(value).as_deref(), Ok(want), "{value:?}");
        }
    }

    #[test]
    fn literals_may_not_complete_a_dot_segment() {
        let rendered = |pieces: &[Piece]| render(pieces.iter().copied()).map_err(|f| f.code);
        let id = |value| Piece::Param { name: "id", value };
        let lit = Piece::Literal;
        let refused = Err(SEGMENT_INVALID.to_owned());
        // A value that is one segment alone, which the template's own
        // `%2` turns into a dot.
        assert_eq!(rendered(&[lit("/x/%2"), id("e"), lit("/y")]), refused);
        assert_eq!(rendered(&[lit("/x/.%2"), id("E")]), refused);
        assert_eq!(rendered(&[lit("/x/%2"), id("e"), lit("\t/y")]), refused);
        assert_eq!(rendered(&[lit("/x/."), id("."), lit("/y")]), refused);
        assert_eq!(rendered(&[lit("/x/%2"), id("f")]), Ok("/x/%2f".into()));
        assert_eq!(
            rendered(&[lit("/x/"), id("..."), lit(".json")]),
            Ok("/x/....json".into())
        );
        assert_eq!(rendered(&[lit("/x/"), id("a"), lit(".")]), Ok("/x/a.".into()));
        // A template's own segments are its author's: only a parameter's
        // segment is checked.
        assert_eq!(rendered(&[lit("/a/../b/"), id("p")]), Ok("/a/../b/p".into()));
        assert_eq!(rendered(&[lit("/a//"), id("p")]), Ok("/a//p".into()));
    }

    #[test]
    fn dot_segments_in_every_spelling() {
        for s in ["", ".", "..", "%2e", "%2E", ".%2e", "%2E.", "%2e%2E", ".\n.", "\t"] {
            assert!(is_dot_segment(s), "{s:?}");
        }
        for s in ["...", "%2e%2e%2e", "a", ".a", "%2f", "%2", "%252e", ". "] {
            assert!(!is_dot_segment(s), "{s:?}");
        }
    }

    fn decode(segment: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut bytes = segment.bytes();
        while let Some(b) = bytes.next() {
            if b == b'%' {
                let hex: String = bytes.by_ref().take(2).map(char::from).collect();
                out.push(u8::from_str_radix(&hex, 16).expect("two hex digits"));
            } else {
                out.push(b);
            }
        }
        out
    }

    /// Strings a path might be attacked with, beside arbitrary ones.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[./%2eE\\\\\t\n?#]{0,8}",
            prop::sample::select(vec!["", ".", "..", "%2e", "%2E%2e", ".%2E", "/", "\\", "a/../b"])
                .prop_map(String::from),
        ]
    }

    proptest! {
        /// Whatever the value: refused exactly when it is empty, `.` or
        /// `..`, and otherwise the template's segments, the parameter's
        /// decoding to the value's bytes.
        #[test]
        fn a_value_is_exactly_one_segment(value in value()) {
            match one(&value) {
                Err(f) => {
                    prop_assert_eq!(f.code, SEGMENT_INVALID);
                    prop_assert!(matches!(value.as_str(), "" | "." | ".."));
                }
                Ok(path) => {
                    let segments: Vec<&str> = path.split('/').collect();
                    prop_assert_eq!(segments.len(), 4, "{}", path);
                    prop_assert_eq!(segments[1], "payments");
                    prop_assert_eq!(segments[3], "record");
                    prop_assert!(!is_dot_segment(segments[2]));
                    prop_assert!(!segments[2].contains(['?', '#', '\\', '\t', '\n', '\r']));
                    prop_assert_eq!(decode(segments[2]), value.as_bytes());
                }
            }
        }
    }
}
