//! Diagnostics: a stable code, a message saying what to fix, and where.
//!
//! Rendering is done by hand rather than with miette or ariadne: the output
//! is a handful of lines in rustc's layout, it must be byte-for-byte stable
//! for snapshot tests and editors (no terminal-width wrapping, no colour
//! detection inside the library), and it keeps this crate free of I/O.

use std::fmt;

/// A byte range of the source, `start..end`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// From the start of `self` to the end of `other`.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start, other.end.max(self.start))
    }
}

/// Every code the checker can report. The string form is the stable
/// interface: editors, CI scripts and docs/app-file.md name these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Code {
    ParseSyntax,
    NameDuplicate,
    KeyUnknown,
    KeyMissing,
    ValueInvalid,
    TypeUnknown,
    DurationInvalid,
    SubscriberEventUnknown,
    SubscriberActionUnknown,
    SubscriberRetryInvalid,
    SubscriberKeyInvalid,
    SubscriberOrderInvalid,
    SubscriberOrderWithoutKey,
    SubscriberConcurrencyPerKeyInvalid,
    ScheduleActionUnknown,
    ScheduleRetryNotAllowed,
    ScheduleTriggerInvalid,
    ScheduleCronInvalid,
    ScheduleEventUnavailable,
    ActionConnectionUnknown,
    ActionRunUnknown,
    ActionCycle,
    EventFieldUnknown,
    CallArgumentsInvalid,
    CallMethodUnknown,
    ConnectionRetryInvalid,
    ConnectionRateInvalid,
    ConnectionConcurrencyInvalid,
    AlertsDuplicate,
    AlertsConnectionUnknown,
    AlertsPathInvalid,
    CapabilityUnknown,
    CapabilityUnfilled,
    CapabilityFilledTwice,
    CapabilityCallOutside,
    RouteMethodMissing,
    RoutePathInvalid,
    RoutePathParamUnknown,
    RouteInputUnknown,
    RouteDuplicatePath,
    RouteEventUnavailable,
    RouteActionUnknown,
    EmitEventUnknown,
    EmitFieldUnknown,
    EmitFieldMissing,
    EmitFieldType,
    StoreUnknown,
    EmitStoreMismatch,
}

impl Code {
    pub const ALL: [Code; 48] = [
        Code::ParseSyntax,
        Code::NameDuplicate,
        Code::KeyUnknown,
        Code::KeyMissing,
        Code::ValueInvalid,
        Code::TypeUnknown,
        Code::DurationInvalid,
        Code::SubscriberEventUnknown,
        Code::SubscriberActionUnknown,
        Code::SubscriberRetryInvalid,
        Code::SubscriberKeyInvalid,
        Code::SubscriberOrderInvalid,
        Code::SubscriberOrderWithoutKey,
        Code::SubscriberConcurrencyPerKeyInvalid,
        Code::ScheduleActionUnknown,
        Code::ScheduleRetryNotAllowed,
        Code::ScheduleTriggerInvalid,
        Code::ScheduleCronInvalid,
        Code::ScheduleEventUnavailable,
        Code::ActionConnectionUnknown,
        Code::ActionRunUnknown,
        Code::ActionCycle,
        Code::EventFieldUnknown,
        Code::CallArgumentsInvalid,
        Code::CallMethodUnknown,
        Code::ConnectionRetryInvalid,
        Code::ConnectionRateInvalid,
        Code::ConnectionConcurrencyInvalid,
        Code::AlertsDuplicate,
        Code::AlertsConnectionUnknown,
        Code::AlertsPathInvalid,
        Code::CapabilityUnknown,
        Code::CapabilityUnfilled,
        Code::CapabilityFilledTwice,
        Code::CapabilityCallOutside,
        Code::RouteMethodMissing,
        Code::RoutePathInvalid,
        Code::RoutePathParamUnknown,
        Code::RouteInputUnknown,
        Code::RouteDuplicatePath,
        Code::RouteEventUnavailable,
        Code::RouteActionUnknown,
        Code::EmitEventUnknown,
        Code::EmitFieldUnknown,
        Code::EmitFieldMissing,
        Code::EmitFieldType,
        Code::StoreUnknown,
        Code::EmitStoreMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::ParseSyntax => "parse.syntax",
            Code::NameDuplicate => "name.duplicate",
            Code::KeyUnknown => "key.unknown",
            Code::KeyMissing => "key.missing",
            Code::ValueInvalid => "value.invalid",
            Code::TypeUnknown => "type.unknown",
            Code::DurationInvalid => "duration.invalid",
            Code::SubscriberEventUnknown => "subscriber.event_unknown",
            Code::SubscriberActionUnknown => "subscriber.action_unknown",
            Code::SubscriberRetryInvalid => "subscriber.retry_invalid",
            Code::SubscriberKeyInvalid => "subscriber.key_invalid",
            Code::SubscriberOrderInvalid => "subscriber.order_invalid",
            Code::SubscriberOrderWithoutKey => "subscriber.order_without_key",
            Code::SubscriberConcurrencyPerKeyInvalid => "subscriber.concurrency_per_key_invalid",
            Code::ScheduleActionUnknown => "schedule.action_unknown",
            Code::ScheduleRetryNotAllowed => "schedule.retry_not_allowed",
            Code::ScheduleTriggerInvalid => "schedule.trigger_invalid",
            Code::ScheduleCronInvalid => "schedule.cron_invalid",
            Code::ScheduleEventUnavailable => "schedule.event_unavailable",
            Code::ActionConnectionUnknown => "action.connection_unknown",
            Code::ActionRunUnknown => "action.run_unknown",
            Code::ActionCycle => "action.cycle",
            Code::EventFieldUnknown => "event.field_unknown",
            Code::CallArgumentsInvalid => "call.arguments_invalid",
            Code::CallMethodUnknown => "call.method_unknown",
            Code::ConnectionRetryInvalid => "connection.retry_invalid",
            Code::ConnectionRateInvalid => "connection.rate_invalid",
            Code::ConnectionConcurrencyInvalid => "connection.concurrency_invalid",
            Code::AlertsDuplicate => "alerts.duplicate",
            Code::AlertsConnectionUnknown => "alerts.connection_unknown",
            Code::AlertsPathInvalid => "alerts.path_invalid",
            Code::CapabilityUnknown => "capability.unknown",
            Code::CapabilityUnfilled => "capability.unfilled",
            Code::CapabilityFilledTwice => "capability.filled_twice",
            Code::CapabilityCallOutside => "capability.call_outside",
            Code::RouteMethodMissing => "route.method_missing",
            Code::RoutePathInvalid => "route.path_invalid",
            Code::RoutePathParamUnknown => "route.path_param_unknown",
            Code::RouteInputUnknown => "route.input_unknown",
            Code::RouteDuplicatePath => "route.duplicate_path",
            Code::RouteEventUnavailable => "route.event_unavailable",
            Code::RouteActionUnknown => "route.action_unknown",
            Code::EmitEventUnknown => "emit.event_unknown",
            Code::EmitFieldUnknown => "emit.field_unknown",
            Code::EmitFieldMissing => "emit.field_missing",
            Code::EmitFieldType => "emit.field_type",
            Code::StoreUnknown => "store.unknown",
            Code::EmitStoreMismatch => "emit.store_mismatch",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One error in the app file. Every diagnostic is an error: an app with any
/// diagnostic is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    pub span: Span,
}

impl Diagnostic {
    pub fn new(code: Code, span: Span, message: String) -> Diagnostic {
        Diagnostic { code, message, span }
    }
}

/// A 1-based line and a 1-based column counted in characters, as editors
/// and rustc show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// Byte offsets to lines and columns, built once per file so that rendering
/// thousands of diagnostics stays linear.
pub struct LineIndex<'a> {
    src: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(src: &'a str) -> LineIndex<'a> {
        let mut starts = vec![0];
        starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { src, starts }
    }

    fn clamp(&self, mut offset: usize) -> usize {
        offset = offset.min(self.src.len());
        while !self.src.is_char_boundary(offset) {
            offset -= 1;
        }
        offset
    }

    pub fn position(&self, offset: usize) -> Position {
        let offset = self.clamp(offset);
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let column = self.src[self.starts[line]..offset].chars().count() + 1;
        Position { line: line + 1, column }
    }

    /// The text of a 1-based line, without its line break.
    pub fn line_text(&self, line: usize) -> &'a str {
        let start = self.starts[line - 1];
        let end = self.starts.get(line).map_or(self.src.len(), |&e| e - 1);
        self.src[start..end].trim_end_matches('\r')
    }
}

