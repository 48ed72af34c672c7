//! The parser and checker never panic and always finish, whatever the
//! input: random bytes, random token soup, and valid files with token ranges
//! deleted, inserted, duplicated and swapped.
//!
//! `cargo test` runs a modest number of cases (`JADPO_FUZZ_CASES`, default
//! 200 per property). The long run, reported in docs/performance.md:
//!
//! ```text
//! JADPO_FUZZ_SECONDS=600 nice cargo test -p jadpo-lang --release --test fuzz -- --ignored --nocapture
//! ```

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestRunner};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const EXAMPLE: &str = include_str!("../../../examples/payments/app.jadpo");

const SNIPPETS: &[&str] = &[
    "event Ping { id: string }\nconnection c { base_url: \"https://x\" retry: { attempts: 3 } }\naction a(id: string) { call c.get(\"/p/{id}\") run b(id) }\naction b(id: string) uses c\nsubscriber s { on: Ping run: a(event.id) retry: { attempts: 100 within: 30d } timeout: 15m }\nschedule t { cron: \"*/5 * * * *\" run: b(\"all\") }\nalerts { connection: c path: \"/alerts\" }\n",
    "action x() { run y() }\naction y() { run x() }\nschedule z { every: 0s run: x() retry: {} }\n",
    "event E { a: object b: list c: float d: bool }\naction f(a: object) { call c.post(\"/{a}\", body: [1, -2, 3.5, true, { k: event.a.b }]) }\nsubscriber s { on: E run: f(a: event.a) }\n",
    "connection pay { base_url: env(\"PAY_URL\") rate: 50/s concurrency: 10 }\nconnection slow { base_url: \"https://s\" rate: 1 / h, concurrency: 0 rate: 0/day }\n",
    "connection ops { base_url: \"https://ops\" }\nalerts { connection: ops path: \"/jadpo/alerts\" }\nalerts { connection: opps path: \"x{\" }\n",
    // Capabilities, routes, emits and stores: valid.
    "store main { url: env(\"DATABASE_URL\") }\nstore audit { url: \"sqlite:audit.db\" }\nevent Paid in audit { email: string cents: int }\nevent Req { cents: int meta: object }\nevent Audit in audit { id: string n: int }\ncapability receipt(email: string, cents: int)\nconnection pm { base_url: env(\"PM_URL\") fills receipt { call pm.post(\"/email\", body: { \"To\": email, n: cents }) emit Audit(id: email, n: cents) } }\naction refund(id: string, cents: int) { call pm.put(\"/r/{id}\") run receipt(id, cents) emit Paid(email: id, cents: cents) }\nsubscriber s { on: Paid run: receipt(event.email, event.cents) }\nroute r { post: \"/refunds/{id}\" input: Req run: refund(path.id, input.cents) timeout: 5s }\nroute q { get: \"/\" run: refund(\"x\", 1) }\n",
    // ... and every way to get them wrong.
    "capability c(a: string) { call x.get(\"/\") }\ncapability d() uses x\nconnection x { base_url: \"https://x\" fills c { call y.get(\"/\") run d() emit E(a: 1, 2) } fills c { } fills zz { } }\nevent E in nowhere { a: string }\nroute r { get: \"/a/{b}/{b}\" post: \"a\" input: Nope run: c(event.a, path.q, input.x.y) }\nroute s { delete: \"/a/{c}\" run: c(path) }\nroute t { delete: \"/a/{d}\" run: c(input) }\nstore s { url: secret(\"X\") }\nstore s { }\nevent F { fills c { } }\n",
];

