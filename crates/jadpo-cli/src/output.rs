//! What every operator command shares: its errors (a stable code, a message
//! and an exit code), a tokio runtime, times for people, and plain tables.
//!
//! Exit codes (docs/cli.md):
//! - 0: done.
//! - 1: the input was refused: an invalid event payload, an unknown event,
//!   an app file with errors, a delivery that does not exist or can't be
//!   retried.
//! - 2: the command could not run: bad usage (clap's own), a bad store URL,
//!   an unreachable store, an unreadable app file.

use jadpo_core::Timestamp;
use jadpo_store::StoreError;
use std::fmt;
use std::future::Future;
use std::io::Write;
use std::process::ExitCode;

/// Exit code of refused input.
pub(crate) const EXIT_INVALID: u8 = 1;
/// Exit code of an environment problem: store, app file, usage.
pub(crate) const EXIT_ENVIRONMENT: u8 = 2;

/// A command's error: printed as `error[CODE]: MESSAGE` on stderr, and the
/// process's exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CliError {
    pub code: &'static str,
    pub message: String,
    pub exit: u8,
    /// Already rendered text to print instead (an app file's diagnostics).
    pub rendered: Option<String>,
}

impl CliError {
    /// Refused input: exit 1.
    pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
            exit: EXIT_INVALID,
            rendered: None,
        }
    }

    /// The environment is at fault: exit 2.
    pub(crate) fn environment(code: &'static str, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
            exit: EXIT_ENVIRONMENT,
            rendered: None,
        }
    }

    /// A store that failed while a command used it.
    pub(crate) fn store(e: StoreError) -> CliError {
        match e {
            StoreError::Unavailable(why) => CliError::environment("store.unavailable", why),
            StoreError::InvalidUrl(why) => CliError::environment("store.url_invalid", why),
            other => CliError::environment(other.code(), other.to_string()),
        }
    }

    /// Prints the error on stderr and gives the exit code.
    pub(crate) fn report(&self) -> ExitCode {
        let text = match &self.rendered {
            Some(r) => format!("{}\n", r.trim_end()),
            None => format!("{self}\n"),
        };
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
        ExitCode::from(self.exit)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)
    }
}

impl std::error::Error for CliError {}

/// Runs a command's async body on a small runtime of its own and turns its
/// result into the exit code.
pub(crate) fn run_async<F>(body: F) -> ExitCode
where
    F: Future<Output = Result<ExitCode, CliError>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return CliError::environment("cli.runtime", format!("cannot start the async runtime: {e}")).report(),
    };
    match runtime.block_on(body) {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}

/// RFC 3339, or JSON null.
pub(crate) fn time_json(t: Option<Timestamp>) -> serde_json::Value {
    t.map_or(serde_json::Value::Null, |t| jadpo_runtime::rfc3339(t).into())
}

/// A time for a table: RFC 3339 to the second, in UTC.
pub(crate) fn time_short(t: Timestamp) -> String {
    let secs = t.as_millis().div_euclid(1000);
    jiff::Timestamp::from_second(secs).map_or_else(|_| jadpo_runtime::rfc3339(t), |ts| ts.to_string())
}

/// A duration for people: `90s` as `1m30s`, `0s` as `0s`.
pub(crate) fn duration_short(d: std::time::Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return if d.as_millis() > 0 {
            format!("{}ms", d.as_millis())
        } else {
            "0s".into()
        };
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if secs > 0 {
        out.push_str(&format!("{secs}s"));
    }
    out
}

/// Prints one JSON value, pretty, on stdout.
pub(crate) fn print_json(v: &serde_json::Value) {
    let mut out = serde_json::to_string_pretty(v).unwrap_or_default();
    out.push('\n');
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}

/// A plain table: a header and rows, columns padded to their widest cell,
/// the last column unpadded.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// Writes text on stdout.
pub(crate) fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration_short(Duration::ZERO), "0s");
        assert_eq!(duration_short(Duration::from_millis(250)), "250ms");
        assert_eq!(duration_short(Duration::from_secs(90)), "1m30s");
        assert_eq!(duration_short(Duration::from_secs(600)), "10m");
        assert_eq!(duration_short(Duration::from_secs(86_400 + 3_600)), "1d1h");
    }

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let t = table(
            &["ID", "STATE"],
            &[vec!["1".into(), "due".into()], vec!["100".into(), "held".into()]],
        );
        assert_eq!(t, "ID   STATE\n1    due\n100  held\n");
    }
}
