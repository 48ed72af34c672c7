//! `retry:` exactly as docs/retries.md states it: `attempts:` 1 to 100, `within:` more
//! than 0 and at most 30 days; anything else is `subscriber.retry_invalid`,
//! and a schedule with `retry:` is `schedule.retry_not_allowed`.

use jadpo_core::Budget;
use jadpo_lang::Code;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(86_400);

/// The subscriber's budget, or the codes of every diagnostic.
fn retry(block: &str) -> Result<Budget, Vec<Code>> {
    let src = format!(
        "event E {{ id: string }}\naction a(id: string)\nsubscriber s {{\n    on: E\n    run: a(event.id)\n    retry: {block}\n}}\n"
    );
    let checked = jadpo_lang::check("app.jadpo", &src);
    match checked.app {
        Some(app) => Ok(app.subscribers["s"].budget),
        None => Err(checked.diagnostics.iter().map(|d| d.code).collect()),
    }
}

/// Refused, and only ever with `subscriber.retry_invalid`.
fn refused(block: &str) {
    match retry(block) {
        Ok(b) => panic!("`retry: {block}` was accepted as {b:?}"),
        Err(codes) => assert!(
            codes.iter().all(|c| *c == Code::SubscriberRetryInvalid),
            "`retry: {block}` gave {codes:?}"
        ),
    }
}

fn accepted(block: &str) -> Budget {
    retry(block).unwrap_or_else(|codes| panic!("`retry: {block}` was refused: {codes:?}"))
}

#[test]
fn the_documented_example() {
    let b = accepted("{\n        attempts: 20\n        within: 3d\n    }");
    assert_eq!((b.attempts(), b.within()), (20, 3 * DAY));
    let b = accepted("{ attempts: 20  within: 3d }");
    assert_eq!((b.attempts(), b.within()), (20, 3 * DAY));
}

#[test]
fn attempts_1_is_the_lowest() {
    assert_eq!(accepted("{ attempts: 1 }").attempts(), 1);
}

#[test]
fn attempts_100_is_the_highest() {
    assert_eq!(accepted("{ attempts: 100 }").attempts(), Budget::MAX_ATTEMPTS);
}

#[test]
fn attempts_0_is_refused() {
    refused("{ attempts: 0 }");
}

#[test]
fn attempts_101_is_refused() {
    refused("{ attempts: 101 }");
}

#[test]
fn attempts_negative_is_refused() {
    refused("{ attempts: -1 }");
    refused("{ attempts: -20 }");
}

#[test]
fn attempts_not_whole_is_refused() {
    refused("{ attempts: 2.5 }");
    refused("{ attempts: 20.0 }");
}

#[test]
fn attempts_beyond_any_integer_is_refused() {
    refused("{ attempts: 4294967297 }");
    refused("{ attempts: 99999999999999999999999999999999999999999999 }");
}

#[test]
fn attempts_of_the_wrong_type_is_refused() {
    refused("{ attempts: \"20\" }");
    refused("{ attempts: true }");
    refused("{ attempts: 20s }");
    refused("{ attempts: [20] }");
    refused("{ attempts: twenty }");
}

#[test]
fn within_30d_is_the_longest() {
    assert_eq!(accepted("{ within: 30d }").within(), Budget::MAX_WITHIN);
    assert_eq!(accepted("{ within: 720h }").within(), 30 * DAY);
}

#[test]
fn within_31d_is_refused() {
    refused("{ within: 31d }");
}

#[test]
fn within_a_millisecond_over_30d_is_refused() {
    refused("{ within: 2592000001ms }");
    assert_eq!(accepted("{ within: 2592000000ms }").within(), 30 * DAY);
}

#[test]
fn within_0s_is_refused() {
    refused("{ within: 0s }");
    refused("{ within: 0d }");
}

#[test]
fn within_1ms_is_the_shortest() {
    assert_eq!(accepted("{ within: 1ms }").within(), Duration::from_millis(1));
}

#[test]
fn within_negative_is_refused() {
    refused("{ within: -1d }");
}

#[test]
fn within_not_whole_is_refused() {
    refused("{ within: 1.5d }");
}

#[test]
fn within_without_a_known_unit_is_refused() {
    refused("{ within: 3 }");
    refused("{ within: 3w }");
    refused("{ within: 3days }");
}

#[test]
fn within_of_the_wrong_type_is_refused() {
    refused("{ within: \"3d\" }");
    refused("{ within: false }");
}

#[test]
fn within_too_long_to_count_is_refused() {
    refused("{ within: 99999999999999999999d }");
    refused("{ within: 18446744073709551615d }");
}

#[test]
fn an_unknown_key_is_refused() {
    refused("{ attempts: 3  tries: 3 }");
    refused("{ max_attempts: 3 }");
}

#[test]
fn a_duplicate_key_is_refused() {
    refused("{ attempts: 3  attempts: 3 }");
    refused("{ within: 1d  within: 2d }");
}

#[test]
fn a_retry_that_is_not_an_object_is_refused() {
    refused("5");
    refused("\"{ attempts: 3 }\"");
    refused("[3, 1d]");
}

#[test]
fn every_fault_is_reported_at_once() {
    let codes = retry("{ attempts: 0  within: 31d  tries: 3  attempts: 4 }").unwrap_err();
    assert_eq!(codes, vec![Code::SubscriberRetryInvalid; 4]);
}

#[test]
fn a_key_left_out_keeps_its_default() {
    assert_eq!(accepted("{}"), Budget::DEFAULT);
    let b = accepted("{ attempts: 3 }");
    assert_eq!((b.attempts(), b.within()), (3, Budget::DEFAULT.within()));
    let b = accepted("{ within: 2h }");
    assert_eq!(
        (b.attempts(), b.within()),
        (Budget::DEFAULT.attempts(), Duration::from_secs(7200))
    );
}

#[test]
fn no_retry_is_the_default_budget() {
    let src = "event E { id: string }\naction a(id: string)\nsubscriber s { on: E run: a(event.id) }\n";
    let app = jadpo_lang::check("app.jadpo", src).app.unwrap();
    assert_eq!(app.subscribers["s"].budget, Budget::DEFAULT);
}

#[test]
fn a_schedule_with_retry_is_refused() {
    for block in ["{ attempts: 3 }", "{}", "5"] {
        let src = format!("action a()\nschedule t {{ every: 1h  run: a()  retry: {block} }}\n");
        let checked = jadpo_lang::check("app.jadpo", &src);
        let codes: Vec<Code> = checked.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(codes, vec![Code::ScheduleRetryNotAllowed], "retry: {block}");
    }
}
