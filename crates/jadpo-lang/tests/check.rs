//! What a valid file becomes, and the checks across blocks: the connections
//! each action may call, cycles, `event` inside actions, time limits.

use jadpo_lang::{ActionBody, App, Code, Expr, Method, PathPart, Statement, Trigger, Value};
use std::collections::BTreeSet;
use std::time::Duration;

fn app(src: &str) -> App {
    let checked = jadpo_lang::check("app.jadpo", src);
    match checked.app {
        Some(app) => app,
        None => panic!("refused:\n{}", checked.render(src)),
    }
}

fn codes(src: &str) -> Vec<Code> {
    let checked = jadpo_lang::check("app.jadpo", src);
    assert!(checked.app.is_none(), "accepted:\n{src}");
    checked.diagnostics.iter().map(|d| d.code).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

const CONNS: &str = "connection a { base_url: \"https://a\" }\nconnection b { base_url: \"https://b\" }\nconnection c { base_url: \"https://c\" }\nconnection d { base_url: \"https://d\" }\n";

#[test]
fn connections_are_an_actions_own_and_those_of_what_it_runs() {
    let app = app(&format!(
        "{CONNS}
        action leaf() {{ call a.get(\"/\") }}
        action mid() {{ call b.post(\"/\") run leaf() }}
        action top() {{ run mid() run rust() }}
        action rust() uses c, d
        action alone() {{ call a.get(\"/\") call a.put(\"/\") }}
        action nothing()
        "
    ));
    let conns = |n: &str| app.actions[n].connections().clone();
    assert_eq!(conns("leaf"), set(&["a"]));
    assert_eq!(conns("mid"), set(&["a", "b"]));
    assert_eq!(conns("top"), set(&["a", "b", "c", "d"]));
    assert_eq!(conns("rust"), set(&["c", "d"]));
    assert_eq!(conns("alone"), set(&["a"]));
    assert_eq!(conns("nothing"), set(&[]));
}

#[test]
fn a_diamond_reaches_every_connection_once() {
    let app = app(&format!(
        "{CONNS}
        action top() {{ run left() run right() }}
        action left() {{ call a.get(\"/\") run bottom() }}
        action right() {{ call b.get(\"/\") run bottom() }}
        action bottom() {{ call c.get(\"/\") }}
        "
    ));
    assert_eq!(app.actions["top"].connections(), &set(&["a", "b", "c"]));
}

#[test]
fn declaration_order_does_not_matter() {
    let app = app(&format!(
        "action top() {{ run leaf() }}\naction leaf() {{ call a.get(\"/\") }}\n{CONNS}"
    ));
    assert_eq!(app.actions["top"].connections(), &set(&["a"]));
}

#[test]
fn an_action_running_itself_is_a_cycle() {
    assert_eq!(codes("action a() { run a() }"), vec![Code::ActionCycle]);
}

#[test]
fn two_actions_running_each_other_are_a_cycle() {
    assert_eq!(
        codes("action a() { run b() }\naction b() { run a() }"),
        vec![Code::ActionCycle]
    );
}

#[test]
fn a_cycle_below_a_valid_action_is_reported_once() {
    let src = "action top() { run x() }\naction x() { run y() }\naction y() { run z() }\naction z() { run x() }";
    assert_eq!(codes(src), vec![Code::ActionCycle]);
    let checked = jadpo_lang::check("app.jadpo", src);
    assert!(checked.diagnostics[0].message.contains("x → y → z → x"));
}

#[test]
fn running_the_same_action_twice_is_not_a_cycle() {
    app("action a() { run b() run b() }\naction b()");
}

#[test]
fn event_fields_used_inside_actions_are_checked_for_each_subscribers_event() {
    let base = "event A { id: string  total: int }\nevent B { id: string }\nconnection c { base_url: \"https://c\" }\naction inner() { call c.post(\"/\", body: event.total) }\naction outer() { run inner() }\n";
    app(&format!("{base}subscriber s {{ on: A run: outer() }}"));
    let got = codes(&format!(
        "{base}subscriber s {{ on: A run: outer() }}\nsubscriber t {{ on: B run: outer() }}"
    ));
    assert_eq!(got, vec![Code::EventFieldUnknown]);
    // Many subscribers on the same event and action: reported once.
    let many: String = (0..50)
        .map(|i| format!("subscriber t{i} {{ on: B run: outer() }}\n"))
        .collect();
    assert_eq!(codes(&format!("{base}{many}")), vec![Code::EventFieldUnknown]);
}

#[test]
fn a_field_inside_an_object_field_is_not_checked_but_a_field_of_a_string_is_refused() {
    let base = "event A { customer: object  id: string }\naction f(x: string)\n";
    app(&format!("{base}subscriber s {{ on: A run: f(event.customer.email) }}"));
    assert_eq!(
        codes(&format!("{base}subscriber s {{ on: A run: f(event.id.x) }}")),
        vec![Code::EventFieldUnknown]
    );
}

#[test]
fn a_schedule_cannot_reach_an_action_using_the_event() {
    let src = "connection c { base_url: \"https://c\" }\naction inner() { call c.post(\"/\", body: event) }\naction outer() { run inner() }\nschedule n { every: 1h run: outer() }";
    assert_eq!(codes(src), vec![Code::ScheduleEventUnavailable]);
    assert_eq!(
        codes("action f(x: string)\nschedule n { every: 1h run: f(event.id) }"),
        vec![Code::CallArgumentsInvalid]
    );
}

#[test]
fn run_timeout_is_at_most_15m() {
    let sub = |t: &str| format!("event E {{ id: string }}\naction a()\nsubscriber s {{ on: E run: a() timeout: {t} }}");
    assert_eq!(app(&sub("15m")).subscribers["s"].timeout, Duration::from_secs(900));
    assert_eq!(app(&sub("1ms")).subscribers["s"].timeout, Duration::from_millis(1));
    assert_eq!(codes(&sub("900001ms")), vec![Code::DurationInvalid]);
    assert_eq!(codes(&sub("16m")), vec![Code::DurationInvalid]);
    assert_eq!(codes(&sub("0s")), vec![Code::DurationInvalid]);
    assert_eq!(codes(&sub("30")), vec![Code::DurationInvalid]);
    let default = app("event E { id: string }\naction a()\nsubscriber s { on: E run: a() }");
    assert_eq!(default.subscribers["s"].timeout, Duration::from_secs(30));
}

#[test]
fn durations_take_every_unit() {
    let every = |d: &str| {
        let app = app(&format!("action a()\nschedule s {{ every: {d} run: a() }}"));
        match &app.schedules["s"].trigger {
            Trigger::Every(d) => *d,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(every("250ms"), Duration::from_millis(250));
    assert_eq!(every("90s"), Duration::from_secs(90));
    assert_eq!(every("5m"), Duration::from_secs(300));
    assert_eq!(every("2h"), Duration::from_secs(7200));
    assert_eq!(every("3d"), Duration::from_secs(3 * 86_400));
}

#[test]
fn cron_expressions_are_checked() {
    let cron = |c: &str| format!("action a()\nschedule s {{ cron: \"{c}\" run: a() }}");
    for ok in ["0 3 * * *", "*/15 * * * *", "0 0 3 * * *", "@daily", "0 9 * * MON-FRI"] {
        let app = app(&cron(ok));
        assert_eq!(app.schedules["s"].trigger, Trigger::Cron(ok.to_string()));
    }
    for bad in ["0 25 * * *", "", "every day", "* * *", "60 * * * *"] {
        assert_eq!(codes(&cron(bad)), vec![Code::ScheduleCronInvalid], "{bad:?}");
    }
}

#[test]
fn one_line_blocks_comments_and_commas() {
    let app = app(
        "event Ping { id: string } // a ping\nevent Pong { id: string, n: int, }\n// whole line\naction a(id: string,) uses c\nconnection c { base_url: \"https://c\", timeout: 2s }\nsubscriber s { on: Ping run: a(event.id) retry: { attempts: 3, within: 1h } }",
    );
    assert_eq!(app.events["Pong"].fields.len(), 2);
    assert_eq!(app.connections["c"].timeout, Duration::from_secs(2));
}

#[test]
fn the_checked_app_keeps_settings_unresolved_and_calls_structured() {
    let app = app(
        "connection pay {
            base_url: env(\"PAY_URL\")
            headers: { \"Authorization\": secret(\"PAY_TOKEN\")  \"Accept\": \"application/json\" }
            retry: { attempts: 3 }
            signing_secret: secret(\"PAY_SIGNING\")
        }
        action record(payment_id: string, n: int) {
            call pay.post(\"/payments/{payment_id}/record\", body: { id: payment_id, n: n, all: event }, idempotency_key: payment_id)
        }",
    );
    let pay = &app.connections["pay"];
    assert_eq!(pay.url, Value::Env("PAY_URL".into()));
    assert_eq!(pay.headers["Authorization"], Value::Secret("PAY_TOKEN".into()));
    assert_eq!(pay.headers["Accept"], Value::String("application/json".into()));
    assert_eq!(pay.attempts, 3);
    assert_eq!(pay.signing_secret, Some(Value::Secret("PAY_SIGNING".into())));
    let ActionBody::Statements(body) = &app.actions["record"].body else {
        panic!("a body")
    };
    let Statement::Call(call) = &body[0] else {
        panic!("a call")
    };
    assert_eq!(call.method, Method::Post);
    assert!(!call.method.is_idempotent());
    assert_eq!(
        call.path.parts(),
        vec![
            PathPart::Literal("/payments/".into()),
            PathPart::Param("payment_id".into()),
            PathPart::Literal("/record".into()),
        ]
    );
    assert_eq!(call.idempotency_key, Some(Expr::Param("payment_id".into())));
    assert_eq!(
        call.body,
        Some(Expr::Object(vec![
            ("id".into(), Expr::Param("payment_id".into())),
            ("n".into(), Expr::Param("n".into())),
            ("all".into(), Expr::Event),
        ]))
    );
}

#[test]
fn arguments_bind_by_position_then_name() {
    let app = app(
        "event E { id: string  cents: int }\naction a(id: string, cents: float, note: string)\nsubscriber s { on: E run: a(event.id, note: \"hi\", cents: event.cents) }",
    );
    assert_eq!(
        app.subscribers["s"].run.args,
        vec![
            Expr::EventField(vec!["id".into()]),
            Expr::EventField(vec!["cents".into()]),
            Expr::String("hi".into()),
        ]
    );
}

#[test]
fn the_example_app_is_valid_and_complete() {
    let src = include_str!("../../../examples/payments/app.jadpo");
    let app = app(src);
    assert_eq!(
        app.summary(),
        "2 events, 4 connections, 6 actions, 5 subscribers, 1 schedule"
    );
    assert_eq!(app.subscribers["record_payment_webhook"].budget.attempts(), 20);
    assert_eq!(app.actions["refund"].connections(), &set(&["ledger", "stripe"]));
    assert_eq!(app.subscribers_of("PaymentReceived").count(), 4);
}

#[test]
fn an_error_anywhere_means_no_app_and_every_error_is_reported() {
    let src = "event E { id: strng }\nsubscriber s { on: F run: g() }\nschedule t { run: g() retry: {} }\n";
    assert_eq!(
        codes(src),
        vec![
            Code::TypeUnknown,
            Code::SubscriberEventUnknown,
            Code::SubscriberActionUnknown,
            Code::ScheduleTriggerInvalid,
            Code::ScheduleActionUnknown,
            Code::ScheduleRetryNotAllowed,
        ]
    );
}

/// The example at the top of docs/app-file.md, with a few comments, and the
/// two names it leaves undeclared (`mailer`, `reconcile_all`) added.
#[test]
fn the_app_file_pages_example_is_valid() {
    let src = r#"
event PaymentReceived {
    payment_id: string
    amount_cents: int
}

connection payments {
    driver: http
    base_url: env("PAYMENTS_URL")
    headers: { "Authorization": secret("PAYMENTS_TOKEN") }
    timeout: 10s
    retry: { attempts: 3 }          // the call's own retries, inside one attempt
}

action record_payment(payment_id: string) {
    call payments.post("/payments/{payment_id}/record", body: event)
}

action notify(payment_id: string) uses mailer   // body supplied by Rust code

subscriber record_payment_webhook {
    on: PaymentReceived
    run: record_payment(event.payment_id)
    retry: { attempts: 20  within: 3d }
    timeout: 30s                    // the run's time limit (default 30s, at most 15m)
}

schedule reconcile {
    every: 1h                       // or cron: "0 3 * * *"
    run: reconcile_all()
}

connection mailer { base_url: env("MAILER_URL") }
action reconcile_all() uses payments
"#;
    let app = app(src);
    let sub = &app.subscribers["record_payment_webhook"];
    assert_eq!(
        (sub.budget.attempts(), sub.budget.within()),
        (20, Duration::from_secs(3 * 86_400))
    );
    assert_eq!(app.actions["notify"].connections(), &set(&["mailer"]));
    assert_eq!(
        app.schedules["reconcile"].trigger,
        Trigger::Every(Duration::from_secs(3600))
    );
}

/// `key:` keeps the path of fields after `event`: a string or int field,
/// or a field inside an object field (its type checked at the emit).
#[test]
fn a_subscribers_key_is_the_path_of_an_event_field() {
    let app = app("event Paid { customer: string  n: int  meta: object  rate: float }
        action noop() uses c
        connection c { base_url: \"https://c\" }
        subscriber a { on: Paid  run: noop()  key: event.customer }
        subscriber b { on: Paid  run: noop()  key: event.n }
        subscriber c { on: Paid  run: noop()  key: event.meta.account.id }
        subscriber d { on: Paid  run: noop() }");
    let key = |name: &str| app.subscribers[name].key.clone();
    assert_eq!(key("a"), Some(vec!["customer".to_string()]));
    assert_eq!(key("b"), Some(vec!["n".to_string()]));
    assert_eq!(key("c"), Some(vec!["meta".into(), "account".into(), "id".into()]));
    assert_eq!(key("d"), None);
    let bad = "event Paid { rate: float }\naction noop() uses c\nconnection c { base_url: \"https://c\" }\n";
    assert_eq!(
        codes(&format!(
            "{bad}subscriber a {{ on: Paid  run: noop()  key: event.rate }}"
        )),
        [Code::SubscriberKeyInvalid]
    );
    assert_eq!(
        codes(&format!("{bad}subscriber a {{ on: Paid  run: noop()  key: \"c-1\" }}")),
        [Code::SubscriberKeyInvalid]
    );
    assert_eq!(
        codes(&format!(
            "{bad}subscriber a {{ on: Paid  run: noop()  key: event.who }}"
        )),
        [Code::EventFieldUnknown]
    );
}
