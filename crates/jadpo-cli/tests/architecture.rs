//! ARCHITECTURE.md names every file of more than 100 lines, and every file
//! it names exists.
//!
//! A newcomer reads ARCHITECTURE.md to find a file's room: what it is, and
//! which crate and folder it belongs to. A large file missing from it is a
//! room with no door, and a file it names that was moved or removed sends the
//! reader nowhere. docs/testing.md rules: what a document promises, a test
//! keeps true.
//!
//! It reads the tree and the page as text, with std alone. A file counts as
//! named when the page holds:
//!
//! - in `src/`, its path from `src/` (`api/tests.rs`); or, in the crate's
//!   own section, its name in backticks beside its folder's
//!   (`` `sqlite/` `` and `` `claim.rs` ``), or only its name for a file
//!   directly in `src/`;
//! - elsewhere in the crate, its path from the crate (`tests/cli.rs`,
//!   `benches/console.rs`, `examples/embedded.rs`).
//!
//! A name in backticks with a slash, ending in `.rs`, `.js`, `.css` or
//! `.md`, must be the end of a real file's path in the repository.

use std::fs;
use std::path::Path;

/// More lines than this and a file must be named.
const LINES: usize = 100;

const ADVICE: &str = "ARCHITECTURE.md: name each file in its crate's section, a few words on what it is";

#[test]
fn architecture_md_names_every_large_file_and_only_real_ones() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let page = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    walk(root, "", &mut files);
    let sources: Vec<&(String, usize)> = files
        .iter()
        .filter(|(p, _)| p.starts_with("crates/") && is_source(p))
        .collect();
    // A walk that read nothing would find nothing missing either.
    assert!(sources.len() > 100, "read too little: {} files", sources.len());

    let unnamed: Vec<String> = sources
        .iter()
        .filter(|(p, lines)| *lines > LINES && !named(&page, p))
        .map(|(p, lines)| format!("  {p} ({lines} lines)"))
        .collect();
    let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    let ghosts: Vec<String> = file_names(&page)
        .into_iter()
        .filter(|name| !paths.iter().any(|p| ends_with_path(p, name)))
        .map(|name| format!("  `{name}`"))
        .collect();
    let mut message = String::new();
    if !unnamed.is_empty() {
        message += &format!(
            "{} files of more than {LINES} lines that ARCHITECTURE.md does not name ({ADVICE}):\n{}\n",
            unnamed.len(),
            unnamed.join("\n")
        );
    }
    if !ghosts.is_empty() {
        message += &format!(
            "{} files ARCHITECTURE.md names that do not exist:\n{}\n",
            ghosts.len(),
            ghosts.join("\n")
        );
    }
    assert!(message.is_empty(), "{message}");
}

/// The one file ARCHITECTURE.md ("No unsafe but one") lets use `unsafe`.
const UNSAFE_ALLOWED: &str = "crates/jadpo-store/src/sqlite/emit_sqlx.rs";

/// The workspace denies `unsafe` code rather than forbidding it, for one
/// block: any other file that allows it, or writes an unsafe block, fn,
/// impl or trait, fails here.
#[test]
fn unsafe_code_is_in_one_file_only() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = Vec::new();
    walk(root, "", &mut files);
    // Built from parts, so this file does not match itself.
    let word = ["uns", "afe"].concat();
    let patterns = [
        format!("{word} {{"),
        format!("{word} fn"),
        format!("{word} impl"),
        format!("{word} trait"),
        format!("{word} extern"),
        format!("allow({word}_code)"),
    ];
    let mut users = Vec::new();
    for (path, _) in files
        .iter()
        .filter(|(p, _)| p.starts_with("crates/") && p.ends_with(".rs"))
    {
        let text = fs::read_to_string(root.join(path)).unwrap();
        let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
        if code.clone().any(|l| patterns.iter().any(|p| l.contains(p.as_str()))) {
            users.push(path.clone());
        }
    }
    assert_eq!(
        users,
        [UNSAFE_ALLOWED],
        "files with unsafe code (ARCHITECTURE.md, \"No unsafe but one\")"
    );
}

