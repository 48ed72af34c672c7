//! The `alerts` block: what a valid one becomes, and each way it is refused.
//! The rendered messages are in the `alerts_*` snapshots of diagnostics.rs.

use jadpo_lang::{AlertRoute, App, Code, Diagnostic};

const CONNS: &str =
    "connection ops { base_url: \"https://ops.example\" }\nconnection payments { base_url: env(\"PAYMENTS_URL\") }\n";

fn app(src: &str) -> App {
    let checked = jadpo_lang::check("app.jadpo", src);
    match checked.app {
        Some(app) => app,
        None => panic!("refused:\n{}", checked.render(src)),
    }
}

fn diagnostics(src: &str) -> Vec<Diagnostic> {
    let checked = jadpo_lang::check("app.jadpo", src);
    assert!(checked.app.is_none(), "accepted:\n{src}");
    checked.diagnostics
}

fn codes(src: &str) -> Vec<Code> {
    diagnostics(src).iter().map(|d| d.code).collect()
}

/// The one diagnostic `src` gets, checked to have `code`.
fn only(src: &str, code: Code) -> Diagnostic {
    let mut diags = diagnostics(src);
    assert_eq!(diags.iter().map(|d| d.code).collect::<Vec<_>>(), vec![code], "{src}");
    diags.remove(0)
}

fn route(connection: &str, path: &str) -> Option<AlertRoute> {
    Some(AlertRoute {
        connection: connection.to_string(),
        path: path.to_string(),
    })
}

#[test]
fn an_alerts_block_routes_to_its_connection_and_path() {
    let app = app(&format!(
        "{CONNS}alerts {{\n    connection: ops\n    path: \"/jadpo/alerts\"\n}}\n"
    ));
    assert_eq!(app.alerts, route("ops", "/jadpo/alerts"));
}

#[test]
fn alerts_may_come_before_their_connection_and_sit_on_one_line() {
    let app = app(&format!(
        "alerts {{ connection: ops, path: \"/hooks/jadpo?team=ops\" }}\n{CONNS}"
    ));
    assert_eq!(app.alerts, route("ops", "/hooks/jadpo?team=ops"));
}

#[test]
fn without_an_alerts_block_there_is_no_route_and_the_summary_is_unchanged() {
    let without = app(CONNS);
    assert_eq!(without.alerts, None);
    let with = app(&format!("{CONNS}alerts {{ connection: ops  path: \"/a\" }}\n"));
    assert_eq!(with.summary(), without.summary());
    assert_eq!(
        without.summary(),
        "0 events, 2 connections, 0 actions, 0 subscribers, 0 schedules"
    );
}

#[test]
fn alerts_without_a_connection_is_refused() {
    let src = format!("{CONNS}alerts {{ path: \"/jadpo/alerts\" }}\n");
    let d = only(&src, Code::KeyMissing);
    assert!(d.message.contains("`alerts` needs `connection:`"), "{}", d.message);
    assert_eq!(&src[d.span.start..d.span.end], "alerts", "points at the keyword");
}

#[test]
fn alerts_without_a_path_is_refused() {
    let d = only(&format!("{CONNS}alerts {{ connection: ops }}\n"), Code::KeyMissing);
    assert!(d.message.contains("`alerts` needs `path:`"), "{}", d.message);
}

#[test]
fn an_empty_alerts_block_reports_both_missing_keys() {
    assert_eq!(codes(&format!("{CONNS}alerts {{}}\n")), vec![Code::KeyMissing; 2]);
}

#[test]
fn an_unknown_connection_suggests_a_close_name() {
    let d = only(
        &format!("{CONNS}alerts {{ connection: opps  path: \"/a\" }}\n"),
        Code::AlertsConnectionUnknown,
    );
    assert_eq!(d.message, "no connection is named `opps`; did you mean `ops`?");
}

#[test]
fn an_unknown_connection_names_the_connections_there_are() {
    let d = only(
        &format!("{CONNS}alerts {{ connection: pager  path: \"/a\" }}\n"),
        Code::AlertsConnectionUnknown,
    );
    assert_eq!(
        d.message,
        "no connection is named `pager`; the app's connections are `ops` and `payments`"
    );
}

#[test]
fn an_unknown_connection_in_an_app_without_connections_says_to_declare_one() {
    let d = only(
        "alerts { connection: pager  path: \"/a\" }\n",
        Code::AlertsConnectionUnknown,
    );
    assert!(d.message.contains("the app declares none"), "{}", d.message);
}

#[test]
fn a_long_list_of_connections_is_cut_short() {
    let conns: String = (0..20)
        .map(|i| format!("connection c{i:02} {{ base_url: \"https://x\" }}\n"))
        .collect();
    let d = only(
        &format!("{conns}alerts {{ connection: pager  path: \"/a\" }}\n"),
        Code::AlertsConnectionUnknown,
    );
    assert!(d.message.ends_with("`c07` and 12 others"), "{}", d.message);
}

