//! `jadpo check [APP] [--format human|json]`
//!
//! Exit codes: 0 when the app is valid, 1 when it has errors (all of them
//! are printed), 2 when the file cannot be read.

use jadpo_lang::{Diagnostic, LineIndex};
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    app: PathBuf,
    /// `human` prints diagnostics as rustc does, on stderr; `json` prints
    /// one JSON array of them on stdout, for editors and CI.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Human,
    Json,
}

const UNREADABLE: &str = "app.unreadable";

pub(crate) fn run(args: Args) -> ExitCode {
    let file = args.app.display().to_string();
    let source = match std::fs::read_to_string(&args.app) {
        Ok(s) => s,
        Err(why) => {
            let message = format!("cannot read `{file}`: {why}");
            match args.format {
                Format::Human => eprintln!("error[{UNREADABLE}]: {message}"),
                Format::Json => print_json(&json!([{
                    "code": UNREADABLE,
                    "message": message,
                    "file": file,
                    "line": null,
                    "column": null,
                    "end_line": null,
                    "end_column": null,
                }])),
            }
            return ExitCode::from(2);
        }
    };
    let checked = jadpo_lang::check(&file, &source);
    match args.format {
        Format::Json => {
            let index = LineIndex::new(&source);
            let list: Vec<Value> = checked
                .diagnostics
                .iter()
                .map(|d| diagnostic_json(&file, &index, d))
                .collect();
            print_json(&Value::Array(list));
        }
        Format::Human => match &checked.app {
            Some(app) => println!("{file}: ok: {}", app.summary()),
            None => {
                let mut text = checked.render(&source);
                let n = checked.diagnostics.len();
                text.push_str(&format!("\n{file}: {n} error{}\n", if n == 1 { "" } else { "s" }));
                let stderr = std::io::stderr();
                if stderr.is_terminal() && std::env::var_os("NO_COLOR").is_none() {
                    text = colour(&text);
                }
                let _ = stderr.lock().write_all(text.as_bytes());
            }
        },
    }
    if checked.app.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_json(v: &Value) {
    let mut out = serde_json::to_string_pretty(v).unwrap_or_default();
    out.push('\n');
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}

/// Lines and columns are 1-based; the end is exclusive (the position just
/// after the span).
fn diagnostic_json(file: &str, index: &LineIndex<'_>, d: &Diagnostic) -> Value {
    let start = index.position(d.span.start);
    let end = index.position(d.span.end);
    json!({
        "code": d.code.as_str(),
        "message": d.message,
        "file": file,
        "line": start.line,
        "column": start.column,
        "end_line": end.line,
        "end_column": end.column,
    })
}

/// Red for the error heading and the underline, only on a terminal: the
/// rendering itself stays plain so tests and pipes see stable text.
fn colour(text: &str) -> String {
    const RED: &str = "\x1b[1;31m";
    const BOLD: &str = "\x1b[1m";
    const RESET: &str = "\x1b[0m";
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("error[") {
            let (code, msg) = rest.split_once("]:").unwrap_or((rest, ""));
            out.push_str(&format!("{RED}error[{code}]{RESET}{BOLD}:{msg}{RESET}"));
        } else if line.trim_end().ends_with('^') && line.trim_start().starts_with('|') {
            let (gutter, carets) = line.split_at(line.find('|').map_or(0, |i| i + 1));
            out.push_str(&format!("{gutter}{RED}{carets}{RESET}"));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}
