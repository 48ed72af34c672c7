//! The operator commands (`emit`, `deliveries`, `retry`, `breakers`,
//! `migrate`, `completions`), run as the real binary against a real SQLite
//! file: each command, each error path with its exit code, and the shapes
//! of `--json`.

mod common;

use common::{by_id, seed_sqlite, seed_waiting_sqlite, Folder};
use serde_json::Value;

const PAYMENT: &str = r#"{"payment_id": "p1", "amount_cents": 100}"#;

#[test]
fn emit_prints_the_event_and_its_deliveries() {
    let f = Folder::with_app();
    let url = f.store_url();
    let run = f.run(&["emit", "PaymentReceived", PAYMENT, "--store", &url]);
    run.expect(0, None);
    assert_eq!(run.stdout(), "emitted PaymentReceived: event 1, 2 deliveries\n");

    let run = f.run(&["emit", "Ping", r#"{"id": "a"}"#, "--store", &url, "--json"]);
    let out = run.expect(0, None).json();
    assert_eq!(out["event_id"], 2);
    assert_eq!(out["deliveries"], 1);
    assert_eq!(out["delivery_ids"].as_array().unwrap().len(), 1);

    // The payload from stdin; the store from $JADPO_STORE.
    let run = f.run_with(
        &["emit", "Ping", "-", "--json"],
        &[("JADPO_STORE", &url)],
        Some(r#"{"id": "b"}"#),
    );
    assert_eq!(run.expect(0, None).json()["event_id"], 3);

    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    assert_eq!(list.as_array().unwrap().len(), 4);
    assert!(list.as_array().unwrap().iter().all(|d| d["state"] == "due"));
}

#[test]
fn emit_without_store_uses_the_default_sqlite_file() {
    let f = Folder::with_app();
    f.run(&["emit", "Ping", r#"{"id": "a"}"#]).expect(0, None);
    assert!(f.path().join(".jadpo/jadpo.db").is_file());
    let list = f.run(&["deliveries", "--json"]).json();
    assert_eq!(list[0]["event"], "Ping");
    assert_eq!(list[0]["subscriber"], "pinged");
}

#[test]
fn an_invalid_payload_names_its_field_and_exits_1() {
    let f = Folder::with_app();
    let url = f.store_url();
    let cases = [
        (r#"{"payment_id": "p1"}"#, "event.invalid", "amount_cents"),
        (
            r#"{"payment_id": "p1", "amount_cents": "100"}"#,
            "event.invalid",
            "amount_cents",
        ),
        (
            r#"{"payment_id": 7, "amount_cents": 100}"#,
            "event.invalid",
            "payment_id",
        ),
        (
            r#"{"payment_id": "p1", "amount_cents": 1, "note": "x"}"#,
            "event.invalid",
            "note",
        ),
        (r#"[1, 2]"#, "event.invalid", "JSON object"),
        (r#"{"payment_id": "#, "event.invalid", "not JSON"),
    ];
    for (payload, code, said) in cases {
        let run = f.run(&["emit", "PaymentReceived", payload, "--store", &url]);
        run.expect(1, Some(code));
        assert!(run.stderr().contains(said), "{payload}: {}", run.stderr());
        assert!(
            !run.stderr().contains("p1"),
            "the payload is never echoed: {}",
            run.stderr()
        );
    }
    let run = f.run(&["emit", "Refund", "{}", "--store", &url]);
    run.expect(1, Some("event.unknown"));
    assert!(run.stderr().contains("PaymentReceived"), "{}", run.stderr());

    let big = format!(r#"{{"id": "{}"}}"#, "x".repeat(300 * 1024));
    let run = f.run_with(&["emit", "Ping", "-", "--store", &url], &[], Some(&big));
    run.expect(1, Some("event.too_large"));

    // Nothing was written.
    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    assert_eq!(list, Value::Array(vec![]));
}

#[test]
fn a_bad_payload_is_refused_before_the_store_is_opened() {
    let f = Folder::with_app();
    let run = f.run(&["emit", "Ping", "{}", "--store", "postgres://nobody@127.0.0.1:1/none"]);
    run.expect(1, Some("event.invalid"));
}

#[test]
fn the_app_file_must_be_there_and_valid() {
    let f = Folder::empty();
    let url = f.store_url();
    let run = f.run(&["emit", "Ping", "{}", "--store", &url]);
    run.expect(2, Some("app.unreadable"));
    assert!(run.stderr().contains("app.jadpo"), "{}", run.stderr());
    f.run(&["emit", "Ping", "{}", "--store", &url, "--app", "other.jadpo"])
        .expect(2, Some("app.unreadable"));
    // A named app file must be readable even where the app is optional.
    f.run(&["deliveries", "--store", &url, "--app", "other.jadpo"])
        .expect(2, Some("app.unreadable"));
    f.run(&["breakers", "--store", &url, "--app", "other.jadpo"])
        .expect(2, Some("app.unreadable"));

    f.write("app.jadpo", "event E { id: strng }\nsubscriber s { on: F run: g() }\n");
    let run = f.run(&["emit", "E", r#"{"id": "a"}"#, "--store", &url]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(
        run.stderr().contains("app.jadpo:1:"),
        "diagnostics are shown: {}",
        run.stderr()
    );
    f.run(&["deliveries", "--store", &url]).expect(1, None);

    // Without an app file, listing and retrying by id still work.
    std::fs::remove_file(f.path().join("app.jadpo")).unwrap();
    f.run(&["deliveries", "--store", &url]).expect(0, None);
    f.run(&["breakers", "--store", &url]).expect(0, None);
    f.run(&["retry", "1", "--store", &url]).expect(1, None);
}

#[test]
fn bad_store_urls_exit_2_with_the_accepted_forms() {
    let f = Folder::with_app();
    for url in [
        "mysql://h/db",
        "sqlite:",
        "just-a-path.db",
        "postgres://u@h:notaport/db",
        "",
    ] {
        for args in [
            vec!["deliveries", "--store", url],
            vec!["emit", "Ping", r#"{"id": "a"}"#, "--store", url],
            vec!["migrate", "--store", url],
            vec!["breakers", "--store", url],
            vec!["retry", "1", "--store", url],
        ] {
            let run = f.run(&args);
            run.expect(2, Some("store.url_invalid"));
            assert!(run.stderr().contains("sqlite:PATH"), "{}", run.stderr());
            assert!(run.stderr().contains("postgres://"), "{}", run.stderr());
            assert!(!run.stderr().contains("panicked"), "{}", run.stderr());
        }
    }
    // From the environment too.
    let run = f.run_with(&["deliveries"], &[("JADPO_STORE", "redis://h")], None);
    run.expect(2, Some("store.url_invalid"));
}

#[test]
fn an_unreachable_store_exits_2() {
    let f = Folder::with_app();
    let run = f.run(&["deliveries", "--store", "postgres://nobody:hunter2@127.0.0.1:1/none"]);
    run.expect(2, Some("store.unavailable"));
    assert!(
        !run.stderr().contains("hunter2"),
        "the password is never shown: {}",
        run.stderr()
    );
    f.write("a-file", "");
    let url = format!("sqlite:{}", f.path().join("a-file/jadpo.db").display());
    f.run(&["migrate", "--store", &url])
        .expect(2, Some("store.unavailable"));
}

/// Whichever way a bad store URL carries its password, and whichever
/// command refuses it, the password is in neither stdout nor stderr; the
/// error code is the same as for any bad URL.
#[test]
fn a_bad_store_url_never_shows_its_password() {
    let f = Folder::with_app();
    for url in [
        // In the userinfo, the port not a number.
        "postgres://u:hunter2@127.0.0.1:notaport/db",
        // In the query, with an option the driver refuses.
        "postgres://u@127.0.0.1:5432/db?sslmode=bogus&password=hunter2",
        "postgres://u@127.0.0.1:5432/db?sslmode=bogus&PassWord=hunter2",
        // `/` and `?` in the password, raw as typed and percent-encoded.
        "postgres://u:hunter2/x?y@127.0.0.1:notaport/db",
        "postgres://u:hunter2%2Fx%3Fy@127.0.0.1:notaport/db",
        "postgres://u@127.0.0.1:5432/db?sslmode=bogus&password=hunter2%2Fx%3Fy%26z",
        // A raw `@` and `?` that make part of the password an option name
        // the driver would quote.
        "postgres://u:x@y?hunter2=1@127.0.0.1/db",
        // Not a URL at all: a key/value string, a mistyped scheme, an
        // unknown one.
        "host=127.0.0.1 password=hunter2",
        "postgres:u:hunter2@127.0.0.1/db",
        "mysql://root:hunter2@127.0.0.1/db",
    ] {
        for args in [
            vec!["deliveries", "--store", url],
            vec!["deliveries", "--store", url, "--json"],
            vec!["migrate", "--store", url],
            vec!["emit", "Ping", r#"{"id": "a"}"#, "--store", url],
        ] {
            let run = f.run(&args);
            run.expect(2, Some("store.url_invalid"));
            let (out, err) = (run.stdout(), run.stderr());
            assert!(
                !out.contains("hunter2") && !err.contains("hunter2"),
                "{args:?}:\n{out}\n{err}"
            );
            assert!(err.contains("***"), "the URL is shown, redacted: {err}");
        }
        let run = f.run_with(&["deliveries"], &[("JADPO_STORE", url)], None);
        run.expect(2, Some("store.url_invalid"));
        assert!(!run.stderr().contains("hunter2"), "{}", run.stderr());
    }
}

/// A URL given where clap wants something else (`--store` forgotten) is
/// echoed by clap's usage error, and `--help` shows `$JADPO_STORE`'s
/// value by default: neither shows the password.
#[test]
fn usage_errors_and_help_never_show_the_password() {
    let f = Folder::with_app();
    let url = "postgres://u:hunter2@127.0.0.1/db?password=hunter2";
    for args in [
        vec!["deliveries", url],
        vec!["migrate", url],
        vec!["deliveries", "show", url],
        vec!["serve", "app.jadpo", url],
    ] {
        let run = f.run(&args);
        assert_eq!(run.code(), 2, "{args:?}: {}", run.stderr());
        assert!(run.stderr().contains("u:***@"), "{args:?}: {}", run.stderr());
        assert!(!run.stderr().contains("hunter2"), "{args:?}: {}", run.stderr());
    }
    for cmd in ["deliveries", "migrate", "serve", "dev", "bench", "emit"] {
        let run = f.run_with(&[cmd, "--help"], &[("JADPO_STORE", url)], None);
        run.expect(0, None);
        assert!(run.stdout().contains("JADPO_STORE"), "{cmd}: {}", run.stdout());
        assert!(!run.stdout().contains("hunter2"), "{cmd}: {}", run.stdout());
    }
}

#[test]
fn bad_usage_exits_2() {
    let f = Folder::with_app();
    for args in [
        vec!["deliveries", "--no-such-flag"],
        vec!["deliveries", "--state", "sleeping"],
        vec!["deliveries", "--limit", "0"],
        vec!["deliveries", "show"],
        vec!["deliveries", "show", "abc"],
        vec!["deliveries", "--state", "held", "show", "1"],
        vec!["deliveries", "skip"],
        vec!["deliveries", "skip", "1", "--by", ""],
        vec!["deliveries", "--state", "failed", "skip", "1"],
        vec!["retry"],
        vec!["retry", "1", "--state", "failed"],
        vec!["retry", "--state", "due"],
        vec!["retry", "--subscriber", "x"],
        vec!["retry", "--state", "failed", "--spread", "3d"],
        vec!["emit", "Ping"],
        vec!["completions", "tcsh"],
        vec!["nonsense"],
    ] {
        let run = f.run(&args);
        assert_eq!(run.code(), 2, "{args:?}: {}", run.stderr());
    }
}

#[test]
fn every_command_and_flag_has_help() {
    let f = Folder::empty();
    let top = f.run(&["--help"]);
    top.expect(0, None);
    for cmd in [
        "check",
        "dev",
        "serve",
        "emit",
        "deliveries",
        "retry",
        "breakers",
        "alerts",
        "migrate",
        "completions",
        "bench",
    ] {
        assert!(top.stdout().contains(cmd), "{cmd} is listed");
    }
    for cmd in [
        vec!["emit"],
        vec!["deliveries"],
        vec!["deliveries", "show"],
        vec!["deliveries", "skip"],
        vec!["retry"],
        vec!["breakers"],
        vec!["alerts"],
        vec!["migrate"],
        vec!["completions"],
        vec!["bench"],
    ] {
        let mut args = cmd.clone();
        args.push("--help");
        let run = f.run(&args);
        run.expect(0, None);
        let help = run.stdout();
        // Every option line has a description after its name.
        let options = help.split("Options:").nth(1).unwrap_or("");
        for line in options.lines().filter(|l| l.trim_start().starts_with('-')) {
            let line = line.trim();
            let described = line.split("  ").filter(|p| !p.trim().is_empty()).count() > 1;
            let continued = options.contains(&format!("{line}\n          "));
            assert!(described || continued, "{cmd:?}: `{line}` has no help");
        }
    }
}

#[test]
fn completions_are_printed_for_each_shell() {
    let f = Folder::empty();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = f.run(&["completions", shell]);
        run.expect(0, None);
        assert!(run.stdout().contains("deliveries"), "{shell}");
        assert!(run.stdout().contains("retry"), "{shell}");
    }
}

#[test]
fn migrate_creates_the_tables_and_may_run_again() {
    let f = Folder::empty();
    let url = f.store_url();
    let run = f.run(&["migrate", "--store", &url]);
    run.expect(0, None);
    assert!(run.stdout().contains("migrated"), "{}", run.stdout());
    f.run(&["migrate", "--store", &url]).expect(0, None);
    f.run_with(&["migrate"], &[("JADPO_STORE", &url)], None).expect(0, None);
    assert!(f.path().join("jadpo.db").is_file());
}

#[test]
fn deliveries_json_has_every_field_and_held_ones() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    let all = list.as_array().unwrap();
    assert_eq!(all.len(), 10);
    let ids: Vec<i64> = all.iter().map(|d| d["id"].as_i64().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    for d in all {
        for field in [
            "id",
            "event_id",
            "event",
            "subscriber",
            "state",
            "attempts",
            "last_failure_code",
            "last_failure_kind",
            "held_connection",
            "held_since",
            "due_at",
            "finished_at",
            "skipped_by",
            "skipped_at",
        ] {
            assert!(d.get(field).is_some(), "{field} in {d}");
        }
        assert!(d.get("payload").is_none());
    }
    let rfc3339 = |v: &Value| {
        let s = v.as_str().unwrap_or_else(|| panic!("{v} is a time"));
        s.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("{s}: {e}"));
    };

    let held = by_id(&list, s.held);
    assert_eq!(held["state"], "held");
    assert_eq!(held["held_connection"], "payments");
    rfc3339(&held["held_since"]);
    assert_eq!(held["due_at"], Value::Null);
    assert_eq!(held["event"], "PaymentReceived");
    assert_eq!(held["event_id"], s.held_event.0);
    assert_eq!(held["attempts"], 0, "its attempt was given back");

    let failed = by_id(&list, s.failed);
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["attempts"], 1);
    assert_eq!(failed["last_failure_code"], "http.400");
    assert_eq!(failed["last_failure_kind"], "rejected");
    rfc3339(&failed["finished_at"]);
    assert_eq!(failed["held_connection"], Value::Null);

    let parked = by_id(&list, s.parked);
    assert_eq!(parked["state"], "parked");
    assert_eq!(parked["last_failure_kind"], "outcome_unknown");

    let retrying = by_id(&list, s.retrying[0]);
    assert_eq!(retrying["state"], "due");
    assert_eq!(retrying["last_failure_code"], "http.503");
    assert_eq!(retrying["last_failure_kind"], "unavailable");
    rfc3339(&retrying["due_at"]);
    assert_eq!(retrying["finished_at"], Value::Null);

    assert_eq!(by_id(&list, s.succeeded)["state"], "succeeded");
    assert_eq!(by_id(&list, s.due)["event"], "Ping");
}

#[test]
fn deliveries_filters() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let count = |args: &[&str]| {
        let mut all = vec!["deliveries", "--store", &url, "--json"];
        all.extend_from_slice(args);
        let run = f.run(&all);
        run.expect(0, None);
        run.json().as_array().unwrap().len()
    };
    assert_eq!(count(&["--state", "held"]), 1);
    assert_eq!(count(&["--state", "due"]), 6);
    assert_eq!(count(&["--state", "failed"]), 1);
    assert_eq!(count(&["--subscriber", "record"]), 6);
    assert_eq!(count(&["--subscriber", "record", "--state", "due"]), 5);
    assert_eq!(count(&["--event", &s.held_event.0.to_string()]), 1);
    assert_eq!(count(&["--limit", "3"]), 3);
    // With the app: every delivery whose subscriber may call the connection.
    assert_eq!(count(&["--connection", "payments"]), 6);
    assert_eq!(count(&["--connection", "payments", "--state", "held"]), 1);
    assert_eq!(count(&["--connection", "mailer"]), 4);
    assert_eq!(count(&["--connection", "mailer", "--subscriber", "audit"]), 2);
    assert_eq!(count(&["--connection", "payments", "--limit", "2"]), 2);
    assert_eq!(count(&["--connection", "nowhere"]), 0);

    // Without the app: only those held on it, with a note saying so.
    std::fs::remove_file(f.path().join("app.jadpo")).unwrap();
    assert_eq!(count(&["--connection", "payments"]), 1);
    let run = f.run(&["deliveries", "--store", &url, "--connection", "payments"]);
    assert!(run.stderr().contains("held on it"), "{}", run.stderr());
}

#[test]
fn deliveries_table_shows_every_column() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let run = f.run(&["deliveries", "--store", &url]);
    run.expect(0, None);
    let out = run.stdout();
    let header = out.lines().next().unwrap();
    for col in [
        "ID",
        "SUBSCRIBER",
        "EVENT",
        "STATE",
        "ATTEMPTS",
        "LAST FAILURE",
        "WHEN",
        "HELD ON",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let held = out.lines().find(|l| l.starts_with(&format!("{} ", s.held))).unwrap();
    assert!(
        held.contains("held since") && held.trim_end().ends_with("payments"),
        "{held}"
    );
    let failed = out.lines().find(|l| l.starts_with(&format!("{} ", s.failed))).unwrap();
    assert!(
        failed.contains("http.400 (rejected)") && failed.contains("finished"),
        "{failed}"
    );

    let run = f.run(&["deliveries", "--store", &url, "--limit", "2"]);
    assert!(run.stderr().contains("--limit"), "{}", run.stderr());
    let run = f.run(&["deliveries", "--store", &url, "--state", "running"]);
    assert_eq!(run.stdout(), "no deliveries match\n");
}

/// A delivery kept from starting by a connection's `concurrency:` is due,
/// and every listing says what it waits for; it is neither held nor
/// charged an attempt.
#[test]
fn deliveries_show_what_a_waiting_delivery_waits_for() {
    let f = Folder::with_app();
    let url = f.store_url();
    let (running, waiting) = seed_waiting_sqlite(&url);
    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    let w = by_id(&list, waiting);
    assert_eq!(w["state"], "due");
    assert_eq!(w["attempts"], 0);
    assert_eq!(w["waiting_on"], "mailer");
    assert_eq!(w["waiting_for"], "slot");
    assert_eq!(w["held_connection"], Value::Null);
    let r = by_id(&list, running);
    assert_eq!(r["state"], "running");
    assert_eq!((&r["waiting_on"], &r["waiting_for"]), (&Value::Null, &Value::Null));

    let run = f.run(&["deliveries", "--store", &url]);
    run.expect(0, None);
    let line = run
        .stdout()
        .lines()
        .find(|l| l.starts_with(&format!("{waiting} ")))
        .unwrap()
        .to_owned();
    assert!(
        line.contains("due ") && line.contains("waits for a slot on mailer"),
        "{line}"
    );

    let run = f.run(&["deliveries", "show", &waiting.0.to_string(), "--store", &url]);
    run.expect(0, None);
    assert!(
        run.stdout().contains("waiting       waits for a slot on mailer"),
        "{}",
        run.stdout()
    );
}

#[test]
fn deliveries_show_lists_the_attempts() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let id = s.failed.0.to_string();
    let one = f.run(&["deliveries", "show", &id, "--store", &url, "--json"]).json();
    assert_eq!(one["id"], s.failed.0);
    assert_eq!(one["state"], "failed");
    let history = one["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["attempt"], 1);
    assert_eq!(history[0]["code"], "http.400");
    assert_eq!(history[0]["kind"], "rejected");
    assert_eq!(history[0]["state"], "failed");
    assert!(history[0]["started_at"].is_string() && history[0]["ended_at"].is_string());

    let run = f.run(&["deliveries", "show", &id, "--store", &url]);
    run.expect(0, None);
    let out = run.stdout();
    assert!(out.contains("http.400 (rejected)"), "{out}");
    assert!(out.contains("ATTEMPT") && out.contains("KIND"), "{out}");

    // The shared flags may come before `show`.
    let held = f
        .run(&["deliveries", "--store", &url, "show", &s.held.0.to_string()])
        .stdout();
    assert!(held.contains("held on") && held.contains("payments"), "{held}");

    f.run(&["deliveries", "show", "9999", "--store", &url])
        .expect(1, Some("delivery.not_found"));
}

#[test]
fn retry_by_id_retries_failed_and_parked_and_says_why_others_are_skipped() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let (failed, parked, ok) = (
        s.failed.0.to_string(),
        s.parked.0.to_string(),
        s.succeeded.0.to_string(),
    );
    let run = f.run(&["retry", &failed, &parked, &ok, "9999", "--store", &url]);
    run.expect(1, None);
    let out = run.stdout();
    assert!(out.contains("retried 2 deliveries"), "{out}");
    assert!(out.contains(&format!("skipped {ok}: is succeeded")), "{out}");
    assert!(out.contains("skipped 9999: no such delivery"), "{out}");

    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    for id in [s.failed, s.parked] {
        let d = by_id(&list, id);
        assert_eq!(d["state"], "due");
        assert_eq!(d["attempts"], 0, "a fresh budget");
    }
    assert_eq!(by_id(&list, s.succeeded)["state"], "succeeded");

    // All retried: exit 0, JSON.
    let f2 = Folder::with_app();
    let url2 = f2.store_url();
    let s2 = seed_sqlite(&url2);
    let run = f2.run(&["retry", &s2.failed.0.to_string(), "--store", &url2, "--json"]);
    let out = run.expect(0, None).json();
    assert_eq!(out["retried"], serde_json::json!([s2.failed.0]));
    assert_eq!(out["skipped"], serde_json::json!([]));
    assert_eq!(out["dry_run"], false);
}

#[test]
fn skip_by_id_records_who_and_says_why_others_are_not_skipped() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let (failed, parked, ok) = (
        s.failed.0.to_string(),
        s.parked.0.to_string(),
        s.succeeded.0.to_string(),
    );
    let run = f.run(&[
        "deliveries",
        "skip",
        &failed,
        &ok,
        "9999",
        "--by",
        "ana",
        "--store",
        &url,
    ]);
    run.expect(1, None);
    let out = run.stdout();
    assert!(
        out.contains(&format!("skipped 1 delivery: {failed} (by ana; nothing was called)")),
        "{out}"
    );
    assert!(
        out.contains(&format!("not skipped {ok}: is succeeded: only failed and parked")),
        "{out}"
    );
    assert!(out.contains("not skipped 9999: no such delivery"), "{out}");
    let shown = f.run(&["deliveries", "show", &failed, "--store", &url]);
    let text = shown.expect(0, None).stdout();
    assert!(text.contains("skipped by ana at"), "{text}");
    let again = f.run(&["deliveries", "skip", &failed, "--store", &url]);
    assert!(
        again.expect(1, None).stdout().contains("already skipped by ana"),
        "{}",
        again.stdout()
    );

    let run = f.run(&["deliveries", "skip", &parked, "--by", "bo", "--store", &url, "--json"]);
    let out = run.expect(0, None).json();
    assert_eq!(out["skipped"], serde_json::json!([s.parked.0]));
    assert_eq!(out["by"], "bo");
    assert_eq!(out["not_skipped"], serde_json::json!([]));
    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    let d = by_id(&list, s.parked);
    assert_eq!(
        (&d["state"], &d["skipped_by"]),
        (&serde_json::json!("parked"), &serde_json::json!("bo"))
    );
    let at = d["skipped_at"].as_str().expect("a time");
    at.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("{at}: {e}"));
    assert_eq!(by_id(&list, s.succeeded)["skipped_by"], Value::Null);
}

#[test]
fn retry_by_state_with_a_dry_run_first() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let run = f.run(&["retry", "--state", "failed", "--dry-run", "--store", &url, "--json"]);
    let out = run.expect(0, None).json();
    assert_eq!(out["dry_run"], true);
    assert_eq!(out["retried"], serde_json::json!([s.failed.0]));
    let run = f.run(&["retry", "--state", "failed", "--dry-run", "--store", &url]);
    assert!(run.stdout().contains("would retry 1 delivery"), "{}", run.stdout());
    assert!(
        run.stdout().contains("LAST FAILURE") && run.stdout().contains("http.400 (rejected)"),
        "{}",
        run.stdout()
    );
    let list = f.run(&["deliveries", "--store", &url, "--json"]).json();
    assert_eq!(by_id(&list, s.failed)["state"], "failed", "a dry run changes nothing");

    // Filtered to another subscriber or connection: nothing.
    let run = f.run(&["retry", "--state", "failed", "--subscriber", "record", "--store", &url]);
    assert!(run.expect(0, None).stdout().contains("nothing to retry"));
    let run = f.run(&[
        "retry",
        "--state",
        "failed",
        "--connection",
        "payments",
        "--store",
        &url,
    ]);
    assert!(run.expect(0, None).stdout().contains("nothing to retry"));
    f.run(&["retry", "--state", "failed", "--connection", "nowhere", "--store", &url])
        .expect(1, Some("connection.unknown"));

    let run = f.run(&[
        "retry",
        "--state",
        "failed",
        "--connection",
        "mailer",
        "--spread",
        "0s",
        "--store",
        &url,
    ]);
    assert!(
        run.expect(0, None).stdout().contains("retried 1 delivery"),
        "{}",
        run.stdout()
    );
    let run = f.run(&["retry", "--state", "parked", "--store", &url, "--json"]);
    assert_eq!(run.expect(0, None).json()["retried"], serde_json::json!([s.parked.0]));
    let list = f
        .run(&["deliveries", "--store", &url, "--json", "--state", "due"])
        .json();
    assert_eq!(list.as_array().unwrap().len(), 8);

    // --connection needs the app.
    std::fs::remove_file(f.path().join("app.jadpo")).unwrap();
    f.run(&["retry", "--state", "failed", "--connection", "mailer", "--store", &url])
        .expect(2, Some("app.unreadable"));
}

#[test]
fn a_bulk_retry_spreads_its_deliveries_over_the_window() {
    let f = Folder::with_app();
    let url = f.store_url();
    // 600 failed deliveries: more than one chunk.
    let ids = common::block_on(async {
        use jadpo_store::Store;
        let store = jadpo_store::sqlite::SqliteStore::open(&url).await.unwrap();
        let now = common::now();
        let events: Vec<_> = (0..600)
            .map(|_| jadpo_store::NewEvent {
                name: "Ping".into(),
                payload: r#"{"id":"x"}"#.into(),
                subscribers: vec!["pinged".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect();
        store.emit(&events, now).await.unwrap();
        let mut routes = jadpo_store::Routes::new();
        routes.insert(
            "pinged",
            jadpo_store::Route {
                budget: jadpo_core::Budget::DEFAULT,
                connections: vec![],
            },
        );
        let claimed = store
            .claim(&jadpo_store::ClaimRequest {
                worker: "t",
                routes: &routes,
                now,
                limit: 1000,
                lease: std::time::Duration::from_secs(60),
            })
            .await
            .unwrap()
            .claimed;
        let batch: Vec<_> = claimed
            .iter()
            .map(|c| jadpo_store::Finish {
                claimed: None,
                ..c.finish(
                    jadpo_core::Outcome::Failed(jadpo_core::FailureRecord::new(
                        "x.defect",
                        jadpo_core::FailureKind::InternalFault,
                    )),
                    now,
                    now,
                )
            })
            .collect();
        store.finish_batch(&batch).await.unwrap();
        claimed.len()
    });
    assert_eq!(ids, 600);
    let before = common::now();
    let run = f.run(&["retry", "--state", "failed", "--spread", "10m", "--store", &url]);
    assert!(
        run.expect(0, None).stdout().contains("retried 600 deliveries"),
        "{}",
        run.stdout()
    );
    let list = f
        .run(&["deliveries", "--store", &url, "--json", "--limit", "1000"])
        .json();
    let due: Vec<i64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["state"], "due");
            let t: jiff::Timestamp = d["due_at"].as_str().unwrap().parse().unwrap();
            t.as_millisecond() - before.as_millis()
        })
        .collect();
    let (min, max) = (*due.iter().min().unwrap(), *due.iter().max().unwrap());
    assert!(min >= -1_000 && max <= 600_000 + 60_000, "{min}..{max}");
    assert!(
        max - min > 60_000,
        "spread over the window, not all at once: {min}..{max}"
    );
}

#[test]
fn breakers_show_each_connection() {
    let f = Folder::with_app();
    let url = f.store_url();
    let s = seed_sqlite(&url);
    let list = f.run(&["breakers", "--store", &url, "--json"]).json();
    let all = list.as_array().unwrap();
    assert_eq!(all.len(), 2, "{list:#}");
    for b in all {
        for field in [
            "connection",
            "state",
            "consecutive_unavailable",
            "opened_at",
            "pause_ms",
            "probe_delivery",
            "held",
            "alert_raised",
        ] {
            assert!(b.get(field).is_some(), "{field} in {b}");
        }
    }
    let payments = all.iter().find(|b| b["connection"] == "payments").unwrap();
    assert_eq!(payments["state"], "open");
    assert_eq!(payments["consecutive_unavailable"], 5);
    assert_eq!(payments["held"], 1);
    assert_eq!(payments["pause_ms"], 60_000);
    assert_eq!(payments["alert_raised"], false);
    assert_eq!(payments["probe_delivery"], Value::Null);
    assert!(payments["opened_at"]
        .as_str()
        .unwrap()
        .parse::<jiff::Timestamp>()
        .is_ok());
    let mailer = all.iter().find(|b| b["connection"] == "mailer").unwrap();
    assert_eq!(mailer["state"], "closed");
    assert_eq!(mailer["opened_at"], Value::Null);

    let run = f.run(&["breakers", "--store", &url]);
    let out = run.expect(0, None).stdout();
    let line = out.lines().find(|l| l.starts_with("payments")).unwrap();
    assert!(line.contains("open") && line.contains("1m"), "{line}");
    let _ = s;

    // A connection of the app with no row yet shows as closed.
    let f2 = Folder::with_app();
    let url2 = f2.store_url();
    let list = f2.run(&["breakers", "--store", &url2, "--json"]).json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["connection"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mailer", "payments"]);
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b["state"] == "closed" && b["held"] == 0));
    // Without the app, only the store's rows.
    std::fs::remove_file(f2.path().join("app.jadpo")).unwrap();
    assert_eq!(
        f2.run(&["breakers", "--store", &url2, "--json"]).json(),
        Value::Array(vec![])
    );
}

/// A start refused for a bad setting prints the error once, with its code
/// once, exits 2, and leaves nothing behind: no store file, no start line.
#[test]
fn a_start_refused_for_a_bad_secret_creates_and_logs_nothing() {
    let f = Folder::empty();
    f.write(
        "app.jadpo",
        "connection p {\n    driver: http\n    base_url: \"http://127.0.0.1:9\"\n    signing_secret: env(\"SIGN\")\n}\n",
    );
    for cmd in [
        vec!["dev", "--port", "0"],
        vec!["serve", "--store", "postgres://nobody@127.0.0.1:1/none", "--port", "0"],
    ] {
        let run = f.run_with(
            &cmd,
            &[
                ("SIGN", "whsec_not base64!"),
                ("JADPO_API_TOKEN", "test-token-0123456789abcdef012345"),
            ],
            None,
        );
        assert_eq!(run.code(), 2, "{cmd:?}: {}", run.stderr());
        let stderr = run.stderr();
        assert_eq!(
            stderr.matches("connection.signing_secret_invalid").count(),
            1,
            "{cmd:?}: {stderr}"
        );
        assert!(
            stderr.starts_with("error[connection.signing_secret_invalid]: connection `p`"),
            "{stderr}"
        );
        assert!(!stderr.contains(".started"), "{cmd:?}: {stderr}");
        assert!(!f.path().join(".jadpo").exists(), "{cmd:?}: the store was created");
    }
}

/// `jadpo emit --idempotency-key`: sent again, the first event and nothing
/// made; another payload under the key, refused.
#[test]
fn emit_with_an_idempotency_key_makes_one_event() {
    let f = Folder::with_app();
    let url = f.store_url();
    let args = |payload: &'static str| {
        vec![
            "emit",
            "Ping",
            payload,
            "--store",
            url.as_str(),
            "--idempotency-key",
            "k-1",
            "--json",
        ]
    };
    let first = f.run(&args(r#"{"id": "a"}"#));
    first.expect(0, None);
    let again = f.run(&args(r#"{"id": "a"}"#));
    again.expect(0, None);
    assert_eq!(again.json()["duplicate"], true);
    assert_eq!(again.json()["event_id"], first.json()["event_id"]);
    assert_eq!(again.json()["public_id"], first.json()["public_id"]);
    f.run(&args(r#"{"id": "b"}"#))
        .expect(1, Some("event.idempotency_conflict"));
    let long = "k".repeat(256);
    f.run(&[
        "emit",
        "Ping",
        r#"{"id": "a"}"#,
        "--store",
        &url,
        "--idempotency-key",
        &long,
    ])
    .expect(1, Some("event.idempotency_key_invalid"));
}

#[test]
fn alerts_lists_none_on_a_new_store() {
    let f = Folder::empty();
    let url = f.store_url();
    let run = f.run(&["alerts", "--store", &url]);
    run.expect(0, None);
    assert_eq!(run.stdout(), "no alerts raised\n");
    let run = f.run(&["alerts", "--store", &url, "--json"]);
    assert_eq!(run.expect(0, None).json(), serde_json::json!([]));
    f.run(&["alerts", "--store", &url, "--limit", "0"]).expect(2, None);
}

/// `jadpo emit --traceparent`: the event joins that trace, which
/// `deliveries show` names; a malformed one is refused with its code.
#[test]
fn emit_with_a_traceparent_keeps_the_trace() {
    let f = Folder::with_app();
    let url = f.store_url();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let emitted = f.run(&[
        "emit",
        "Ping",
        r#"{"id": "a"}"#,
        "--store",
        &url,
        "--traceparent",
        traceparent,
        "--tracestate",
        "rojo=1",
        "--json",
    ]);
    emitted.expect(0, None);
    let id = emitted.json()["delivery_ids"][0].to_string();
    let shown = f.run(&["deliveries", "show", &id, "--store", &url, "--json"]);
    assert_eq!(
        shown.expect(0, None).json()["trace_id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let plain = f.run(&["emit", "Ping", r#"{"id": "b"}"#, "--store", &url, "--json"]);
    let id = plain.expect(0, None).json()["delivery_ids"][0].to_string();
    let shown = f.run(&["deliveries", "show", &id, "--store", &url, "--json"]);
    assert_eq!(shown.expect(0, None).json()["trace_id"], serde_json::Value::Null);
    let emit = |extra: &[&str]| {
        let mut args = vec!["emit", "Ping", r#"{"id": "c"}"#, "--store", url.as_str()];
        args.extend_from_slice(extra);
        f.run(&args)
    };
    emit(&["--traceparent", "00-abc"]).expect(1, Some("event.traceparent_invalid"));
    emit(&["--traceparent", traceparent, "--tracestate", "not a list"]).expect(1, Some("event.tracestate_invalid"));
    emit(&["--tracestate", "rojo=1"]).expect(2, None);
}

/// `jadpo healthcheck`: 0 for a 200, 1 `healthcheck.unhealthy` for another
/// answer, 2 `healthcheck.unreachable` when nothing answers.
#[test]
fn healthcheck_says_healthy_unhealthy_or_unreachable_by_its_exit() {
    use jadpo_runtime::provider::{Behaviour, TestProvider};
    let f = Folder::empty();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let provider = rt.block_on(TestProvider::start());
    let url = format!("{}/healthz", provider.url());
    provider.set(Behaviour::Up);
    let ok = f.run(&["healthcheck", "--url", &url]);
    ok.expect(0, None);
    assert!(ok.stdout().contains("200"), "{}", ok.stdout());
    provider.set(Behaviour::Down);
    f.run(&["healthcheck", "--url", &url])
        .expect(1, Some("healthcheck.unhealthy"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = format!("http://{}/healthz", closed.local_addr().unwrap());
    drop(closed);
    f.run(&["healthcheck", "--url", &nobody])
        .expect(2, Some("healthcheck.unreachable"));
    for bad in ["", "..", "127.0.0.1:7420/healthz", "ftp://127.0.0.1/healthz", "http://"] {
        f.run(&["healthcheck", "--url", bad])
            .expect(2, Some("healthcheck.url_invalid"));
    }
}

/// `deliveries --key` lists a keyed subscriber's deliveries of one key,
/// newest first, and `show` prints the key; `emit` refuses a key that
/// cannot be one with `event.key_invalid` and exit 1.
#[test]
fn deliveries_are_found_by_their_key() {
    let f = Folder::empty();
    f.write(
        "app.jadpo",
        &common::APP.replace(
            "subscriber pinged { on: Ping  run: notify(event.id) }",
            "subscriber pinged { on: Ping  run: notify(event.id)  key: event.id }",
        ),
    );
    let url = f.store_url();
    for id in ["c-42", "c-7", "c-42"] {
        f.run(&["emit", "Ping", &format!(r#"{{"id": "{id}"}}"#), "--store", &url])
            .expect(0, None);
    }
    let list = f
        .run(&["deliveries", "--store", &url, "--key", "c-42", "--json"])
        .json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|d| d["key"] == "c-42" && d["subscriber"] == "pinged"));
    assert!(list[0]["id"].as_i64() > list[1]["id"].as_i64(), "newest first");
    let id = list[0]["id"].to_string();
    let shown = f.run(&["deliveries", "show", &id, "--store", &url]);
    assert!(
        shown.expect(0, None).stdout().contains("  key           c-42\n"),
        "{}",
        shown.stdout()
    );
    f.run(&["deliveries", "show", &id, "--key", "c-42", "--store", &url])
        .expect(2, Some("cli.usage"));
    let run = f.run(&["emit", "Ping", r#"{"id": ""}"#, "--store", &url]);
    run.expect(1, Some("event.key_invalid"));
    assert!(run.stderr().contains("`event.id`"), "{}", run.stderr());
}

/// `retry --state failed --key K` retries that key's deliveries only.
#[test]
fn a_bulk_retry_takes_one_keys_deliveries() {
    let f = Folder::with_app();
    let url = f.store_url();
    let ids = common::seed_failed_keyed_sqlite(&url, &["c-42", "c-7", "c-42"]);
    let run = f.run(&["retry", "--state", "failed", "--key", "c-42", "--store", &url, "--json"]);
    run.expect(0, None);
    let state = |id: &jadpo_core::DeliveryId| {
        let shown = f.run(&["deliveries", "show", &id.0.to_string(), "--store", &url, "--json"]);
        shown.json()["state"].as_str().unwrap().to_owned()
    };
    assert_eq!(state(&ids[0]), "due");
    assert_eq!(state(&ids[2]), "due");
    assert_eq!(state(&ids[1]), "failed", "another key's is left");
    let without_state = f.run(&["retry", "--key", "c-7", "--store", &url]);
    assert_eq!(without_state.code(), 2, "{}", without_state.stderr());
    assert_eq!(state(&ids[1]), "failed");
}

/// `order: fifo`: the second delivery of a key is `queued`, listed as
/// such, and `deliveries show` says which delivery it waits for.
#[test]
fn a_queued_delivery_shows_what_it_waits_for() {
    let f = Folder::empty();
    let app = common::APP.replace(
        "subscriber pinged { on: Ping  run: notify(event.id) }",
        "subscriber pinged { on: Ping  run: notify(event.id)  key: event.id  order: fifo }",
    );
    f.write("app.jadpo", &app);
    let url = f.store_url();
    let ids: Vec<i64> = (0..2)
        .map(|_| {
            let run = f.run(&["emit", "Ping", r#"{"id": "c-42"}"#, "--store", &url, "--json"]);
            run.expect(0, None).json()["delivery_ids"][0].as_i64().unwrap()
        })
        .collect();
    let queued = f
        .run(&["deliveries", "--state", "queued", "--store", &url, "--json"])
        .expect(0, None)
        .json();
    assert_eq!(queued.as_array().map(|a| a.len()), Some(1), "{queued:#}");
    assert_eq!(queued[0]["id"], ids[1]);
    let shown = f.run(&["deliveries", "show", &ids[1].to_string(), "--store", &url]);
    let text = shown.expect(0, None).stdout();
    let says = format!("waits for delivery {}, earlier for key c-42", ids[0]);
    assert!(text.contains(&says), "{text}");
    assert!(text.contains("queued"), "{text}");
}