#[test]
fn a_connection_in_quotes_is_the_wrong_kind_of_value() {
    only(
        &format!("{CONNS}alerts {{ connection: \"ops\"  path: \"/a\" }}\n"),
        Code::ValueInvalid,
    );
}

#[test]
fn a_path_not_starting_with_a_slash_is_refused() {
    let d = only(
        &format!("{CONNS}alerts {{ connection: ops  path: \"jadpo/alerts\" }}\n"),
        Code::AlertsPathInvalid,
    );
    assert!(d.message.contains("write \"/jadpo/alerts\""), "{}", d.message);
    for path in ["\"\"", "\"https://ops.example/a\"", "5", "env(\"ALERT_PATH\")"] {
        let src = format!("{CONNS}alerts {{ connection: ops  path: {path} }}\n");
        assert_eq!(codes(&src), vec![Code::AlertsPathInvalid], "path: {path}");
    }
}

#[test]
fn a_path_with_placeholders_or_spaces_is_refused() {
    for path in ["/alerts/{id}", "/alerts/}", "/jadpo alerts", "/a\\tb"] {
        let src = format!("{CONNS}alerts {{ connection: ops  path: \"{path}\" }}\n");
        assert_eq!(codes(&src), vec![Code::AlertsPathInvalid], "path: {path}");
    }
}

#[test]
fn a_second_alerts_block_is_refused_where_it_starts() {
    let src =
        format!("{CONNS}alerts {{ connection: ops  path: \"/a\" }}\nalerts {{ connection: payments  path: \"/b\" }}\n");
    let d = only(&src, Code::AlertsDuplicate);
    assert_eq!(d.span.start, src.rfind("alerts {").unwrap());
    assert!(d.message.contains("already declared on line 3"), "{}", d.message);
}

#[test]
fn a_second_alerts_block_is_checked_too() {
    let src =
        format!("{CONNS}alerts {{ connection: ops  path: \"/a\" }}\nalerts {{ connection: pager  path: \"b\" }}\n");
    assert_eq!(
        codes(&src),
        vec![
            Code::AlertsDuplicate,
            Code::AlertsConnectionUnknown,
            Code::AlertsPathInvalid
        ]
    );
}

#[test]
fn an_unknown_setting_is_refused_with_the_keys_there_are() {
    let d = only(
        &format!("{CONNS}alerts {{ connection: ops  path: \"/a\"  method: post }}\n"),
        Code::KeyUnknown,
    );
    assert!(
        d.message
            .contains("`alerts` has no key `method:`; it takes `connection:` and `path:`"),
        "{}",
        d.message
    );
}

#[test]
fn a_misspelt_key_is_unknown_and_its_key_missing() {
    let d = diagnostics(&format!("{CONNS}alerts {{ conection: ops  path: \"/a\" }}\n"));
    let codes: Vec<Code> = d.iter().map(|d| d.code).collect();
    assert_eq!(codes, vec![Code::KeyMissing, Code::KeyUnknown]);
    assert!(d[1].message.contains("did you mean `connection:`?"), "{}", d[1].message);
}

#[test]
fn a_setting_given_twice_is_a_duplicate() {
    let src = format!("{CONNS}alerts {{ connection: ops  path: \"/a\"  path: \"/b\" }}\n");
    assert_eq!(codes(&src), vec![Code::NameDuplicate]);
}

#[test]
fn a_name_after_alerts_is_a_syntax_error_and_the_block_is_still_read() {
    let src = format!("{CONNS}alerts ops {{ connection: pager  path: \"/a\" }}\n");
    assert_eq!(codes(&src), vec![Code::ParseSyntax, Code::AlertsConnectionUnknown]);
}

#[test]
fn a_forgotten_brace_before_alerts_is_reported_once_and_alerts_still_parses() {
    let src = "connection ops { base_url: \"https://x\"\nalerts { connection: opps  path: \"/a\" }\n";
    assert_eq!(codes(src), vec![Code::ParseSyntax, Code::AlertsConnectionUnknown]);
}

#[test]
fn alerts_without_a_block_does_not_swallow_the_next_item() {
    let src = format!("alerts\n{CONNS}subscriber s {{ on: Nope  run: x() }}\n");
    assert_eq!(
        codes(&src),
        vec![
            Code::ParseSyntax,
            Code::SubscriberEventUnknown,
            Code::SubscriberActionUnknown
        ]
    );
}

#[test]
fn alerts_is_still_a_name_for_other_blocks_and_keys() {
    let app = app(
        "event alerts { alerts: string }\nconnection alerts { base_url: \"https://a\" }\n\
         action alerts(alerts: string) { call alerts.post(\"/{alerts}\") }\n\
         subscriber alerts { on: alerts  run: alerts(event.alerts) }\n\
         alerts { connection: alerts  path: \"/alerts\" }\n",
    );
    assert_eq!(app.alerts, route("alerts", "/alerts"));
    assert_eq!(app.events["alerts"].fields[0].name, "alerts");
}
