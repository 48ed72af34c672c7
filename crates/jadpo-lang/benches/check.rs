//! Checking a large app file: `cargo bench -p jadpo-lang --bench check`.
//! The figure is recorded in docs/performance.md ("App file check").

use std::fmt::Write;

fn main() {
    divan::main();
}

/// An app with `n` subscribers over 100 events, 50 connections and 200
/// actions, a fifth of which run another action, like a large integration
/// hub would declare.
fn generate(n: usize) -> String {
    let mut s = String::new();
    for e in 0..100 {
        writeln!(
            s,
            "event Event{e} {{\n    id: string\n    amount_cents: int\n    customer: object\n}}"
        )
        .unwrap();
    }
    for c in 0..50 {
        writeln!(
            s,
            "connection conn{c} {{\n    base_url: env(\"CONN{c}_URL\")\n    headers: {{ \"Authorization\": secret(\"CONN{c}_TOKEN\") }}\n    timeout: 10s\n    retry: {{ attempts: 3 }}\n}}"
        )
        .unwrap();
    }
    for a in 0..200 {
        writeln!(s, "action act{a}(id: string, amount: int) {{").unwrap();
        writeln!(
            s,
            "    call conn{}.post(\"/things/{{id}}/record\", body: {{ id: id, amount: amount }}, idempotency_key: id)",
            a % 50
        )
        .unwrap();
        if a % 5 == 0 && a + 1 < 200 {
            writeln!(s, "    run act{}(id, amount)", a + 1).unwrap();
        }
        writeln!(s, "}}").unwrap();
    }
    for i in 0..n {
        writeln!(
            s,
            "subscriber sub{i} {{\n    on: Event{}\n    run: act{}(event.id, event.amount_cents)\n    retry: {{ attempts: 20  within: 3d }}\n    timeout: 30s\n}}",
            i % 100,
            i % 200
        )
        .unwrap();
    }
    s
}

#[divan::bench(args = [1_000, 10_000])]
fn check_subscribers(bencher: divan::Bencher, n: usize) {
    let src = generate(n);
    let checked = jadpo_lang::check("app.jadpo", &src);
    assert!(checked.diagnostics.is_empty(), "{}", checked.render(&src));
    assert_eq!(checked.app.as_ref().map(|a| a.subscribers.len()), Some(n));
    bencher
        .counter(divan::counter::BytesCount::new(src.len()))
        .bench(|| jadpo_lang::check("app.jadpo", divan::black_box(&src)));
}
