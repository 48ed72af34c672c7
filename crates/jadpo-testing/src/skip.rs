//! The one rule for a test that cannot run here (no PostgreSQL, no
//! Chromium, no `chattr`): under CI it fails, elsewhere it says so where
//! people look.
//!
//! - **Under CI** (`CI` set to anything but the empty string: `true`, `1`,
//!   `yes`, as CI services set it), a missing prerequisite fails the test
//!   with what is missing and how to provide it, unless
//!   [`ALLOW_VAR`] is set: a CI job that knowingly runs without, say,
//!   Chromium says so in its configuration instead of in nobody's logs.
//! - **Elsewhere**, the test returns early and a banner goes to the
//!   process's stderr directly, not through `eprintln!`, which libtest
//!   captures and throws away for a test that passes. One banner per
//!   prerequisite per test binary, so 100 skipped PostgreSQL tests print
//!   one line, not 100.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;

/// Set (to anything non-empty) to let tests skip under CI too.
pub const ALLOW_VAR: &str = "JADPO_TEST_ALLOW_SKIPS";

/// What to do about a test whose prerequisite is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Fail the test with this message.
    Fail(String),
    /// Return early; say so once with this banner.
    Skip(String),
}

/// The rule, over the environment's values: pure, so it is tested whole.
/// `what` names the prerequisite ("PostgreSQL at postgres://..."), `why` is
/// the reason it is missing, `fix` says how to provide it.
pub fn verdict(ci: Option<&str>, allow: Option<&str>, what: &str, why: &str, fix: &str) -> Verdict {
    let set = |v: Option<&str>| v.is_some_and(|v| !v.trim().is_empty());
    if set(ci) && !set(allow) {
        return Verdict::Fail(format!(
            "{what} is needed and missing ({why}); CI is set, so this test fails instead of skipping. \
             {fix} (or set {ALLOW_VAR}=1 to allow skips)"
        ));
    }
    Verdict::Skip(format!("SKIPPED: tests that need {what} did not run ({why}). {fix}"))
}

/// Applies [`verdict`] to this process's environment: panics under CI,
/// else prints the banner once per `what` and returns, so the caller
/// returns early.
pub fn missing(what: &str, why: &str, fix: &str) {
    let ci = std::env::var("CI").ok();
    let allow = std::env::var(ALLOW_VAR).ok();
    match verdict(ci.as_deref(), allow.as_deref(), what, why, fix) {
        Verdict::Fail(message) => panic!("{message}"),
        Verdict::Skip(banner) => {
            static SHOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
            let first = SHOWN.lock().unwrap_or_else(|p| p.into_inner()).insert(what.to_owned());
            if first {
                // Straight to the file descriptor: libtest's capture only
                // sees the print macros.
                let _ = writeln!(std::io::stderr().lock(), "\n******** {banner} ********\n");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_ci_value_fails_unless_skips_are_allowed() {
        let fails = |ci, allow| matches!(verdict(ci, allow, "X", "gone", "Start X."), Verdict::Fail(_));
        for ci in ["true", "1", "yes", "false", "TRUE"] {
            assert!(fails(Some(ci), None), "CI={ci}");
            assert!(fails(Some(ci), Some("")), "CI={ci}, an empty allow is no allow");
            assert!(!fails(Some(ci), Some("1")), "CI={ci} with skips allowed");
        }
        assert!(!fails(None, None), "no CI");
        assert!(!fails(Some(""), None), "CI set empty is no CI");
        assert!(!fails(Some("  "), None));
    }

    #[test]
    fn the_messages_say_what_is_missing_why_and_how_to_fix_it() {
        let Verdict::Fail(m) = verdict(Some("true"), None, "PostgreSQL at p://x", "refused", "Start it.") else {
            unreachable!()
        };
        for part in ["PostgreSQL at p://x", "refused", "Start it.", ALLOW_VAR] {
            assert!(m.contains(part), "{m}");
        }
        let Verdict::Skip(b) = verdict(None, None, "Chromium", "not installed", "apt install chromium") else {
            unreachable!()
        };
        assert!(
            b.starts_with("SKIPPED: ") && b.contains("Chromium") && b.contains("apt install"),
            "{b}"
        );
    }
}
