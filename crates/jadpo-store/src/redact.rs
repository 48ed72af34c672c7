//! A store URL without its password, for every message, log line and report
//! that shows one.
//!
//! Why one function for all of them: a store URL is shown in many places
//! (the error of a URL that does not parse, of a store that can't be
//! reached, `serve.started`, `jadpo migrate`, `jadpo bench`), and a password
//! can sit in it in several ways that parsers read differently. Each place
//! calls [`redact_url`] and never formats the raw URL, so a new way of
//! carrying a password is handled once, here.
//!
//! What is hidden, each replaced by `***`:
//!
//! - **The userinfo's password**, `postgres://USER:PASSWORD@HOST/DB`:
//!   everything from the first `:` after `://` to the *last* `@` of the
//!   text. tokio-postgres takes the credentials up to the first `@`, an RFC
//!   3986 parser up to the last `@` before the path, and a person who types
//!   `u:p@ss/w?rd#1@host` means the last; so a raw `@`, `/`, `?`, `#` or `:`
//!   in the password (or a percent-escape) never leaves part of it shown.
//!   When an `@` comes later in the URL (`?application_name=a@b`), more than
//!   the password is hidden, never less: tokio-postgres would read the text
//!   up to there as credentials too. Without `://` (a mistyped
//!   `postgres:u:pw@h`), from the first `:` to the last `@`, user and all;
//!   a `sqlite:` path, which has no password, is left as it is.
//! - **A `password=` query parameter** (`?password=`, `&password=`): its
//!   value up to the next `&`. The name in any case, percent-encoded or not;
//!   any parameter whose name contains `password` (libpq's `sslpassword`).
//! - **A `password=` keyword** of a libpq key/value string (`host=h
//!   password=pw`, with `'quoted values'` and `\` escapes). The store takes
//!   only URLs, but such a string given by mistake is still shown in the
//!   error that refuses it.
//!
//! A URL that carries no password comes back unchanged. The function is
//! pure: no I/O, no state, nothing that can fail, whatever the text.

use std::ops::Range;

/// What a hidden part is shown as.
pub const MASK: &str = "***";

/// `url` with every password it may carry replaced by `***`: the userinfo's
/// (`postgres://u:***@h/db`), a `password=` query parameter's
/// (`?password=***`, any case) and a key/value string's (`password=***`).
/// See the [module](self) for exactly what is hidden and why.
pub fn redact_url(url: &str) -> String {
    let mut hidden = Vec::new();
    userinfo(url, &mut hidden);
    query_params(url, &mut hidden);
    keywords(url, &mut hidden);
    mask(url, hidden)
}

/// The userinfo's password: from the first `:` of the userinfo to the last
/// `@`.
fn userinfo(s: &str, hidden: &mut Vec<Range<usize>>) {
    let Some(at) = s.rfind('@') else { return };
    if s.starts_with("sqlite:") {
        return;
    }
    let start = match s.find("://") {
        Some(i) if i < at => i + "://".len(),
        // No `://`: a mistyped scheme (`postgres:u:pw@h`, `postgres//u:pw@h`),
        // unless what comes before the first `:` is a key/value string's
        // (`host=h:5432 user=me@corp`). Which `:` ends the scheme is
        // unknown, so the user is hidden with the password.
        _ => match s.find(':') {
            Some(c) if c < at && !s[..c].contains(|ch: char| ch == '=' || ch.is_whitespace()) => 0,
            _ => return,
        },
    };
    if let Some(colon) = s[start..at].find(':') {
        hidden.push(start + colon + 1..at);
    }
}

/// Whether a parameter's name (percent-encoded or not, any case) names a
/// password.
fn secret_name(name: &str) -> bool {
    percent_decoded(name).to_lowercase().contains("password")
}

/// `?NAME=VALUE` and `&NAME=VALUE`: the value, up to the next `&`, of each
/// whose name is a password's.
fn query_params(s: &str, hidden: &mut Vec<Range<usize>>) {
    for (i, _) in s.match_indices(['?', '&']) {
        let rest = &s[i + 1..];
        let Some(eq) = rest.find(['=', '&', '?']) else { continue };
        if !rest[eq..].starts_with('=') || !secret_name(&rest[..eq]) {
            continue;
        }
        let start = i + 1 + eq + 1;
        let end = s[start..].find('&').map_or(s.len(), |n| start + n);
        hidden.push(start..end);
    }
}

/// `NAME = VALUE` of a libpq key/value string (a name at the start or
/// after white space): the value, quoted (`'a b\'c'`) or up to white space
/// (`\` escaping the next character), of each whose name is a password's.
fn keywords(s: &str, hidden: &mut Vec<Range<usize>>) {
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(c) = s[i..].chars().next() {
        let starts_word = i == 0 || s[..i].ends_with(char::is_whitespace);
        if !starts_word || !(c.is_ascii_alphanumeric() || c == '_') {
            i += c.len_utf8();
            continue;
        }
        let name_end = s[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(s.len(), |n| i + n);
        let eq = skip_space(s, name_end);
        if bytes.get(eq) != Some(&b'=') || !secret_name(&s[i..name_end]) {
            i = name_end;
            continue;
        }
        let value = skip_space(s, eq + 1);
        let (start, end) = if bytes.get(value) == Some(&b'\'') {
            (value + 1, value_end(s, value + 1, |c| c == '\''))
        } else {
            (value, value_end(s, value, char::is_whitespace))
        };
        hidden.push(start..end);
        i = end;
    }
}

/// The first position from `from` that is not white space.
fn skip_space(s: &str, from: usize) -> usize {
    s[from..]
        .find(|c: char| !c.is_whitespace())
        .map_or(s.len(), |n| from + n)
}

/// Where a value starting at `from` ends: the first `stop` character not
/// escaped by `\`, or the end of the text.
fn value_end(s: &str, from: usize, stop: impl Fn(char) -> bool) -> usize {
    let mut chars = s[from..].char_indices();
    while let Some((n, c)) = chars.next() {
        if c == '\\' {
            chars.next();
        } else if stop(c) {
            return from + n;
        }
    }
    s.len()
}

/// `s` with each of `hidden` (merged where they meet or overlap; empty ones
/// left out) replaced by [`MASK`].
fn mask(s: &str, mut hidden: Vec<Range<usize>>) -> String {
    hidden.retain(|r| !r.is_empty());
    hidden.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(hidden.len());
    for r in hidden {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    let mut out = String::with_capacity(s.len());
    let mut shown_from = 0;
    for r in merged {
        out.push_str(&s[shown_from..r.start]);
        out.push_str(MASK);
        shown_from = r.end;
    }
    out.push_str(&s[shown_from..]);
    out
}

/// `%XX` escapes decoded (bad ones kept as written), for comparing names.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