/// Fragments that the mutations insert: the language's own words and
/// punctuation, and the values at its edges.
const VOCAB: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ":",
    ",",
    ".",
    "-",
    "/",
    "\"",
    "//",
    "\n",
    " ",
    "event",
    "connection",
    "action",
    "subscriber",
    "schedule",
    "alerts",
    "path",
    "call",
    "run",
    "uses",
    "retry",
    "attempts",
    "within",
    "on",
    "every",
    "cron",
    "timeout",
    "rate",
    "concurrency",
    "50/s",
    "/min",
    "env(\"X\")",
    "secret(",
    "event.",
    "event.id",
    "0",
    "101",
    "31d",
    "1.5h",
    "-5",
    "99999999999999999999999999999999999999999999",
    "\"x\"",
    "\"{id}\"",
    "\"{\"",
    "é",
    "\t",
    "\\",
    "@",
    "{{{{",
    "true",
    "string",
    "post",
    "\"0 3 * * *\"",
    "\"@daily\"",
    "\"* * * * * * * *\"",
    "ms",
    "x(",
    "uses c,",
    "capability",
    "fills",
    "fills c {",
    "route",
    "get",
    "delete",
    "input",
    "input.",
    "path.",
    "path.id",
    "\"/r/{id}\"",
    "\"/{\"",
    "emit",
    "emit E(",
    "store",
    "url",
    "in",
    "\"sqlite:a.db\"",
];

fn cases() -> u32 {
    std::env::var("JADPO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Checks `src` on another thread and fails if it takes longer than a
/// generous limit: a loop in the parser shows up as a failure, not a hang.
fn check_finishes(src: String) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let checked = jadpo_lang::check("fuzz.jadpo", &src);
        let rendered = checked.render(&src);
        let _ = tx.send((checked, rendered, src));
    });
    let (checked, rendered, src) = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => return Err(TestCaseError::fail("check did not finish within 20 s")),
        // The worker panicked: join to surface its message.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let why = worker.join().err().map(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            });
            return Err(TestCaseError::fail(format!("check panicked: {why:?}")));
        }
    };
    let _ = worker.join();
    prop_assert_eq!(checked.app.is_some(), checked.diagnostics.is_empty());
    for d in &checked.diagnostics {
        prop_assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "{:?}", d);
        prop_assert!(!d.message.is_empty());
    }
    prop_assert_eq!(rendered.matches("error[").count(), checked.diagnostics.len());
    Ok(())
}

/// Token ranges of `src`: words, numbers, strings and single punctuation,
/// so mutations cut where a person's edit would.
fn token_ranges(src: &str) -> Vec<(usize, usize)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        } else if b[i].is_ascii_alphanumeric() || b[i] == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                i += 1;
            }
            i = (i + 1).min(b.len());
        } else {
            i += src[i..].chars().next().map_or(1, char::len_utf8);
        }
        out.push((start, i));
    }
    out
}

#[derive(Clone, Debug)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, what: &'static str },
    Duplicate { at: usize, len: usize },
    Swap { a: usize, b: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..6usize).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), select(VOCAB)).prop_map(|(at, what)| Edit::Insert { at, what }),
        (any::<usize>(), 1..40usize).prop_map(|(at, len)| Edit::Duplicate { at, len }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap { a, b }),
    ]
}

fn mutate(src: &str, edits: &[Edit]) -> String {
    let mut s = src.to_string();
    for e in edits {
        let toks = token_ranges(&s);
        if toks.is_empty() {
            s.push_str("event");
            continue;
        }
        let n = toks.len();
        match *e {
            Edit::Delete { at, len } => {
                let (a, _) = toks[at % n];
                let (_, b) = toks[(at % n + len - 1).min(n - 1)];
                s.replace_range(a..b, "");
            }
            Edit::Insert { at, what } => {
                let (a, _) = toks[at % n];
                s.insert_str(a, what);
            }
            Edit::Duplicate { at, len } => {
                let (a, _) = toks[at % n];
                let (_, b) = toks[(at % n + len - 1).min(n - 1)];
                let copy = s[a..b].to_string();
                s.insert_str(b, &copy);
            }
            Edit::Swap { a, b } => {
                let (x, y) = (toks[a % n], toks[b % n]);
                let (first, second) = if x.0 <= y.0 { (x, y) } else { (y, x) };
                if first.1 <= second.0 {
                    let t1 = s[first.0..first.1].to_string();
                    let t2 = s[second.0..second.1].to_string();
                    s.replace_range(second.0..second.1, &t1);
                    s.replace_range(first.0..first.1, &t2);
                }
            }
        }
    }
    s
}

