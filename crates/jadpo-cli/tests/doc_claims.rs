//! Claims of docs/cli.md that were once false, each pinned by running the
//! real binary the way the docs tell a user to.

mod common;

use common::Folder;
use std::net::TcpListener;

/// An app `dev` and `serve` can start without any Rust code.
const PROCESS_APP: &str = r#"
event Ping { id: string }
connection hook { base_url: "http://127.0.0.1:9" }
action notify(id: string) { call hook.post("/ping/{id}", body: event) }
subscriber pinged { on: Ping  run: notify(event.id) }
"#;

/// A token `serve` takes: 32 characters or more.
const TOKEN: &str = "doc-claims-token-0123456789abcdef";

fn process_folder() -> Folder {
    let f = Folder::empty();
    f.write("app.jadpo", PROCESS_APP);
    f
}

#[test]
fn an_empty_jadpo_store_is_unset_for_every_command() {
    let f = Folder::with_app();
    let default_db = f.path().join(".jadpo/jadpo.db");
    for empty in ["", "  ", "\t"] {
        let env = [("JADPO_STORE", empty)];
        for args in [
            &["emit", "Ping", r#"{"id": "e"}"#][..],
            &["deliveries"],
            &["deliveries", "--json"],
            &["breakers"],
            &["alerts"],
            &["migrate"],
            &["retry", "--state", "failed"],
        ] {
            f.run_with(args, &env, None).expect(0, None);
        }
        assert!(default_db.is_file(), "the default store was used");
    }
    // Typed on the command line, an empty URL is still a mistake.
    f.run(&["deliveries", "--store", ""])
        .expect(2, Some("store.url_invalid"));
}

#[test]
fn dev_and_serve_take_an_empty_jadpo_store_as_unset() {
    let f = process_folder();
    // Held, so that dev stops at binding after it opened its store: a
    // finished run with no server left behind.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let run = f.run_with(&["dev", "--port", &port], &[("JADPO_STORE", "")], None);
    run.expect(2, Some("api.bind_failed"));
    assert!(f.path().join(".jadpo/jadpo.db").is_file(), "{}", run.stderr());
    let run = f.run_with(
        &["serve", "--port", &port],
        &[("JADPO_STORE", " "), ("JADPO_API_TOKEN", TOKEN)],
        None,
    );
    run.expect(2, Some("serve.store_missing"));
}

#[test]
fn an_app_file_with_errors_is_app_invalid_exit_1() {
    let f = Folder::empty();
    f.write("app.jadpo", "event E { id: strng }\nsubscriber s { on: F run: g() }\n");
    let env = [("JADPO_API_TOKEN", TOKEN)];
    for args in [
        &["deliveries"][..],
        &["deliveries", "show", "1"],
        &["emit", "E", r#"{"id": "a"}"#],
        &["breakers"],
        &["retry", "1"],
        &["dev", "--port", "0"],
        &["serve", "--port", "0", "--store", "sqlite:s.db"],
    ] {
        let run = f.run_with(args, &env, None);
        run.expect(1, Some("app.invalid"));
        let err = run.stderr();
        assert!(err.contains("error[app.invalid]: the app file has "), "{args:?}: {err}");
        assert!(err.contains("error[type.unknown]"), "its diagnostics: {err}");
        assert_eq!(run.stdout(), "", "{args:?}");
    }
}

#[test]
fn show_takes_no_filter_before_or_after_it() {
    let f = Folder::with_app();
    let url = f.store_url();
    f.run(&["emit", "Ping", r#"{"id": "a"}"#, "--store", &url])
        .expect(0, None);
    for args in [
        &["deliveries", "show", "1", "--state", "due"][..],
        &["deliveries", "--state", "due", "show", "1"],
        &["deliveries", "show", "1", "--subscriber", "pinged"],
        &["deliveries", "show", "1", "--connection", "mailer"],
        &["deliveries", "show", "1", "--event", "1"],
        &["deliveries", "show", "1", "--before", "9"],
        &["deliveries", "--limit", "100", "show", "1"],
        &["deliveries", "show", "1", "--limit", "5"],
    ] {
        let mut args = args.to_vec();
        args.extend(["--store", &url]);
        f.run(&args).expect(2, Some("cli.usage"));
    }
    // The shared flags still go on either side.
    for args in [
        &["deliveries", "show", "1", "--json", "--store", &url][..],
        &["deliveries", "--json", "--store", &url, "show", "1"],
    ] {
        assert_eq!(f.run(args).expect(0, None).json()["id"], 1, "{args:?}");
    }
}

#[test]
fn the_limit_note_says_more_match_only_when_they_do() {
    let f = Folder::with_app();
    let url = f.store_url();
    for id in ["a", "b", "c"] {
        f.run(&["emit", "Ping", &format!(r#"{{"id": "{id}"}}"#), "--store", &url])
            .expect(0, None);
    }
    let list = |extra: &[&str]| {
        let mut args = vec!["deliveries", "--store", &url];
        args.extend(extra);
        f.run(&args)
    };
    for exact in [&["--limit", "3"][..], &["--limit", "4"], &[]] {
        let run = list(exact);
        run.expect(0, None);
        assert_eq!(run.stderr(), "", "{exact:?}: every match was listed");
        let run = list(&[exact, &["--json"][..]].concat());
        assert_eq!(run.expect(0, None).json().as_array().unwrap().len(), 3);
        assert_eq!(run.stderr(), "", "{exact:?} --json");
    }
    let run = list(&["--limit", "2"]);
    run.expect(0, None);
    assert_eq!(run.stdout().lines().count(), 3, "a header and two rows");
    assert!(
        run.stderr().contains("--limit 2") && run.stderr().contains("--before 2"),
        "{}",
        run.stderr()
    );
    // With --json the note is on stderr and stdout stays one JSON array.
    let run = list(&["--limit", "2", "--json"]);
    let ids: Vec<i64> = run
        .expect(0, None)
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [3, 2]);
    assert!(run.stderr().contains("--before 2"), "{}", run.stderr());
    // The page it names holds the rest, and says nothing more.
    let run = list(&["--limit", "2", "--before", "2", "--json"]);
    assert_eq!(run.expect(0, None).json().as_array().unwrap().len(), 1);
    assert_eq!(run.stderr(), "");
}

#[test]
fn a_bulk_retry_says_it_stopped_at_its_limit_only_when_more_match() {
    let f = Folder::with_app();
    let url = f.store_url();
    common::seed_failed_sqlite(&url, 2);
    let retry = |extra: &[&str]| {
        let mut args = vec!["retry", "--state", "failed", "--dry-run", "--store", &url];
        args.extend(extra);
        f.run(&args)
    };
    for json in [&[][..], &["--json"]] {
        let exact = retry(&[&["--limit", "2"][..], json].concat());
        exact.expect(0, None);
        assert!(!exact.stdout().contains("stopped at"), "{}", exact.stdout());
        assert_eq!(exact.stderr(), "");
    }
    let run = retry(&["--limit", "1"]);
    assert!(run
        .expect(0, None)
        .stdout()
        .contains("(stopped at --limit 1; run again for more)"));
    let run = retry(&["--limit", "1", "--json"]);
    assert_eq!(run.expect(0, None).json()["retried"].as_array().unwrap().len(), 1);
    assert!(run.stderr().contains("stopped at --limit 1"), "{}", run.stderr());
}

/// The rule of docs/security.md: 1 to 255 bytes of visible ASCII, space
/// included; a tab or a letter outside ASCII is not.
const GOOD_KEYS: [&str; 3] = ["c d", "order-1001", "!~"];
const BAD_KEYS: [&str; 3] = ["é", "c\td", ""];

#[test]
fn emit_takes_the_idempotency_keys_http_takes() {
    let f = Folder::with_app();
    let url = f.store_url();
    let emit = |key: &str| {
        f.run(&[
            "emit",
            "Ping",
            r#"{"id": "a"}"#,
            "--store",
            &url,
            "--idempotency-key",
            key,
        ])
    };
    for key in GOOD_KEYS {
        emit(key).expect(0, None);
    }
    for key in BAD_KEYS {
        emit(key).expect(1, Some("event.idempotency_key_invalid"));
    }
}

#[test]
fn http_takes_the_idempotency_keys_emit_takes() {
    use std::io::{BufRead, Read, Write};
    let f = process_folder();
    // Port 0, and the port read from its own log: no other process can
    // take it between choosing and binding.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_jadpo"))
        .args(["dev", "--port", "0"])
        .current_dir(f.path())
        .env_remove("JADPO_STORE")
        .env_remove("JADPO_API_TOKEN")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(child.stderr.take().unwrap());
    let port: u16 = loop {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "dev exited before it listened");
        if let Some(addr) = line.split("api.listening addr=").nth(1) {
            break addr.trim().rsplit(':').next().unwrap().parse().unwrap();
        }
    };
    let post = |key: &[u8]| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let body = br#"{"id": "a"}"#;
        let mut req = format!(
            "POST /events/Ping HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\nIdempotency-Key: ",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(key);
        req.extend_from_slice(b"\r\n\r\n");
        req.extend_from_slice(body);
        s.write_all(&req).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let out = String::from_utf8_lossy(&out).into_owned();
        let status: u16 = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, out)
    };
    let results: Vec<_> = GOOD_KEYS
        .iter()
        .chain(&BAD_KEYS[..2])
        .map(|k| (*k, post(k.as_bytes())))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    for (key, (status, out)) in results {
        if GOOD_KEYS.contains(&key) {
            assert_eq!(status, 202, "{key:?}: {out}");
        } else {
            assert_eq!(status, 400, "{key:?}: {out}");
            assert!(out.contains("event.idempotency_key_invalid"), "{key:?}: {out}");
        }
    }
}

#[test]
fn a_start_that_fails_on_its_store_logs_no_started() {
    let f = process_folder();
    for (store, code) in [
        ("postgres://nobody@127.0.0.1:1/none", "store.unavailable"),
        ("mysql://h/db", "store.url_invalid"),
    ] {
        let run = f.run(&["dev", "--port", "0", "--store", store]);
        run.expect(2, Some(code));
        assert!(!run.stderr().contains("dev.started"), "{}", run.stderr());
        let run = f.run_with(
            &["serve", "--port", "0", "--store", store],
            &[("JADPO_API_TOKEN", TOKEN)],
            None,
        );
        run.expect(2, Some(code));
        assert!(!run.stderr().contains("serve.started"), "{}", run.stderr());
    }
}

/// docs/system-tables.md documents every column: each of a migrated SQLite
/// store's `jadpo_*` tables has a `### \`NAME\`` section naming each column.
#[test]
fn system_tables_md_names_every_column() {
    let f = Folder::empty();
    let url = f.store_url();
    f.run(&["migrate", "--store", &url]).expect(0, None);
    let columns: Vec<(String, Vec<String>)> = common::block_on(async {
        let store = jadpo_store::sqlite::SqliteStore::open(&url).await.unwrap();
        store
            .transaction(|tx| -> Result<_, jadpo_store::StoreError> {
                let names = |sql: &str, col: usize| -> Vec<String> {
                    let mut stmt = tx.prepare(sql).unwrap();
                    let rows = stmt.query_map([], |r| r.get::<_, String>(col)).unwrap();
                    rows.map(Result::unwrap).collect()
                };
                let tables = names(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'jadpo%' ORDER BY name",
                    0,
                );
                Ok(tables
                    .into_iter()
                    .map(|t| {
                        let cols = names(&format!("PRAGMA table_info({t})"), 1);
                        (t, cols)
                    })
                    .collect())
            })
            .await
            .unwrap()
    });
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/system-tables.md")).unwrap();
    assert!(columns.iter().any(|(t, _)| t == "jadpo_events"));
    let mut missing = Vec::new();
    for (table, cols) in &columns {
        let heading = format!("### `{table}`\n");
        let Some(start) = doc.find(&heading) else {
            missing.push(format!("{table} (no section)"));
            continue;
        };
        let section = &doc[start + heading.len()..];
        let section = &section[..section.find("\n### ").unwrap_or(section.len())];
        missing.extend(
            cols.iter()
                .filter(|c| !section.contains(&format!("`{c}`")))
                .map(|c| format!("{table}.{c}")),
        );
    }
    assert!(missing.is_empty(), "undocumented in docs/system-tables.md: {missing:?}");
}