/// rustc's layout:
///
/// ```text
/// error[subscriber.retry_invalid]: `attempts:` takes 1 to 100, not 0
///  --> app.jadpo:4:24
///   |
/// 4 |     retry: { attempts: 0 }
///   |                        ^
/// ```
///
/// A span over several lines is underlined to the end of its first line.
pub fn render(file: &str, index: &LineIndex<'_>, d: &Diagnostic) -> String {
    render_coded(file, index, d.code.as_str(), d.span, &d.message)
}

/// A problem with any file Jadpo reads (an app file, a scenario) as the
/// app file's diagnostics are shown: `error[CODE]: MESSAGE`, where, and
/// the line with the span underlined.
pub fn render_coded(file: &str, index: &LineIndex<'_>, code: &str, span: Span, message: &str) -> String {
    let start = index.position(span.start);
    let end = index.position(span.end);
    let text = index.line_text(start.line);
    let gutter = start.line.to_string().len();
    let pad = " ".repeat(gutter);
    // Tabs would make the caret drift: show each as one space.
    let shown: String = text.chars().map(|c| if c == '\t' { ' ' } else { c }).collect();
    let line_chars = shown.chars().count();
    let first = start.column - 1;
    let last = if end.line == start.line {
        end.column - 1
    } else {
        line_chars
    };
    let width = last.saturating_sub(first).max(1);
    let source_line = format!("{} | {}", start.line, shown);
    format!(
        "error[{code}]: {msg}\n{pad}--> {file}:{line}:{col}\n{pad} |\n{src}\n{pad} | {sp}{carets}\n",
        msg = message,
        line = start.line,
        col = start.column,
        src = source_line.trim_end(),
        sp = " ".repeat(first),
        carets = "^".repeat(width),
    )
}

/// Every diagnostic rendered, in source order, separated by blank lines.
pub fn render_all(file: &str, src: &str, diags: &[Diagnostic]) -> String {
    let index = LineIndex::new(src);
    diags
        .iter()
        .map(|d| render(file, &index, d))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_not_bytes() {
        let src = "ab\né x\n";
        let ix = LineIndex::new(src);
        assert_eq!(ix.position(0), Position { line: 1, column: 1 });
        assert_eq!(ix.position(3), Position { line: 2, column: 1 });
        assert_eq!(ix.position(6), Position { line: 2, column: 3 });
        assert_eq!(ix.position(4), Position { line: 2, column: 1 }, "inside é: its start");
        assert_eq!(ix.position(999), Position { line: 3, column: 1 });
        assert_eq!(ix.line_text(2), "é x");
        assert_eq!(ix.line_text(3), "");
    }

    #[test]
    fn every_code_is_listed_once() {
        let mut names: Vec<_> = Code::ALL.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Code::ALL.len());
    }
}
