//! A connection's `rate:` and `concurrency:`: what each becomes, and every
//! way to get one wrong (`connection.rate_invalid`,
//! `connection.concurrency_invalid`).

use jadpo_core::limit::{Limits, Rate};
use jadpo_lang::{Code, Connection};
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// The connection `pay` with `settings` in its block, or the codes of every
/// diagnostic.
fn connection(settings: &str) -> Result<Connection, Vec<Code>> {
    let src = format!("connection pay {{\n    base_url: env(\"PAY_URL\")\n    {settings}\n}}\n");
    let checked = jadpo_lang::check("app.jadpo", &src);
    match checked.app {
        Some(mut app) => Ok(app.connections.remove("pay").expect("the connection `pay`")),
        None => Err(checked.diagnostics.iter().map(|d| d.code).collect()),
    }
}

fn accepted(settings: &str) -> Connection {
    connection(settings).unwrap_or_else(|codes| panic!("`{settings}` was refused: {codes:?}"))
}

/// Refused with exactly one diagnostic, of `code`.
fn refused(settings: &str, code: Code) {
    match connection(settings) {
        Ok(c) => panic!("`{settings}` was accepted as {:?}", c.limits()),
        Err(codes) => assert_eq!(codes, vec![code], "`{settings}`"),
    }
}

fn rate(n: u32, per: Duration) -> Option<Rate> {
    Some(Rate::new(n, per).unwrap())
}

/// The one message of a refused file.
fn message(settings: &str) -> String {
    let src = format!("connection pay {{ base_url: env(\"PAY_URL\")  {settings} }}\n");
    let checked = jadpo_lang::check("app.jadpo", &src);
    assert_eq!(checked.diagnostics.len(), 1, "{:?}", checked.diagnostics);
    checked.diagnostics[0].message.clone()
}

#[test]
fn no_limits_by_default() {
    let c = accepted("");
    assert_eq!((c.rate, c.concurrency), (None, None));
    assert_eq!(c.limits(), Limits::default());
    assert!(c.limits().is_none());
}

#[test]
fn rate_per_second() {
    assert_eq!(accepted("rate: 50/s").rate, rate(50, SECOND));
}

#[test]
fn rate_per_minute() {
    assert_eq!(accepted("rate: 600/min").rate, rate(600, MINUTE));
}

#[test]
fn rate_per_hour() {
    assert_eq!(accepted("rate: 1/h").rate, rate(1, HOUR));
}

#[test]
fn rate_may_have_spaces_around_its_slash() {
    assert_eq!(accepted("rate: 50 / s").rate, rate(50, SECOND));
    assert_eq!(accepted("rate: 50/ min").rate, rate(50, MINUTE));
    assert_eq!(accepted("rate: 50 /h").rate, rate(50, HOUR));
}

#[test]
fn rate_at_its_bounds() {
    assert_eq!(accepted("rate: 10000/s").rate, rate(10_000, SECOND));
    assert_eq!(accepted("rate: 600000/min").rate, rate(600_000, MINUTE));
    refused("rate: 600001/min", Code::ConnectionRateInvalid);
    refused("rate: 10001/s", Code::ConnectionRateInvalid);
}

#[test]
fn rate_alone_leaves_concurrency_unlimited() {
    let c = accepted("rate: 50/s");
    assert_eq!(c.concurrency, None);
    assert_eq!(
        c.limits(),
        Limits {
            rate: rate(50, SECOND),
            concurrency: None
        }
    );
}

#[test]
fn concurrency_alone_leaves_the_rate_unlimited() {
    let c = accepted("concurrency: 10");
    assert_eq!((c.rate, c.concurrency), (None, Some(10)));
}

#[test]
fn concurrency_at_its_bounds() {
    assert_eq!(accepted("concurrency: 1").concurrency, Some(1));
    assert_eq!(
        accepted("concurrency: 10000").concurrency,
        Some(Connection::MAX_CONCURRENCY)
    );
}

#[test]
fn both_settings_together() {
    let c = accepted("rate: 50/s\n    concurrency: 10");
    assert_eq!(
        c.limits(),
        Limits {
            rate: rate(50, SECOND),
            concurrency: Some(10)
        }
    );
    // On one line, in either order, with the other settings.
    let c = accepted("concurrency: 10, rate: 50/s  timeout: 5s  retry: { attempts: 3 }");
    assert_eq!(c.limits(), accepted("rate: 50/s  concurrency: 10").limits());
    assert_eq!((c.timeout, c.attempts), (5 * SECOND, 3));
}

#[test]
fn a_rate_before_the_next_entry_ends_at_its_unit() {
    let c = accepted("rate: 50/s\n    timeout: 5s");
    assert_eq!((c.rate, c.timeout), (rate(50, SECOND), 5 * SECOND));
}

#[test]
fn rate_of_zero_is_refused() {
    refused("rate: 0/s", Code::ConnectionRateInvalid);
    refused("rate: 0/h", Code::ConnectionRateInvalid);
}

#[test]
fn rate_without_a_unit_is_refused() {
    refused("rate: 50", Code::ConnectionRateInvalid);
    refused("rate: 50s", Code::ConnectionRateInvalid);
    refused("rate: 50/", Code::ConnectionRateInvalid);
    refused("rate: 50/\n    concurrency: 5", Code::ConnectionRateInvalid);
}

#[test]
fn rate_with_an_unknown_unit_is_refused() {
    refused("rate: 50/day", Code::ConnectionRateInvalid);
    refused("rate: 50/m", Code::ConnectionRateInvalid);
    refused("rate: 50/ms", Code::ConnectionRateInvalid);
    refused("rate: 50/sec", Code::ConnectionRateInvalid);
    refused("rate: 50/1h", Code::ConnectionRateInvalid);
    refused("rate: 50/S", Code::ConnectionRateInvalid);
}

