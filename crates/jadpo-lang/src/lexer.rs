//! Text to tokens. Newlines are not tokens: entries are self-delimiting, so a
//! block reads the same on one line or many (docs/app-file.md, Layout).

use crate::diagnostic::{Code, Diagnostic, Span};

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// A string literal with its escapes resolved.
    Str(String),
    /// Digits, an optional fraction, and an optional unit glued to them
    /// (`3d`, `1.5h`, `10`): the checker decides what the unit means, so a
    /// bad unit gets `duration.invalid` rather than a syntax error.
    Number {
        int: String,
        frac: Option<String>,
        unit: Option<String>,
    },
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Colon,
    Comma,
    Dot,
    Minus,
    /// A lone `/`, as in a rate (`50/s`); `//` starts a comment instead.
    Slash,
    Eof,
}

impl Tok {
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Number { .. } => "a number".to_string(),
            Tok::LBrace => "`{`".to_string(),
            Tok::RBrace => "`}`".to_string(),
            Tok::LParen => "`(`".to_string(),
            Tok::RParen => "`)`".to_string(),
            Tok::LBracket => "`[`".to_string(),
            Tok::RBracket => "`]`".to_string(),
            Tok::Colon => "`:`".to_string(),
            Tok::Comma => "`,`".to_string(),
            Tok::Dot => "`.`".to_string(),
            Tok::Minus => "`-`".to_string(),
            Tok::Slash => "`/`".to_string(),
            Tok::Eof => "the end of the file".to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Every token, ending with `Eof`, and a diagnostic for each stretch of text
/// that is not one. Lexing never stops early: a bad character is skipped so
/// the parser still sees the rest of the file.
pub(crate) fn lex(src: &str, diags: &mut Vec<Diagnostic>) -> Vec<Token> {
    let bytes = src.as_bytes();
    let mut toks = Vec::with_capacity(src.len() / 4);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if let Some(tok) = punctuation(c) {
            i += 1;
            toks.push(Token {
                tok,
                span: Span::new(start, i),
            });
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' {
            i += 1;
            toks.push(Token {
                tok: Tok::Slash,
                span: Span::new(start, i),
            });
        } else if c == b'"' {
            let (tok, end) = lex_string(src, i, diags);
            i = end;
            if let Some(tok) = tok {
                toks.push(Token {
                    tok,
                    span: Span::new(start, i),
                });
            }
        } else if c.is_ascii_digit() {
            let (tok, end) = lex_number(src, i);
            i = end;
            toks.push(Token {
                tok,
                span: Span::new(start, i),
            });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            i = scan(bytes, i, is_ident_byte);
            toks.push(Token {
                tok: Tok::Ident(src[start..i].to_string()),
                span: Span::new(start, i),
            });
        } else {
            i = skip_stray(src, i, diags);
        }
    }
    toks.push(Token {
        tok: Tok::Eof,
        span: Span::new(src.len(), src.len()),
    });
    toks
}

/// The token of a character that is a token by itself.
fn punctuation(c: u8) -> Option<Tok> {
    match c {
        b'{' => Some(Tok::LBrace),
        b'}' => Some(Tok::RBrace),
        b'(' => Some(Tok::LParen),
        b')' => Some(Tok::RParen),
        b'[' => Some(Tok::LBracket),
        b']' => Some(Tok::RBracket),
        b':' => Some(Tok::Colon),
        b',' => Some(Tok::Comma),
        b'.' => Some(Tok::Dot),
        b'-' => Some(Tok::Minus),
        _ => None,
    }
}

/// Digits, an optional `.` and fraction, and the unit written right after
/// (`30s`, `1.5h`): the number starting at `start`, and where it ends.
fn lex_number(src: &str, start: usize) -> (Tok, usize) {
    let bytes = src.as_bytes();
    let mut i = scan(bytes, start, |b| b.is_ascii_digit());
    let int = src[start..i].to_string();
    let mut frac = None;
    if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
        let end = scan(bytes, i + 1, |b| b.is_ascii_digit());
        frac = Some(src[i + 1..end].to_string());
        i = end;
    }
    let mut unit = None;
    if bytes.get(i).is_some_and(|b| is_ident_byte(*b)) {
        let end = scan(bytes, i, is_ident_byte);
        unit = Some(src[i..end].to_string());
        i = end;
    }
    (Tok::Number { int, frac, unit }, i)
}

