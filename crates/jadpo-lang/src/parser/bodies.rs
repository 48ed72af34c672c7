//! The parts of items that hold statements: action and capability
//! parameters, action bodies, `fills` entries, and the statements
//! themselves.

use super::{Parse, Parser, Reported};
use crate::diagnostic::Span;
use crate::lexer::Tok;
use crate::syntax::*;

impl Parser<'_> {
    /// `fills CAPABILITY { statements }`. Outside a connection block
    /// (`allowed` false) it is reported, and its body still read so the
    /// block around it parses.
    pub(super) fn fill(&mut self, allowed: bool) -> Parse<Fill> {
        let keyword = self.bump().span;
        let capability = self.ident("a capability's name after `fills`")?;
        if !allowed {
            let _ = self.error::<()>(
                keyword.to(capability.span),
                format!(
                    "`fills` goes in a connection block: `connection NAME {{ ... fills {} {{ ... }} }}`",
                    capability.name
                ),
            );
        }
        let open = self.expect(Tok::LBrace, "`{` and the statements that fill the capability")?;
        let body = self.statements(open)?;
        if !allowed {
            return Err(Reported);
        }
        Ok(Fill { capability, body })
    }

    /// `(name: type, ...) [uses conn, ...] [{ statements }]`
    pub(super) fn action(&mut self) -> Parse<ItemKind> {
        let params = self.params("the action's")?;
        let mut uses = None;
        if matches!(self.peek(), Tok::Ident(w) if w == "uses") {
            self.bump();
            let mut conns = vec![self.ident("a connection name after `uses`")?];
            while *self.peek() == Tok::Comma {
                self.bump();
                conns.push(self.ident("a connection name after `,`")?);
            }
            uses = Some(conns);
        }
        let mut body = None;
        if *self.peek() == Tok::LBrace {
            let open = self.bump().span;
            if uses.is_some() {
                self.error::<()>(
                    open,
                    "an action has either a body or `uses`, not both; calls in the body already \
                     declare their connections"
                        .to_string(),
                )
                .ok();
            }
            body = Some(self.statements(open)?);
        }
        Ok(ItemKind::Action { params, uses, body })
    }

    /// `(name: type, ...)`; `whose` names them in the error for a missing
    /// `(`: "the action's", "the capability's".
    fn params(&mut self, whose: &str) -> Parse<Vec<Param>> {
        let open = self.expect(Tok::LParen, &format!("`(` and {whose} parameters"))?;
        let mut params = Vec::new();
        loop {
            let before = self.pos;
            match self.peek() {
                Tok::RParen => {
                    self.bump();
                    return Ok(params);
                }
                Tok::Eof => return self.error(open, "this `(` is never closed; add a `)`".to_string()),
                Tok::Comma => {
                    self.bump();
                }
                _ => {
                    let name = self.ident("a parameter name")?;
                    self.expect(Tok::Colon, "`:` and the parameter's type")?;
                    let ty = self.ident("a type: string, int, float, bool, object or list")?;
                    params.push(Param { name, ty });
                }
            }
            if self.pos == before {
                self.bump();
            }
        }
    }

    /// `(name: type, ...)` and nothing else: the connection that fills the
    /// capability supplies its statements. A body or `uses` written anyway
    /// is reported, and a body is read past so the next item parses.
    pub(super) fn capability(&mut self) -> Parse<ItemKind> {
        let params = self.params("the capability's")?;
        let fix = "a connection fills it with `fills NAME { ... }` in its block";
        match self.peek() {
            Tok::LBrace => {
                let open = self.bump().span;
                let _ = self.error::<()>(open, format!("a capability has no body; {fix}"));
                self.statements(open)?;
            }
            Tok::Ident(w) if w == "uses" => {
                let span = self.bump().span;
                return self.error(span, format!("a capability has no `uses`; {fix}"));
            }
            _ => {}
        }
        Ok(ItemKind::Capability { params })
    }

    pub(super) fn statements(&mut self, open: Span) -> Parse<Vec<Stmt>> {
        let mut stmts = Vec::new();
        loop {
            let before = self.pos;
            match self.peek() {
                Tok::RBrace => {
                    self.bump();
                    return Ok(stmts);
                }
                Tok::Eof => {
                    let _ = self.error::<()>(open, "this `{` is never closed; add a `}`".to_string());
                    return Ok(stmts);
                }
                _ if self.at_item_start() => {
                    let _ = self.error::<()>(
                        open,
                        "this `{` is not closed before the next item; add a `}`".to_string(),
                    );
                    return Ok(stmts);
                }
                _ => match self.statement() {
                    Ok(s) => stmts.push(s),
                    Err(Reported) => self.recover(|p| p.at_statement_start()),
                },
            }
            if self.pos == before {
                self.bump();
            }
        }
    }

    fn at_statement_start(&self) -> bool {
        matches!(self.peek(), Tok::Ident(w) if w == "call" || w == "run" || w == "emit")
    }

    fn statement(&mut self) -> Parse<Stmt> {
        let start = self.span();
        let kind = match self.peek() {
            Tok::Ident(w) if w == "call" => StmtKind::Call,
            Tok::Ident(w) if w == "run" => StmtKind::Run,
            Tok::Ident(w) if w == "emit" => StmtKind::Emit,
            _ => return self.unexpected("`call CONNECTION.METHOD(...)`, `run ACTION(...)` or `emit EVENT(...)`"),
        };
        self.bump();
        let callee = self.path()?;
        let shape_ok = match kind {
            StmtKind::Call => callee.len() == 2,
            StmtKind::Run | StmtKind::Emit => callee.len() == 1,
        };
        if !shape_ok {
            let span = callee[0].span.to(callee[callee.len() - 1].span);
            let want = match kind {
                StmtKind::Call => "`call CONNECTION.METHOD(...)`, as in `call payments.post(\"/x\")`",
                StmtKind::Run => "`run ACTION(...)`, as in `run notify(payment_id)`",
                StmtKind::Emit => "`emit EVENT(FIELD: VALUE, ...)`, as in `emit AuditEntry(id: payment_id)`",
            };
            return self.error(span, format!("expected {want}"));
        }
        let args = self.args()?;
        Ok(Stmt {
            kind,
            callee,
            args,
            span: start.to(self.prev_span()),
        })
    }
}