#[test]
fn rate_over_10000_a_second_is_refused() {
    refused("rate: 20000/s", Code::ConnectionRateInvalid);
    refused("rate: 4294967296/h", Code::ConnectionRateInvalid);
    refused(
        "rate: 99999999999999999999999999999999999999999999/h",
        Code::ConnectionRateInvalid,
    );
}

#[test]
fn rate_in_quotes_is_refused() {
    refused("rate: \"50/s\"", Code::ConnectionRateInvalid);
}

#[test]
fn rate_of_the_wrong_kind_is_refused() {
    refused("rate: -5/s", Code::ConnectionRateInvalid);
    refused("rate: 2.5/s", Code::ConnectionRateInvalid);
    refused("rate: 5s/min", Code::ConnectionRateInvalid);
    refused("rate: fast", Code::ConnectionRateInvalid);
    refused("rate: { n: 50 }", Code::ConnectionRateInvalid);
    refused("rate: true", Code::ConnectionRateInvalid);
}

#[test]
fn rate_messages_give_the_form_and_the_bounds() {
    let takes = "`rate:` takes calls per unit, as in `rate: 50/s` (units s, min, h), at least 1 an hour and at most 10000 a second";
    for (settings, why) in [
        ("rate: 0/s", "`0/s` is refused: a rate is at least 1 call per unit"),
        ("rate: 50", "`50` has no unit: write `50/s`, `50/min` or `50/h`"),
        ("rate: 50/day", "`day` is not a unit of a rate in `50/day`"),
        (
            "rate: 50/m",
            "`m` is not a unit of a rate in `50/m`; write `min` for a minute",
        ),
        ("rate: 20000/s", "`20000/s` is refused: at most 10000 calls a second"),
        (
            "rate: \"50/s\"",
            "found the string \"50/s\": write the rate without quotes",
        ),
        ("rate: 50/", "`50/` has no unit after the `/`"),
        ("rate: 2.5/s", "`2.5` is not a whole number of calls"),
    ] {
        assert_eq!(message(settings), format!("{takes}; {why}"), "{settings}");
    }
}

#[test]
fn concurrency_of_zero_is_refused() {
    refused("concurrency: 0", Code::ConnectionConcurrencyInvalid);
}

#[test]
fn concurrency_over_10000_is_refused() {
    refused("concurrency: 10001", Code::ConnectionConcurrencyInvalid);
    refused(
        "concurrency: 99999999999999999999999999999999999999999999",
        Code::ConnectionConcurrencyInvalid,
    );
}

#[test]
fn concurrency_in_quotes_is_refused() {
    refused("concurrency: \"5\"", Code::ConnectionConcurrencyInvalid);
}

#[test]
fn concurrency_of_the_wrong_kind_is_refused() {
    refused("concurrency: -1", Code::ConnectionConcurrencyInvalid);
    refused("concurrency: 2.5", Code::ConnectionConcurrencyInvalid);
    refused("concurrency: 5s", Code::ConnectionConcurrencyInvalid);
    refused("concurrency: 5/s", Code::ConnectionConcurrencyInvalid);
    refused("concurrency: true", Code::ConnectionConcurrencyInvalid);
}

#[test]
fn concurrency_messages_give_the_range() {
    assert_eq!(
        message("concurrency: 0"),
        "`concurrency:` takes a whole number from 1 to 10000, not `0`"
    );
    assert_eq!(
        message("concurrency: \"5\""),
        "`concurrency:` takes a whole number from 1 to 10000, not the string \"5\""
    );
}

#[test]
fn a_setting_given_twice_is_refused() {
    refused("rate: 50/s  rate: 60/s", Code::NameDuplicate);
    refused("concurrency: 5  concurrency: 6", Code::NameDuplicate);
}

#[test]
fn a_misspelt_setting_is_suggested() {
    refused("rates: 50/s", Code::KeyUnknown);
    assert!(message("concurency: 5").contains("did you mean `concurrency:`?"));
}

#[test]
fn both_faults_are_reported_at_once() {
    assert_eq!(
        connection("rate: 0/s  concurrency: 0").unwrap_err(),
        vec![Code::ConnectionRateInvalid, Code::ConnectionConcurrencyInvalid]
    );
}

#[test]
fn a_slash_anywhere_else_is_refused() {
    // A rate is a value only where a rate is taken.
    assert_eq!(connection("timeout: 5/s").unwrap_err(), vec![Code::DurationInvalid]);
    let src = "connection c { base_url: \"https://c\" }\naction a() { call c.post(\"/\", body: 5/s) }\n";
    let codes: Vec<Code> = jadpo_lang::check("app.jadpo", src)
        .diagnostics
        .iter()
        .map(|d| d.code)
        .collect();
    assert_eq!(codes, vec![Code::CallArgumentsInvalid]);
    // A `/` with no number before it is not a value at all.
    assert_eq!(connection("rate: /s").unwrap_err(), vec![Code::ParseSyntax]);
    let src = "connection ops { base_url: \"https://ops\" }\nalerts { connection: ops  path: /jadpo/alerts }\n";
    let checked = jadpo_lang::check("app.jadpo", src);
    let messages: Vec<&str> = checked.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        messages,
        vec![
            "expected a value, found `/`; text goes in double quotes (`\"/jadpo/alerts\"`), and a rate starts with its number (`50/s`)"
        ]
    );
}