/// Skips the run of stray characters at `start`, reporting it once rather
/// than once per byte; returns where the run ends.
fn skip_stray(src: &str, start: usize, diags: &mut Vec<Diagnostic>) -> usize {
    let mut i = start;
    while i < src.len() && is_stray(src, i) {
        i += char_len(src, i);
    }
    let text = &src[start..i];
    diags.push(Diagnostic::new(
        Code::ParseSyntax,
        Span::new(start, i),
        format!(
            "unexpected `{}`; names are letters, digits and `_`, and text goes in double quotes",
            text.escape_debug()
        ),
    ));
    i
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_stray(src: &str, i: usize) -> bool {
    let b = src.as_bytes()[i];
    !(b.is_ascii_whitespace() || is_ident_byte(b) || b"{}()[]:,.-/\"".contains(&b))
}

fn char_len(src: &str, i: usize) -> usize {
    src[i..].chars().next().map_or(1, char::len_utf8)
}

fn scan(bytes: &[u8], mut i: usize, keep: impl Fn(u8) -> bool) -> usize {
    while i < bytes.len() && keep(bytes[i]) {
        i += 1;
    }
    i
}

/// A string runs to the next unescaped `"` on the same line: a string left
/// open would otherwise swallow the rest of the file and hide every later
/// mistake behind one diagnostic.
fn lex_string(src: &str, start: usize, diags: &mut Vec<Diagnostic>) -> (Option<Tok>, usize) {
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, ch)) = chars.next() {
        let at = start + 1 + off;
        match ch {
            '"' => return (Some(Tok::Str(out)), at + 1),
            '\n' => break,
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => out.push(e),
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((eoff, e)) if e != '\n' => {
                    let end = start + 1 + eoff + e.len_utf8();
                    diags.push(Diagnostic::new(
                        Code::ParseSyntax,
                        Span::new(at, end),
                        format!(
                            "unknown escape `\\{}`; a string takes \\\", \\\\, \\n and \\t",
                            e.escape_debug()
                        ),
                    ));
                }
                _ => break,
            },
            _ => out.push(ch),
        }
    }
    let end = src[start..].find('\n').map_or(src.len(), |n| start + n);
    diags.push(Diagnostic::new(
        Code::ParseSyntax,
        Span::new(start, end),
        "this string has no closing `\"`; close it on the same line".to_string(),
    ));
    // The text read so far still becomes a string, so the entry around it
    // parses and does not raise a second, confusing error.
    (Some(Tok::Str(out)), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> (Vec<Tok>, usize) {
        let mut d = Vec::new();
        let t = lex(src, &mut d).into_iter().map(|t| t.tok).collect();
        (t, d.len())
    }

    #[test]
    fn durations_keep_their_unit_glued() {
        let (t, errs) = kinds("3d 1.5h 10 90s");
        assert_eq!(errs, 0);
        assert_eq!(
            t[0],
            Tok::Number {
                int: "3".into(),
                frac: None,
                unit: Some("d".into())
            }
        );
        assert_eq!(
            t[1],
            Tok::Number {
                int: "1".into(),
                frac: Some("5".into()),
                unit: Some("h".into())
            }
        );
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn comments_and_escapes() {
        let (t, errs) = kinds("a // b \"c\n\"x\\\"y\"");
        assert_eq!(errs, 0);
        assert_eq!(t, vec![Tok::Ident("a".into()), Tok::Str("x\"y".into()), Tok::Eof]);
    }

    #[test]
    fn unterminated_string_stops_at_the_line_end() {
        let (t, errs) = kinds("\"abc\nnext");
        assert_eq!(errs, 1);
        assert_eq!(t[1], Tok::Ident("next".into()));
    }

    #[test]
    fn a_slash_is_a_token_and_two_start_a_comment() {
        let (t, errs) = kinds("50/s 600 / min 1//h");
        assert_eq!(errs, 0);
        let n = |int: &str| Tok::Number {
            int: int.into(),
            frac: None,
            unit: None,
        };
        assert_eq!(
            t,
            vec![
                n("50"),
                Tok::Slash,
                Tok::Ident("s".into()),
                n("600"),
                Tok::Slash,
                Tok::Ident("min".into()),
                n("1"),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn stray_characters_are_one_diagnostic_per_run() {
        let (t, errs) = kinds("a @@é# b");
        assert_eq!(errs, 1);
        assert_eq!(t.len(), 3);
    }
}
