//! The app file language: parse and check `.jadpo` declarations
//! (docs/app-file.md).
//!
//! ```
//! let checked = jadpo_lang::check("app.jadpo", "event Ping { id: string }");
//! assert!(checked.diagnostics.is_empty());
//! assert_eq!(checked.app.unwrap().events["Ping"].fields[0].name, "id");
//! ```
//!
//! The crate reads only the text it is given: no files, no environment (an
//! `env("X")` stays unresolved), no clock. A hand-written lexer and
//! recursive-descent parser feed a checker that reports every error in one
//! pass.

pub mod app;
mod check;
pub mod diagnostic;
mod lexer;
mod parser;
mod syntax;

pub use app::{
    Action, ActionBody, AlertRoute, App, Call, Capability, Connection, Driver, Emit, Event, Expr, Field, Method,
    PathPart, PathTemplate, Publish, Route, RoutePath, RouteSegment, Run, Runnable, Schedule, Statement, StoreDecl,
    Subscriber, Trigger, Type, Value,
};
pub use diagnostic::{render_coded, Code, Diagnostic, LineIndex, Position, Span};

/// The result of checking one file.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The file's name as given, for rendering.
    pub file: String,
    /// `Some` exactly when there are no diagnostics.
    pub app: Option<App>,
    /// Every error, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// The diagnostics in rustc's layout, without colour. `source` is the
    /// text that was checked.
    pub fn render(&self, source: &str) -> String {
        diagnostic::render_all(&self.file, source, &self.diagnostics)
    }
}

/// Parses and checks an app file. Never panics, whatever the input.
pub fn check(file_name: &str, source: &str) -> Checked {
    let mut diagnostics = Vec::new();
    let tokens = lexer::lex(source, &mut diagnostics);
    let items = parser::parse(&tokens, &mut diagnostics);
    let app = check::check_items(source, &items, &mut diagnostics);
    // Lexing, parsing and checking each report in their own order; readers
    // expect the file's.
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end));
    Checked {
        file: file_name.to_string(),
        app: if diagnostics.is_empty() { app } else { None },
        diagnostics,
    }
}
