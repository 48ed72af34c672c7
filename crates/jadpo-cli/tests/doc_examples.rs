//! The command examples of docs/cli.md and README.md, run as written.
//!
//! Every line starting with `jadpo ` in a fenced block of either file (and
//! every inline `jadpo ...` of README.md) must be on [`EXAMPLES`]: run, with
//! the exit code the docs imply, or skipped with the reason. An example
//! added to the docs and not to the list, or one the list names that the
//! docs dropped, fails the test, so the list cannot drift from the docs.
//! They run in order in one folder holding the tests' app as `app.jadpo`
//! and the default store, `.jadpo/jadpo.db`, holding 14 failed deliveries
//! (ids 1 to 14), so `jadpo retry 12 13 14` retries what it names.

mod common;

use common::Folder;

enum Expect {
    Exit(i32),
    Skip(&'static str),
}
use Expect::{Exit, Skip};

const SYNOPSIS: Expect = Skip("a synopsis: placeholders and alternatives, not a command");
const SERVER: Expect = Skip("runs a server until stopped (tests/process.rs runs dev and serve)");
const BENCH: Expect = Skip("times thousands of deliveries for seconds (tests/bench.rs runs it small)");

/// Each example, as the docs write it, and what it should do.
const EXAMPLES: &[(&str, Expect)] = &[
    // docs/cli.md: the synopsis at the top.
    ("jadpo check [APP] [--format human|json]", SYNOPSIS),
    (
        "jadpo dev [APP] [--store URL | --store NAME=URL ...] [--port N] [--time-scale N] [--workers N]",
        SYNOPSIS,
    ),
    (
        "jadpo serve [APP] --store URL [--store NAME=URL ...] [--workers N] [--port N] [--bind ADDR]",
        SYNOPSIS,
    ),
    ("jadpo demo [...]", SYNOPSIS),
    ("jadpo emit EVENT JSON [--json] [--store URL] [--app FILE]", SYNOPSIS),
    (
        "jadpo deliveries [--state S] [--subscriber S] [--connection C] [--event ID] [--key K] [--before ID] [--limit N] [--json]",
        SYNOPSIS,
    ),
    ("jadpo deliveries show ID [--json]", SYNOPSIS),
    ("jadpo deliveries skip ID... [--by NAME] [--json]", SYNOPSIS),
    ("jadpo retry ID... [--spread D] [--dry-run] [--json]", SYNOPSIS),
    (
        "jadpo retry --state failed|parked [--subscriber S] [--connection C] [--key K] [--limit N] [--spread D] [--dry-run] [--json]",
        SYNOPSIS,
    ),
    ("jadpo breakers [--json]", SYNOPSIS),
    ("jadpo migrate [--store URL | --store NAME] [--app FILE]", SYNOPSIS),
    ("jadpo completions bash|zsh|fish|elvish|powershell", SYNOPSIS),
    (
        "jadpo simulate [APP] --scenario FILE [--seed N] [--json] [--compare APP2]",
        SYNOPSIS,
    ),
    (
        "jadpo simulate app.jadpo --scenario outage.toml --compare app-3-attempts.jadpo",
        Skip("needs its scenario and second app file (tests/simulate.rs runs simulate)"),
    ),
    (
        "jadpo bench [--store URL] [--events N] [--concurrency C] [--backlog | --rate R/s [--duration D [--report-every D]]] [--retention D] [--keys N [--order fifo|strict | --concurrency-per-key N] [--hot-key]] [--http [--latency D] [--connection-rate R/s] | --driver amqp|nats|redis|mqtt [--broker-url URL]] [--json] [--keep]",
        SYNOPSIS,
    ),
    // docs/cli.md: `jadpo deliveries skip` (delivery 11 is failed).
    ("jadpo deliveries skip 11 --by ana", Exit(0)),
    // docs/cli.md: `jadpo retry`.
    ("jadpo retry 12 13 14", Exit(0)),
    (
        "jadpo retry --state failed --subscriber record_payment_webhook --dry-run",
        Exit(0),
    ),
    ("jadpo retry --state parked --connection payments", Exit(0)),
    // docs/cli.md: `jadpo alerts`.
    (
        "jadpo alerts [--json] [--limit N] [--store URL | --store NAME] [--app FILE]",
        SYNOPSIS,
    ),
    // docs/cli.md: `jadpo completions` (stdout is captured, never written
    // into the home folder).
    (
        "jadpo completions bash > ~/.local/share/bash-completion/completions/jadpo",
        Exit(0),
    ),
    ("jadpo completions zsh > ~/.zfunc/_jadpo", Exit(0)),
    ("jadpo completions fish > ~/.config/fish/completions/jadpo.fish", Exit(0)),
    // docs/cli.md: `jadpo bench`.
    (
        "jadpo bench                                   # 10,000 events, SQLite in a temporary folder",
        BENCH,
    ),
    (
        "jadpo bench --store postgres://postgres@127.0.0.1/test --events 50000",
        BENCH,
    ),
    ("jadpo bench --rate 2000/s --events 20000", BENCH),
    ("jadpo bench --http --latency 50ms --concurrency 100 --json", BENCH),
    ("jadpo bench --driver nats --events 20000      # JetStream on 127.0.0.1:4222", BENCH),
    (
        "jadpo bench --store postgres://postgres@127.0.0.1/test --rate 5000/s --duration 30m --retention 5m",
        Skip("a 30-minute soak; tests/bench.rs runs a short one"),
    ),
    // README.md, inline.
    ("jadpo check", Exit(0)),
    ("jadpo dev", SERVER),
    ("jadpo emit", Skip("a command's name in a sentence, not an example")),
    ("jadpo retry", Skip("a command's name in a sentence, not an example")),
    (
        r#"jadpo emit PaymentReceived '{"payment_id":"p1","amount_cents":100}'"#,
        Exit(0),
    ),
    ("jadpo deliveries", Exit(0)),
    ("jadpo deliveries show ID", Skip("ID is a placeholder")),
    ("jadpo deliveries skip ID", Skip("ID is a placeholder")),
    ("jadpo breakers", Exit(0)),
    ("jadpo retry --state failed", Exit(0)),
    ("jadpo demo --help", Exit(0)),
    ("jadpo bench --store URL", Skip("URL is a placeholder")),
];

/// `jadpo ...` lines of the fenced blocks of `text` (of any language but
/// the app file's own), and with `inline`, its `jadpo ...` code spans.
fn examples(text: &str, inline: bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            fence = if fence.is_some() { None } else { Some(lang) };
            continue;
        }
        match fence {
            Some(lang) if lang != "jadpo" && lang != "json" && trimmed.starts_with("jadpo ") => {
                found.push(trimmed.to_owned());
            }
            Some(_) => {}
            None if inline => {
                let spans = line.split('`').skip(1).step_by(2);
                found.extend(spans.filter(|s| s.starts_with("jadpo ")).map(str::to_owned));
            }
            None => {}
        }
    }
    found
}

