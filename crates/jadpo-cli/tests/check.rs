//! `jadpo check`, run as the real binary.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/payments/app.jadpo");

const INVALID: &str = "event E { id: strng }\nsubscriber s { on: F run: g() }\n";

fn jadpo(args: &[&str], cwd: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jadpo"));
    cmd.args(args).env_remove("NO_COLOR");
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd.output().expect("jadpo runs")
}

/// A fresh folder for one test, holding `app.jadpo` when `app` is given.
fn folder(name: &str, app: Option<&str>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jadpo-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(src) = app {
        std::fs::write(dir.join("app.jadpo"), src).unwrap();
    }
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[test]
fn the_example_passes_with_one_summary_line() {
    let out = jadpo(&["check", EXAMPLE], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1);
    assert!(
        stdout.ends_with(": ok: 2 events, 4 connections, 6 actions, 5 subscribers, 1 schedule\n"),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn an_invalid_app_exits_1_with_every_diagnostic() {
    let dir = folder("invalid", Some(INVALID));
    let out = jadpo(&["check", "app.jadpo"], Some(&dir));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("error[").count(), 3, "{stderr}");
    for code in ["type.unknown", "subscriber.event_unknown", "subscriber.action_unknown"] {
        assert!(stderr.contains(&format!("error[{code}]")), "{stderr}");
    }
    assert!(stderr.contains(" --> app.jadpo:1:15\n"), "{stderr}");
    assert!(stderr.contains("1 | event E { id: strng }\n"), "{stderr}");
    assert!(stderr.ends_with("app.jadpo: 3 errors\n"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "no colour when not a terminal");
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn the_app_defaults_to_app_jadpo_in_the_current_folder() {
    let dir = folder("default", Some(&std::fs::read_to_string(EXAMPLE).unwrap()));
    let out = jadpo(&["check"], Some(&dir));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("app.jadpo: ok: "));
}

#[test]
fn a_missing_file_exits_2_with_the_path_and_the_reason() {
    let dir = folder("missing", None);
    let out = jadpo(&["check"], Some(&dir));
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error[app.unreadable]: cannot read `app.jadpo`: "),
        "{stderr}"
    );
    assert!(stderr.contains("No such file or directory"), "{stderr}");
}

#[test]
fn a_folder_is_unreadable_too() {
    let dir = folder("dir", None);
    let out = jadpo(&["check", dir.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(dir.to_str().unwrap()));
}

fn json(out: &Output) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    v.as_array().expect("an array").clone()
}

#[test]
fn json_lists_every_diagnostic_with_its_position() {
    let dir = folder("json", Some(INVALID));
    let out = jadpo(&["check", "--format", "json"], Some(&dir));
    assert_eq!(out.status.code(), Some(1));
    let list = json(&out);
    assert_eq!(list.len(), 3);
    for d in &list {
        let obj = d.as_object().unwrap();
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["code", "column", "end_column", "end_line", "file", "line", "message"]
        );
        assert_eq!(d["file"], "app.jadpo");
        assert!(d["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    assert_eq!(list[0]["code"], "type.unknown");
    assert_eq!(
        (
            &list[0]["line"],
            &list[0]["column"],
            &list[0]["end_line"],
            &list[0]["end_column"]
        ),
        (&Value::from(1), &Value::from(15), &Value::from(1), &Value::from(20))
    );
    assert_eq!(list[1]["code"], "subscriber.event_unknown");
    assert_eq!(
        (&list[1]["line"], &list[1]["column"]),
        (&Value::from(2), &Value::from(20))
    );
}

#[test]
fn json_of_a_valid_app_is_an_empty_array() {
    let out = jadpo(&["check", EXAMPLE, "--format", "json"], None);
    assert_eq!(out.status.code(), Some(0));
    assert!(json(&out).is_empty());
}

#[test]
fn json_of_an_unreadable_file_exits_2() {
    let dir = folder("json-missing", None);
    let out = jadpo(&["check", "--format=json", "nope.jadpo"], Some(&dir));
    assert_eq!(out.status.code(), Some(2));
    let list = json(&out);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["code"], "app.unreadable");
    assert_eq!(list[0]["file"], "nope.jadpo");
    assert!(list[0]["line"].is_null());
}

#[test]
fn bad_arguments_are_refused_by_the_parser() {
    for args in [&["check", "--bogus"][..], &["check", "--format", "xml"], &["chek"], &[]] {
        let out = jadpo(args, None);
        assert!(!out.status.success(), "{args:?}");
        assert_ne!(out.status.code(), Some(0));
        assert!(
            text(&out.stderr).contains("Usage") || text(&out.stderr).starts_with("error:"),
            "{args:?}"
        );
    }
}