fn corpus() -> Vec<&'static str> {
    let mut c = vec![EXAMPLE];
    c.extend_from_slice(SNIPPETS);
    c
}

fn random_bytes() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u8>(), 0..512).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn token_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(select(VOCAB), 0..200).prop_map(|v| v.join(" "))
}

fn mutated() -> impl Strategy<Value = String> {
    (select(corpus()), proptest::collection::vec(edit(), 1..10)).prop_map(|(src, edits)| mutate(src, &edits))
}

proptest! {
    #![proptest_config(Config { cases: cases(), failure_persistence: None, ..Config::default() })]

    #[test]
    fn random_bytes_never_panic(src in random_bytes()) {
        check_finishes(src)?;
    }

    #[test]
    fn token_soup_never_panics(src in token_soup()) {
        check_finishes(src)?;
    }

    #[test]
    fn mutated_apps_never_panic(src in mutated()) {
        check_finishes(src)?;
    }
}

#[test]
fn the_corpus_is_valid_before_mutation() {
    for src in [EXAMPLE, SNIPPETS[0], SNIPPETS[5]] {
        let checked = jadpo_lang::check("app.jadpo", src);
        assert!(checked.diagnostics.is_empty(), "{}", checked.render(src));
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    for open in ["{", "[", "x(", "event e { a: ", "subscriber s { run: f("] {
        let src = open.repeat(100_000);
        let checked = jadpo_lang::check("deep.jadpo", &src);
        assert!(!checked.diagnostics.is_empty());
    }
}

#[test]
fn a_long_chain_of_actions_does_not_overflow() {
    let n = 20_000;
    let mut src = String::from("connection c { base_url: \"https://x\" }\n");
    for i in 0..n {
        src.push_str(&format!("action a{i}() {{ run a{}() }}\n", i + 1));
    }
    src.push_str(&format!("action a{n}() {{ call c.get(\"/\") }}\n"));
    let checked = jadpo_lang::check("chain.jadpo", &src);
    assert!(checked.diagnostics.is_empty(), "{:?}", checked.diagnostics.first());
    let app = checked.app.unwrap();
    assert!(app.actions["a0"].connections().contains("c"));
}

#[test]
fn a_long_chain_through_capabilities_does_not_overflow() {
    let n = 10_000;
    let mut src = String::from("event E { n: int }\ncapability k0()\n");
    let mut fills = String::new();
    for i in 0..n {
        src.push_str(&format!("action a{i}() {{ run k{i}() }}\ncapability k{}()\n", i + 1));
        fills.push_str(&format!("fills k{i} {{ run a{}() }}\n", i + 1));
    }
    src.push_str(&format!("action a{n}() {{ emit E(n: 1) }}\n"));
    fills.push_str(&format!("fills k{n} {{ call c.get(\"/\") }}\n"));
    let src = format!("{src}connection c {{ base_url: \"https://x\"\n{fills} }}\n");
    let checked = jadpo_lang::check("chain.jadpo", &src);
    assert!(checked.diagnostics.is_empty(), "{:?}", checked.diagnostics.first());
    let app = checked.app.unwrap();
    assert!(app.actions["a0"].connections().contains("c"));
    assert!(app.actions["a0"].emits().contains("E"));
}

/// The long run: mutations, soup and bytes in turn until the time is up,
/// printing how many inputs were checked.
#[test]
#[ignore]
fn fuzz_for_a_while() {
    let seconds: u64 = std::env::var("JADPO_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut executions: u64 = 0;
    let mut round = 0u64;
    let batch = 2_000;
    while Instant::now() < until {
        let config = Config {
            cases: batch,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        let result = match round % 3 {
            0 => runner.run(&mutated(), check_finishes),
            1 => runner.run(&token_soup(), check_finishes),
            _ => runner.run(&random_bytes(), check_finishes),
        };
        if let Err(e) = result {
            panic!("after {executions} executions: {e}");
        }
        executions += u64::from(batch);
        round += 1;
    }
    println!("fuzz: {executions} executions in {seconds} s, 0 failures");
}