/// The words of an example as a shell would split them: quotes kept
/// together, and without a trailing `# comment` or `> redirect`.
fn words(example: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in example.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '#' | '>') if word.is_none() => break,
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

#[test]
fn words_split_as_a_shell_would() {
    assert_eq!(
        words(r#"jadpo emit P '{"a": 1}' --json"#),
        ["jadpo", "emit", "P", r#"{"a": 1}"#, "--json"]
    );
    assert_eq!(words("jadpo bench    # 10,000 events"), ["jadpo", "bench"]);
    assert_eq!(
        words("jadpo completions zsh > ~/.zfunc/_jadpo"),
        ["jadpo", "completions", "zsh"]
    );
}

#[test]
fn every_example_of_the_docs_runs_as_the_docs_say() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let read = |p: &str| std::fs::read_to_string(format!("{root}/{p}")).unwrap();
    let mut documented = examples(&read("docs/cli.md"), false);
    documented.extend(examples(&read("README.md"), true));
    let listed: Vec<&str> = EXAMPLES.iter().map(|(e, _)| *e).collect();
    let unlisted: Vec<&String> = documented.iter().filter(|d| !listed.contains(&d.as_str())).collect();
    assert!(
        unlisted.is_empty(),
        "examples in the docs, not on EXAMPLES: {unlisted:#?}"
    );
    let dropped: Vec<&&str> = listed.iter().filter(|l| !documented.iter().any(|d| d == *l)).collect();
    assert!(dropped.is_empty(), "on EXAMPLES, no longer in the docs: {dropped:#?}");

    let f = Folder::with_app();
    std::fs::create_dir_all(f.path().join(".jadpo")).unwrap();
    let default_store = format!("sqlite:{}", f.path().join(".jadpo/jadpo.db").display());
    let failed = common::seed_failed_sqlite(&default_store, 14);
    assert_eq!(failed.last().map(|d| d.0), Some(14));

    let mut ran = 0;
    for (example, expect) in EXAMPLES {
        let code = match expect {
            Exit(code) => code,
            Skip(why) => {
                assert!(!why.is_empty(), "{example}: a skip says why");
                eprintln!("skipped: {example}: {why}");
                continue;
            }
        };
        let words = words(example);
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        let run = f.run(&args);
        assert_eq!(
            run.code(),
            *code,
            "{example}\nstdout:\n{}\nstderr:\n{}",
            run.stdout(),
            run.stderr()
        );
        assert!(!run.stdout().is_empty(), "{example} printed nothing");
        ran += 1;
    }
    assert!(ran >= 10, "only {ran} examples ran");
    // What the examples did, seen in the store: 12 to 14 retried by id, the
    // rest by the README's `retry --state failed`, and its emit made one
    // event's two deliveries.
    let list = f.run(&["deliveries", "--json"]).json();
    let state = |id: i64| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|d| d["id"] == id)
            .map(|d| d["state"].clone())
    };
    assert_eq!(state(12), Some("due".into()));
    assert_eq!(state(1), Some("due".into()));
    assert_eq!(list.as_array().unwrap().len(), 16);
}