#[test]
fn the_rule_reads_paths_folders_and_sections() {
    let page = "## Crates\n\n### `crates/x`: x\n\n`lib.rs`, `api/` (`mod.rs`), \
                `cmd/bench/soak.rs`, tests in `tests/cli.rs`.\n\n\
                ### `crates/y`: y\n\n`main.rs`, `docs/retries.md`, `api/gone.rs`.\n";
    assert!(named(page, "crates/x/src/lib.rs"));
    assert!(named(page, "crates/x/src/api/mod.rs"));
    assert!(named(page, "crates/x/src/cmd/bench/soak.rs"));
    assert!(named(page, "crates/x/tests/cli.rs"));
    // A bare name counts only in its own crate's section, only in backticks.
    assert!(!named(page, "crates/x/src/main.rs"));
    assert!(named(page, "crates/y/src/main.rs"));
    assert!(!named(page, "crates/y/src/api/mod.rs"));
    assert!(!named(page, "crates/x/src/cmd/mod.rs"));
    assert!(!named(page, "crates/x/benches/cli.rs"));

    assert_eq!(
        file_names(page),
        ["cmd/bench/soak.rs", "tests/cli.rs", "docs/retries.md", "api/gone.rs"]
    );
    assert!(ends_with_path("crates/x/src/cmd/bench/soak.rs", "cmd/bench/soak.rs"));
    assert!(ends_with_path("docs/retries.md", "docs/retries.md"));
    assert!(!ends_with_path("crates/x/src/xapi/gone.rs", "api/gone.rs"));
}

/// Whether the page names `path` (from the workspace root), by the rule above.
fn named(page: &str, path: &str) -> bool {
    let mut parts = path.splitn(3, '/');
    let (Some("crates"), Some(krate), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Some(rel) = rest.strip_prefix("src/") else {
        return page.contains(rest);
    };
    if page.contains(rel) && rel.contains('/') {
        return true;
    }
    let section = section(page, krate);
    let (folder, name) = match rel.rsplit_once('/') {
        Some((folder, name)) => (Some(folder), name),
        None => (None, rel),
    };
    section.contains(&format!("`{name}`")) && folder.is_none_or(|f| section.contains(&format!("`{f}/`")))
}

/// The text under the heading "### `crates/NAME`", up to the next heading.
fn section<'a>(page: &'a str, krate: &str) -> &'a str {
    let heading = format!("### `crates/{krate}`");
    let Some(start) = page.find(&heading) else {
        return "";
    };
    let body = &page[start + heading.len()..];
    let end = body.match_indices("\n#").map(|(i, _)| i).next().unwrap_or(body.len());
    &body[..end]
}

/// Names in backticks that look like a file's path: a slash, and a source or
/// document's ending.
fn file_names(page: &str) -> Vec<String> {
    page.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.contains('/')
                && !s.contains(char::is_whitespace)
                && [".rs", ".js", ".css", ".md"].iter().any(|e| s.ends_with(e))
        })
        .map(str::to_string)
        .collect()
}

fn ends_with_path(path: &str, name: &str) -> bool {
    path == name || path.ends_with(&format!("/{name}"))
}

fn is_source(path: &str) -> bool {
    [".rs", ".js", ".css"].iter().any(|e| path.ends_with(e))
}

/// Every file of the repository with its count of lines, but build output
/// and hidden folders.
fn walk(root: &Path, rel: &str, out: &mut Vec<(String, usize)>) {
    let mut entries: Vec<_> = fs::read_dir(root.join(rel)).unwrap().map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(root, &path, out);
            }
        } else if kind.is_file() {
            let lines = if is_source(&path) {
                String::from_utf8_lossy(&fs::read(entry.path()).unwrap())
                    .lines()
                    .count()
            } else {
                0
            };
            out.push((path, lines));
        }
    }
}
