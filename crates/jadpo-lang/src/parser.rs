//! Tokens to the generic syntax tree, by recursive descent.
//!
//! Each syntax error is reported once, then the parser skips to a point
//! where reading can resume (the next entry, statement or item) so one pass
//! reports every mistake. Every loop consumes a token or ends, and nesting
//! is capped, so no input makes the parser loop or overflow its stack.

use crate::diagnostic::{Code, Diagnostic, Span};
use crate::lexer::{Tok, Token};
use crate::syntax::*;

mod bodies;

/// Deeper values than this are refused: nobody writes them, and recursion
/// on hostile input must not overflow the stack.
const MAX_DEPTH: usize = 64;

/// Marks that a diagnostic was already reported; the caller recovers.
struct Reported;

type Parse<T> = Result<T, Reported>;

pub(crate) fn parse(toks: &[Token], diags: &mut Vec<Diagnostic>) -> Vec<Item> {
    let mut p = Parser {
        toks,
        pos: 0,
        diags,
        depth: 0,
    };
    p.file()
}

struct Parser<'a> {
    toks: &'a [Token],
    pos: usize,
    diags: &'a mut Vec<Diagnostic>,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        let i = (self.pos + n).min(self.toks.len() - 1);
        &self.toks[i].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn at_eof(&self) -> bool {
        matches!(self.peek(), Tok::Eof)
    }

    fn error<T>(&mut self, span: Span, message: String) -> Parse<T> {
        self.diags.push(Diagnostic::new(Code::ParseSyntax, span, message));
        Err(Reported)
    }

    fn unexpected<T>(&mut self, wanted: &str) -> Parse<T> {
        let found = self.peek().describe();
        self.error(self.span(), format!("expected {wanted}, found {found}"))
    }

    fn expect(&mut self, tok: Tok, wanted: &str) -> Parse<Span> {
        if *self.peek() == tok {
            Ok(self.bump().span)
        } else {
            self.unexpected(wanted)
        }
    }

    fn ident(&mut self, wanted: &str) -> Parse<Ident> {
        if let Tok::Ident(name) = self.peek() {
            let name = name.clone();
            let span = self.bump().span;
            Ok(Ident { name, span })
        } else {
            self.unexpected(wanted)
        }
    }

    /// `subscriber x {` or `alerts {`: an item keyword followed by a name
    /// (or, for the nameless `alerts`, by its `{`) starts the next item,
    /// even where a `}` was forgotten before it.
    fn at_item_start(&self) -> bool {
        match self.peek() {
            Tok::Ident(k) if k == ALERTS => *self.peek_at(1) == Tok::LBrace,
            Tok::Ident(k) if ITEM_KEYWORDS.contains(&k.as_str()) => matches!(self.peek_at(1), Tok::Ident(_)),
            _ => false,
        }
    }

    /// Skips tokens until `stop` holds outside any bracket opened during the
    /// skip, a bracket closes the enclosing block, or the next item starts.
    /// May consume nothing: every caller's loop makes progress itself.
    fn recover(&mut self, stop: impl Fn(&Parser<'_>) -> bool) {
        let mut depth = 0usize;
        loop {
            if self.at_eof() {
                return;
            }
            if depth == 0 && (stop(self) || self.at_item_start()) {
                return;
            }
            match self.peek() {
                Tok::LBrace | Tok::LParen | Tok::LBracket => depth += 1,
                Tok::RBrace | Tok::RParen | Tok::RBracket => {
                    if depth == 0 {
                        // Closes the enclosing block: leave it for the caller.
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            self.bump();
        }
    }

    fn file(&mut self) -> Vec<Item> {
        let mut items = Vec::new();
        while !self.at_eof() {
            let before = self.pos;
            match self.peek() {
                Tok::Ident(k) if ITEM_KEYWORDS.contains(&k.as_str()) => {
                    if let Some(item) = self.item() {
                        items.push(item);
                    }
                }
                _ => {
                    let _ =
                        self.unexpected::<()>("`event`, `connection`, `action`, `capability`, `subscriber`, `schedule`, `route`, `store` or `alerts`");
                    self.skip_to_item();
                }
            }
            if self.pos == before {
                self.bump();
            }
        }
        items
    }

    fn skip_to_item(&mut self) {
        self.bump();
        while !self.at_eof() && !self.at_item_start() {
            self.bump();
        }
    }

    fn item(&mut self) -> Option<Item> {
        let errors_before = self.diags.len();
        let keyword = self.bump();
        let Tok::Ident(kw) = keyword.tok else {
            return None;
        };
        let name = if kw == ALERTS {
            self.alerts_name(keyword.span)
        } else {
            let Ok(name) = self.ident(&format!("a name after `{kw}`")) else {
                self.skip_to_item();
                return None;
            };
            name
        };
        let kind = match kw.as_str() {
            "action" => self.action(),
            "capability" => self.capability(),
            "event" => self.event(),
            "connection" => self.connection(),
            _ => self.block().map(|entries| match kw.as_str() {
                "subscriber" => ItemKind::Subscriber(entries),
                "route" => ItemKind::Route(entries),
                "store" => ItemKind::Store(entries),
                ALERTS => ItemKind::Alerts(entries),
                _ => ItemKind::Schedule(entries),
            }),
        };
        let kind = match kind {
            Ok(kind) => kind,
            Err(Reported) => {
                // The item's shape is lost; keep its name so references to
                // it do not cascade into "unknown" errors.
                if !self.at_item_start() {
                    self.skip_to_item();
                }
                empty_kind(&kw)
            }
        };
        Some(Item {
            kind,
            span: keyword.span.to(self.prev_span()),
            name,
            broken: self.diags.len() > errors_before,
        })
    }

    /// `alerts` has no name: the keyword stands in for one. A name written
    /// anyway (`alerts ops {`) is reported and skipped, and the block is
    /// still read. Only a word followed by `{` is taken for one, so a
    /// forgotten block does not swallow the next item's keyword.
    fn alerts_name(&mut self, keyword: Span) -> Ident {
        if *self.peek_at(1) == Tok::LBrace {
            if let Tok::Ident(written) = self.peek().clone() {
                let span = self.bump().span;
                let _ = self.error::<()>(
                    span,
                    format!(
                        "`alerts` takes no name: an app has one `alerts` block; write `alerts {{` without `{written}`"
                    ),
                );
            }
        }
        Ident {
            name: ALERTS.to_string(),
            span: keyword,
        }
    }

    fn block(&mut self) -> Parse<Vec<Entry>> {
        let open = self.expect(Tok::LBrace, "`{`")?;
        self.entries(open, None)
    }

    /// `[in STORE] { FIELD: TYPE ... }`
    fn event(&mut self) -> Parse<ItemKind> {
        let mut store = None;
        if matches!(self.peek(), Tok::Ident(w) if w == "in") {
            self.bump();
            store = Some(self.ident("a store's name after `in`, as in `event AuditEntry in audit {`")?);
        }
        let entries = self.block()?;
        Ok(ItemKind::Event { entries, store })
    }

    /// `{ key: value ...  fills CAPABILITY { statements } ... }`
    fn connection(&mut self) -> Parse<ItemKind> {
        let open = self.expect(Tok::LBrace, "`{`")?;
        let mut fills = Vec::new();
        let entries = self.entries(open, Some(&mut fills))?;
        Ok(ItemKind::Connection { entries, fills })
    }

    /// `key: value` entries up to the `}` closing `open`; newlines, spaces
    /// or commas separate them. Keys are names or, for headers, strings.
    /// `fills CAPABILITY { ... }` entries go to `fills`, in a connection
    /// block; elsewhere they are refused.
    fn entries(&mut self, open: Span, mut fills: Option<&mut Vec<Fill>>) -> Parse<Vec<Entry>> {
        let mut entries = Vec::new();
        loop {
            let before = self.pos;
            match self.peek().clone() {
                Tok::RBrace => {
                    self.bump();
                    return Ok(entries);
                }
                Tok::Eof => {
                    let _ = self.error::<()>(open, "this `{` is never closed; add a `}`".to_string());
                    return Ok(entries);
                }
                Tok::Comma => {
                    self.bump();
                }
                _ if self.at_item_start() => {
                    let _ = self.error::<()>(
                        open,
                        "this `{` is not closed before the next item; add a `}`".to_string(),
                    );
                    return Ok(entries);
                }
                Tok::Ident(word) if word == FILLS && matches!(self.peek_at(1), Tok::Ident(_)) => {
                    match self.fill(fills.is_some()) {
                        Ok(fill) => {
                            if let Some(fills) = fills.as_deref_mut() {
                                fills.push(fill);
                            }
                        }
                        Err(Reported) => self.recover(|p| p.at_entry_start()),
                    }
                }
                Tok::Ident(name) | Tok::Str(name) => {
                    let span = self.bump().span;
                    let key = Ident { name, span };
                    match self.entry_value(&key) {
                        Ok(value) => entries.push(Entry { key, value }),
                        Err(Reported) => self.recover(|p| p.at_entry_start()),
                    }
                }
                _ => {
                    let _ = self.unexpected::<()>("a `key: value` entry or `}`");
                    self.recover(|p| p.at_entry_start());
                }
            }
            if self.pos == before {
                self.bump();
            }
        }
    }

    fn at_entry_start(&self) -> bool {
        let fills = matches!(self.peek(), Tok::Ident(w) if w == FILLS)
            && matches!(self.peek_at(1), Tok::Ident(_))
            && *self.peek_at(2) == Tok::LBrace;
        fills || (matches!(self.peek(), Tok::Ident(_) | Tok::Str(_)) && *self.peek_at(1) == Tok::Colon)
    }

    fn entry_value(&mut self, key: &Ident) -> Parse<Expr> {
        if *self.peek() != Tok::Colon {
            let found = self.peek().describe();
            return self.error(self.span(), format!("expected `:` after `{}`, found {found}", key.name));
        }
        self.bump();
        self.expr()
    }

    fn expr(&mut self) -> Parse<Expr> {
        if self.depth >= MAX_DEPTH {
            return self.error(
                self.span(),
                format!("values nest more than {MAX_DEPTH} deep here; flatten them"),
            );
        }
        self.depth += 1;
        let e = self.expr_inner();
        self.depth -= 1;
        e
    }

    // Stays long: a single match on a value's first token, one short arm per kind of value.
    fn expr_inner(&mut self) -> Parse<Expr> {
        let start = self.span();
        let kind = match self.peek().clone() {
            Tok::Str(s) => {
                self.bump();
                ExprKind::Str(s)
            }
            Tok::Number { int, frac, unit } => {
                self.bump();
                self.number_or_rate(Number {
                    negative: false,
                    int,
                    frac,
                    unit,
                })
            }
            Tok::Minus => {
                self.bump();
                let Tok::Number { int, frac, unit } = self.peek().clone() else {
                    return self.unexpected("a number after `-`");
                };
                self.bump();
                self.number_or_rate(Number {
                    negative: true,
                    int,
                    frac,
                    unit,
                })
            }
            Tok::LBrace => {
                let open = self.bump().span;
                ExprKind::Object(self.entries(open, None)?)
            }
            Tok::LBracket => {
                let open = self.bump().span;
                ExprKind::List(self.list(open)?)
            }
            Tok::Ident(word) if word == "true" || word == "false" => {
                self.bump();
                ExprKind::Bool(word == "true")
            }
            Tok::Ident(name) if *self.peek_at(1) == Tok::Colon => {
                // `id:` with its value forgotten, then the next entry.
                return self.error(
                    self.prev_span(),
                    format!("expected a value after this `:`, found the next entry `{name}:`"),
                );
            }
            Tok::Ident(_) => {
                let path = self.path()?;
                if *self.peek() == Tok::LParen {
                    let args = self.args()?;
                    ExprKind::Call { callee: path, args }
                } else {
                    ExprKind::Path(path)
                }
            }
            Tok::Slash => {
                // `path: /x` was text without its quotes; `rate: /s` a
                // rate without its number.
                return self.error(
                    self.span(),
                    "expected a value, found `/`; text goes in double quotes (`\"/jadpo/alerts\"`), \
                     and a rate starts with its number (`50/s`)"
                        .to_string(),
                );
            }
            _ => return self.unexpected("a value"),
        };
        Ok(Expr {
            kind,
            span: start.to(self.prev_span()),
        })
    }

    /// A number, or a rate when a `/` follows it (`50/s`, `600 / min`).
    /// Whatever stands after the `/` is kept for the checker, so a bad
    /// unit (`50/day`, `50/1h`) or none (`50/` before the next entry) is
    /// reported with the rate's own code rather than as a syntax error.
    fn number_or_rate(&mut self, count: Number) -> ExprKind {
        if *self.peek() != Tok::Slash {
            return ExprKind::Number(count);
        }
        self.bump();
        let unit = match self.peek().clone() {
            // `rate: 50/` then `concurrency: 5`: the word is the next key.
            Tok::Ident(_) if *self.peek_at(1) == Tok::Colon => None,
            Tok::Ident(name) => Some(Ident {
                name,
                span: self.bump().span,
            }),
            Tok::Number { int, frac, unit } => {
                let text = format!(
                    "{int}{}{}",
                    frac.map(|f| format!(".{f}")).unwrap_or_default(),
                    unit.unwrap_or_default()
                );
                Some(Ident {
                    name: text,
                    span: self.bump().span,
                })
            }
            _ => None,
        };
        ExprKind::Rate { count, unit }
    }

    fn list(&mut self, open: Span) -> Parse<Vec<Expr>> {
        let mut items = Vec::new();
        loop {
            let before = self.pos;
            match self.peek() {
                Tok::RBracket => {
                    self.bump();
                    return Ok(items);
                }
                Tok::Eof => return self.error(open, "this `[` is never closed; add a `]`".to_string()),
                Tok::Comma => {
                    self.bump();
                }
                _ => match self.expr() {
                    Ok(e) => items.push(e),
                    Err(Reported) => self.recover(|p| matches!(p.peek(), Tok::Comma | Tok::RBracket)),
                },
            }
            if self.pos == before {
                self.bump();
            }
        }
    }

    /// `a.b.c`
    fn path(&mut self) -> Parse<Vec<Ident>> {
        let mut path = vec![self.ident("a name")?];
        while *self.peek() == Tok::Dot {
            self.bump();
            path.push(self.ident("a name after `.`")?);
        }
        Ok(path)
    }

    /// `(a, name: b)`, commas between, a trailing comma allowed.
    fn args(&mut self) -> Parse<Vec<Arg>> {
        let open = self.expect(Tok::LParen, "`(`")?;
        let mut args = Vec::new();
        loop {
            let before = self.pos;
            match self.peek() {
                Tok::RParen => {
                    self.bump();
                    return Ok(args);
                }
                Tok::Eof => return self.error(open, "this `(` is never closed; add a `)`".to_string()),
                _ => {
                    let name = if matches!(self.peek(), Tok::Ident(_)) && *self.peek_at(1) == Tok::Colon {
                        let name = self.ident("a name")?;
                        self.bump();
                        Some(name)
                    } else {
                        None
                    };
                    let value = self.expr()?;
                    args.push(Arg { name, value });
                    match self.peek() {
                        Tok::Comma => {
                            self.bump();
                        }
                        Tok::RParen => {}
                        _ => return self.unexpected("`,` or `)` after an argument"),
                    }
                }
            }
            if self.pos == before {
                self.bump();
            }
        }
    }
}

fn empty_kind(keyword: &str) -> ItemKind {
    match keyword {
        "event" => ItemKind::Event {
            entries: Vec::new(),
            store: None,
        },
        "connection" => ItemKind::Connection {
            entries: Vec::new(),
            fills: Vec::new(),
        },
        "capability" => ItemKind::Capability { params: Vec::new() },
        "route" => ItemKind::Route(Vec::new()),
        "store" => ItemKind::Store(Vec::new()),
        "subscriber" => ItemKind::Subscriber(Vec::new()),
        "schedule" => ItemKind::Schedule(Vec::new()),
        ALERTS => ItemKind::Alerts(Vec::new()),
        _ => ItemKind::Action {
            params: Vec::new(),
            uses: None,
            body: None,
        },
    }
}
