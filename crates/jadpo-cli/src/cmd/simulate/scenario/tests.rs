//! Scenario files: what each reads to, and every problem's code, place and
//! message (snapshots of the rendered diagnostics).

use super::*;

const APP: &str = r#"
event Paid { id: string  amount: int  vip: bool }
connection payments { base_url: "http://127.0.0.1:9"  timeout: 5s }
connection bus { driver: redis  url: "redis://127.0.0.1:6379" }
action record(id: string) { call payments.post("/payments/{id}", idempotency_key: id) }
subscriber record_payment { on: Paid  run: record(event.id) }
"#;

fn app() -> App {
    jadpo_lang::check("app.jadpo", APP).app.expect("a valid app")
}

fn read(src: &str) -> Result<Scenario, String> {
    parse(src, &app(), Path::new(".")).map_err(|problems| {
        let index = jadpo_lang::LineIndex::new(src);
        problems
            .iter()
            .map(|p| jadpo_lang::render_coded("s.toml", &index, p.code, p.span, &p.message))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

#[test]
fn a_whole_scenario_reads_to_plain_data() {
    let s = read(
        r#"
seed = 7
processes = 2
concurrency = 20
until = "2d"

[[traffic]]
event = "Paid"
rate = "5000/min"
for = "6h"
payload = { amount = 1200 }
keys = 100

[[traffic]]
event = "Paid"
count = 20000
at = "3h"

[[connections.payments]]
from = "0s"
state = "up"
latency = "50ms..200ms"
fail = { "503" = 0.01, timeout = 0.001 }

[[connections.payments]]
from = "1h"
state = "down"
answer = "429"
retry_after = "30s"

[[connections.payments]]
from = "3h"
state = "up"

[[connections.bus]]
from = "0s"
state = "down"
answer = "overloaded"

[[crash]]
at = "2h"
process = 2
"#,
    )
    .unwrap();
    let h = |n: u64| Duration::from_secs(n * 3600);
    assert_eq!(
        (s.seed, s.processes, s.concurrency, s.until),
        (Some(7), 2, 20, Some(h(48)))
    );
    assert_eq!(
        s.traffic[0].arrivals,
        Arrivals::Rate {
            n: 5000,
            per: Duration::from_secs(60),
            from: Duration::ZERO,
            length: h(6)
        }
    );
    assert_eq!(s.traffic[0].payload["amount"], 1200);
    assert_eq!(s.traffic[0].keys, Some(100));
    assert_eq!(
        s.traffic[1].arrivals,
        Arrivals::Burst {
            count: 20_000,
            at: h(3)
        }
    );
    let payments = &s.connections["payments"];
    assert_eq!(payments.len(), 3);
    assert_eq!(payments[1].answer, Answer::Status(429));
    assert_eq!(payments[1].retry_after, Some(Duration::from_secs(30)));
    assert_eq!(
        payments[0].fail,
        vec![(Answer::Status(503), 0.01), (Answer::Timeout, 0.001)]
    );
    assert_eq!(s.connections["bus"][0].answer, Answer::Overloaded);
    assert_eq!(
        s.crashes,
        [Crash {
            at: h(2),
            process: 2,
            back_after: Duration::from_secs(30)
        }]
    );
}

#[test]
fn defaults_fill_what_is_left_out() {
    let s = read("[[traffic]]\nevent = \"Paid\"\ncount = 10\n\n[[connections.bus]]\nfrom = \"1m\"\nstate = \"down\"\n")
        .unwrap();
    assert_eq!((s.processes, s.until, s.seed), (1, None, None));
    assert_eq!(
        s.traffic[0].arrivals,
        Arrivals::Burst {
            count: 10,
            at: Duration::ZERO
        }
    );
    assert_eq!(s.connections["bus"][0].answer, Answer::Refused, "a broker down refuses");
}

/// Each problem at its place, with its code and what to write instead.
#[test]
fn every_problem_is_reported_with_its_code_and_place() {
    let cases: &[(&str, &str)] = &[
        ("[[traffic]\n", "scenario.invalid"),
        ("colour = 1\n", "scenario.invalid"),
        ("processes = 0\n[[traffic]]\nevent = \"Paid\"\ncount = 1\n", "scenario.number_invalid"),
        ("[[traffic]]\nevent = \"Refund\"\ncount = 1\n", "scenario.event_unknown"),
        ("[[traffic]]\nevent = \"Paid\"\nrate = \"fast\"\nfor = \"1h\"\n", "scenario.rate_invalid"),
        ("[[traffic]]\nevent = \"Paid\"\nrate = \"5/s\"\n", "scenario.length_missing"),
        ("[[traffic]]\nevent = \"Paid\"\ncount = 1\nrate = \"5/s\"\n", "scenario.arrivals_invalid"),
        ("[[traffic]]\nevent = \"Paid\"\ncount = 1\nat = \"soon\"\n", "scenario.duration_invalid"),
        ("[[traffic]]\nevent = \"Paid\"\ncount = 1\npayload = { amount = \"x\" }\n", "scenario.payload_type"),
        ("[[traffic]]\nevent = \"Paid\"\ncount = 1\npayload = { colour = 1 }\n", "scenario.payload_field_unknown"),
        ("[[traffic]]\nevent = \"Paid\"\ncsv = \"no-such-file.csv\"\n", "scenario.csv_unreadable"),
        ("[[connections.mailer]]\nfrom = \"0s\"\nstate = \"up\"\n", "scenario.connection_unknown"),
        ("[[connections.payments]]\nfrom = \"0s\"\nstate = \"sideways\"\n", "scenario.state_invalid"),
        ("[[connections.payments]]\nfrom = \"0s\"\nstate = \"down\"\nanswer = \"overloaded\"\n", "scenario.answer_invalid"),
        ("[[connections.payments]]\nfrom = \"0s\"\nstate = \"up\"\nanswer = \"503\"\n", "scenario.answer_unused"),
        ("[[connections.payments]]\nfrom = \"0s\"\nstate = \"up\"\nlatency = \"2s..1s\"\n", "scenario.latency_invalid"),
        ("[[connections.payments]]\nfrom = \"0s\"\nstate = \"up\"\nfail = { \"503\" = 0.7, timeout = 0.6 }\n", "scenario.fraction_invalid"),
        ("[[connections.payments]]\nfrom = \"1h\"\nstate = \"up\"\n[[connections.payments]]\nfrom = \"1h\"\nstate = \"down\"\n", "scenario.timeline_order"),
        ("[[crash]]\nat = \"1h\"\nprocess = 3\n", "scenario.number_invalid"),
        ("seed = 1\n", "scenario.traffic_missing"),
    ];
    let mut all = String::new();
    for (src, code) in cases {
        let err = read(src).expect_err(src);
        assert!(err.contains(&format!("error[{code}]")), "{src}\n{err}");
        assert!(err.contains("--> s.toml:"), "a place: {err}");
        all.push_str(&format!("=== {code}\n{src}---\n{err}\n"));
    }
    // The whole text of each, as a user sees it: a change to a message, a
    // place or a caret shows in review.
    insta::assert_snapshot!("every_problem", all);
}

#[test]
fn the_messages_say_what_to_write() {
    let err = read("[[traffic]]\nevent = \"Paid\"\nrate = \"fast\"\nfor = \"1h\"\n").unwrap_err();
    assert_eq!(
        err,
        "error[scenario.rate_invalid]: `rate` is \"fast\": a count over a period, such as \"5000/min\", \"100/s\", \"20/h\" or \"1000/d\"\n --> s.toml:3:8\n  |\n3 | rate = \"fast\"\n  |        ^^^^^^\n"
    );
}

/// The examples of docs/simulate.md read against their app.
#[test]
fn the_examples_read() {
    let app = jadpo_lang::check(
        "app.jadpo",
        include_str!("../../../../../../examples/simulate/app.jadpo"),
    )
    .app
    .expect("the example app is valid");
    for (name, src) in [
        (
            "outage.toml",
            include_str!("../../../../../../examples/simulate/outage.toml"),
        ),
        (
            "week.toml",
            include_str!("../../../../../../examples/simulate/week.toml"),
        ),
    ] {
        if let Err(p) = parse(src, &app, Path::new(".")) {
            panic!("{name}: {p:?}");
        }
    }
}
