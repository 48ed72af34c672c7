//! `route NAME { post: "/refunds/{order_id}" ... }`: an HTTP endpoint that
//! runs an action or capability, and its path, matched segment by segment.

use super::{Method, Run};
use crate::diagnostic::Span;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub name: String,
    /// `get`, `post`, `put` or `delete`.
    pub method: Method,
    pub path: RoutePath,
    /// The event whose fields the request body must have, checked as an
    /// emitted event is; `None`: the body is not read.
    pub input: Option<String>,
    /// Arguments may be `path.NAME`, `input`, `input.FIELD` and literals.
    pub run: Run,
    /// The run's time limit.
    pub timeout: Duration,
    pub span: Span,
}

impl Route {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    /// The methods a route may answer, as written for its key.
    pub const METHODS: [&'static str; 4] = ["get", "post", "put", "delete"];
}

/// `/refunds/{order_id}`, split at its `/`s. Printed as written with
/// [`fmt::Display`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoutePath {
    /// Empty for `/`.
    pub segments: Vec<RouteSegment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouteSegment {
    /// Matches exactly this text, once the request's segment is
    /// percent-decoded.
    Literal(String),
    /// `{name}`: matches any one non-empty segment; its value, a string, is
    /// the segment percent-decoded.
    Param(String),
}

/// The characters a literal segment may hold: RFC 3986's unreserved and
/// sub-delimiter characters, `:` and `@`, so no segment needs encoding.
fn literal_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@".contains(c)
}

fn param_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl RoutePath {
    /// Reads a path as written in a route. The error says what is wrong,
    /// as the end of a sentence.
    pub fn parse(text: &str) -> Result<RoutePath, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "a route's path starts with `/`: write {:?}",
                format!("/{text}")
            ));
        };
        if rest.is_empty() {
            return Ok(RoutePath { segments: Vec::new() });
        }
        let mut segments = Vec::new();
        let mut names = BTreeSet::new();
        for seg in rest.split('/') {
            if seg.is_empty() {
                return Err(format!(
                    "{text:?} has an empty segment (`//` or a `/` at the end); remove the extra `/`"
                ));
            }
            if seg.contains(['{', '}']) {
                let name = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
                match name {
                    Some(name) if param_name(name) => {
                        if !names.insert(name) {
                            return Err(format!(
                                "`{{{name}}}` appears twice in {text:?}; give each placeholder its own name"
                            ));
                        }
                        segments.push(RouteSegment::Param(name.to_string()));
                    }
                    Some(name) => {
                        return Err(format!(
                            "`{{{name}}}` in {text:?} is not a placeholder: its name is letters, digits and `_`, \
                             starting with a letter or `_`, as in `{{order_id}}`"
                        ))
                    }
                    None => {
                        return Err(format!(
                            "`{seg}` in {text:?} is not a placeholder: a placeholder is a whole segment, \
                             as in \"/refunds/{{order_id}}\", with one `{{` and one `}}`"
                        ))
                    }
                }
                continue;
            }
            if let Some(c) = seg.chars().find(|c| !literal_char(*c)) {
                let c = if c.is_whitespace() || c.is_control() {
                    format!("{c:?}")
                } else {
                    format!("`{c}`")
                };
                return Err(format!(
                    "{text:?} holds {c}; a path holds letters, digits, `/` and - . _ ~ ! $ & ' ( ) * + , ; = : @ \
                     (no query, no spaces, no percent-encoding)"
                ));
            }
            segments.push(RouteSegment::Literal(seg.to_string()));
        }
        Ok(RoutePath { segments })
    }

    /// The `{param}` names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            RouteSegment::Param(p) => Some(p.as_str()),
            RouteSegment::Literal(_) => None,
        })
    }

    /// The parameters when `path` (a request's path; a `?query` or
    /// `#fragment` is ignored) matches, segment by segment: as many
    /// segments, each literal equal to its segment percent-decoded, each
    /// `{param}` taking one non-empty segment, percent-decoded. `None` when
    /// it does not match, or a segment does not decode to UTF-8.
    pub fn matches(&self, path: &str) -> Option<BTreeMap<String, String>> {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let rest = path.strip_prefix('/')?;
        let mut params = BTreeMap::new();
        if self.segments.is_empty() {
            return rest.is_empty().then_some(params);
        }
        let mut given = rest.split('/');
        for seg in &self.segments {
            let raw = given.next()?;
            if raw.is_empty() {
                return None;
            }
            let decoded = percent_decode(raw)?;
            match seg {
                RouteSegment::Literal(text) if *text == decoded => {}
                RouteSegment::Literal(_) => return None,
                RouteSegment::Param(name) => {
                    params.insert(name.clone(), decoded);
                }
            }
        }
        given.next().is_none().then_some(params)
    }

    /// Orders matching paths: at the first segment where two differ, a
    /// literal sorts before a `{param}`.
    pub(crate) fn specificity(&self) -> Vec<bool> {
        self.segments
            .iter()
            .map(|s| matches!(s, RouteSegment::Param(_)))
            .collect()
    }

    /// The path with its placeholders unnamed: two routes of one method
    /// and one shape would answer the same requests.
    pub(crate) fn shape(&self) -> Vec<Option<&str>> {
        self.segments
            .iter()
            .map(|s| match s {
                RouteSegment::Literal(t) => Some(t.as_str()),
                RouteSegment::Param(_) => None,
            })
            .collect()
    }
}

impl fmt::Display for RoutePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.segments.is_empty() {
            return f.write_str("/");
        }
        for seg in &self.segments {
            match seg {
                RouteSegment::Literal(t) => write!(f, "/{t}")?,
                RouteSegment::Param(p) => write!(f, "/{{{p}}}")?,
            }
        }
        Ok(())
    }
}

/// `%XX` escapes to bytes, then UTF-8; `None` for a bad escape or bytes
/// that are not UTF-8. `+` stays `+`: in a path it is not a space.
fn percent_decode(raw: &str) -> Option<String> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None);
        assert_eq!(percent_decode("%+1"), None);
    }
}
