//! Capabilities, routes, emits and stores: what a valid file becomes, and
//! the checks across blocks that involve them. Every rendered message is in
//! the snapshots of diagnostics.rs.

use jadpo_lang::{ActionBody, App, Code, Emit, Expr, Method, RoutePath, RouteSegment, Runnable, Statement, Value};
use std::collections::{BTreeMap, BTreeSet};
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

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The brief's example of every construct, in one file.
const SHOP: &str = r#"
store main  { url: env("DATABASE_URL") }
store audit { url: "sqlite:audit.db" }

event PaymentReceived { order_id: string  email: string  amount_cents: int }
event RefundRequest { amount_cents: int  reason: string }
event AuditEntry in audit { id: string  what: string  cents: int }
event ReceiptDue in audit { email: string  amount_cents: int }

capability send_receipt(email: string, amount_cents: int)

connection postmark {
    base_url: env("POSTMARK_URL")
    fills send_receipt {
        call postmark.post("/email", body: { "To": email, "Cents": amount_cents })
        emit AuditEntry(what: "receipt", cents: amount_cents, id: email)
    }
}

connection shop { base_url: "https://shop.example" }

action refund(order_id: string, amount_cents: int) {
    call shop.post("/refunds/{order_id}", body: { cents: amount_cents })
    run send_receipt("refunds@shop.example", amount_cents)
}

action refund_and_log(order_id: string, amount_cents: int) {
    run refund(order_id, amount_cents)
    emit RefundRequest(reason: "asked", amount_cents: amount_cents)
}

subscriber receipts { on: ReceiptDue  run: send_receipt(event.email, event.amount_cents) }

route refund {
    post: "/refunds/{order_id}"
    input: RefundRequest
    run: refund(path.order_id, input.amount_cents)
    timeout: 5s
}
"#;

#[test]
fn a_capability_is_checked_with_its_filler_and_body() {
    let app = app(SHOP);
    let cap = &app.capabilities["send_receipt"];
    assert_eq!(cap.filler, "postmark");
    assert_eq!(
        cap.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["email", "amount_cents"]
    );
    assert!(matches!(&cap.body[0], Statement::Call(c) if c.connection == "postmark" && c.method == Method::Post));
    assert_eq!(cap.connections(), &set(&["postmark"]));
    assert_eq!(cap.emits(), &set(&["AuditEntry"]));
    assert_eq!(app.subscribers["receipts"].run.action, "send_receipt");
}

#[test]
fn connections_reach_through_capabilities_to_their_fillers() {
    let app = app(SHOP);
    assert_eq!(app.actions["refund"].connections(), &set(&["postmark", "shop"]));
    assert_eq!(app.actions["refund_and_log"].connections(), &set(&["postmark", "shop"]));
}

#[test]
fn a_capability_with_only_an_emit_still_reaches_its_filler() {
    let app = app(
        "event E { id: string }\ncapability note(id: string)\nconnection c { base_url: \"https://c\"  fills note { emit E(id: id) } }\naction a() { run note(\"x\") }",
    );
    assert_eq!(app.capabilities["note"].connections(), &set(&["c"]));
    assert_eq!(app.actions["a"].connections(), &set(&["c"]));
}

#[test]
fn emits_are_known_transitively() {
    let app = app(SHOP);
    assert_eq!(app.actions["refund"].emits(), &set(&["AuditEntry"]));
    assert_eq!(
        app.actions["refund_and_log"].emits(),
        &set(&["AuditEntry", "RefundRequest"])
    );
}

#[test]
fn an_emits_fields_are_in_the_events_order_whatever_order_they_are_written_in() {
    let app = app(SHOP);
    let Statement::Emit(Emit { event, fields, .. }) = &app.capabilities["send_receipt"].body[1] else {
        panic!("an emit")
    };
    assert_eq!(event, "AuditEntry");
    assert_eq!(
        fields,
        &vec![
            ("id".to_string(), Expr::Param("email".into())),
            ("what".to_string(), Expr::String("receipt".into())),
            ("cents".to_string(), Expr::Param("amount_cents".into())),
        ]
    );
}

#[test]
fn emit_values_are_checked_like_a_calls_body() {
    let base = "event E { id: string  n: float  meta: object  tags: list }\n";
    let ok = app(&format!(
        "{base}action a(id: string, n: int) {{ emit E(id: id, n: n, meta: {{ k: event, s: secret(\"S\") }}, tags: [1, env(\"X\")]) }}"
    ));
    let ActionBody::Statements(body) = &ok.actions["a"].body else {
        panic!("a body")
    };
    let Statement::Emit(emit) = &body[0] else {
        panic!("an emit")
    };
    assert_eq!(
        emit.fields[1],
        ("n".to_string(), Expr::Param("n".into())),
        "an int widens to a float"
    );
    // An `event` field inside an action is checked against each subscriber's event.
    let via = format!("{base}event P {{ id: string }}\naction a() {{ emit E(id: event.idd, n: 1, meta: {{}}, tags: []) }}\nsubscriber s {{ on: P run: a() }}");
    assert_eq!(codes(&via), vec![Code::EventFieldUnknown]);
    assert_eq!(
        codes(&format!("{base}schedule s {{ every: 1h run: a() }}\naction a() {{ emit E(id: event.id, n: 1, meta: {{}}, tags: []) }}")),
        vec![Code::ScheduleEventUnavailable]
    );
    assert_eq!(
        codes(&format!(
            "{base}action a() {{ emit E(id: 1, n: \"x\", meta: [], tags: {{}}) }}"
        )),
        vec![Code::EmitFieldType; 4]
    );
}

#[test]
fn a_route_becomes_its_method_path_input_run_and_timeout() {
    let app = app(SHOP);
    let route = &app.routes["refund"];
    assert_eq!(route.method, Method::Post);
    assert_eq!(route.path.to_string(), "/refunds/{order_id}");
    assert_eq!(
        route.path.segments,
        vec![
            RouteSegment::Literal("refunds".into()),
            RouteSegment::Param("order_id".into())
        ]
    );
    assert_eq!(route.input.as_deref(), Some("RefundRequest"));
    assert_eq!(route.timeout, Duration::from_secs(5));
    assert_eq!(
        route.run.args,
        vec![
            Expr::PathParam("order_id".into()),
            Expr::InputField(vec!["amount_cents".into()])
        ]
    );
}

#[test]
fn a_route_has_defaults_and_may_pass_the_whole_input() {
    let app = app(
        "event In { id: string  meta: object }\naction a(x: object, y: string)\naction b()\ncapability c(v: string)\nconnection k { base_url: \"https://k\"  fills c { call k.get(\"/{v}\") } }\nroute r { get: \"/\"  input: In  run: a(input, input.meta.deep) }\nroute s { delete: \"/s/{id}\"  run: c(path.id) }\nroute t { put: \"/t\"  run: b }\n",
    );
    assert_eq!(app.routes["r"].timeout, Duration::from_secs(10));
    assert_eq!(app.routes["r"].path.to_string(), "/");
    assert_eq!(
        app.routes["r"].run.args,
        vec![Expr::Input, Expr::InputField(vec!["meta".into(), "deep".into()])]
    );
    assert_eq!(app.routes["s"].method, Method::Delete);
    assert_eq!(app.routes["s"].input, None);
    assert!(matches!(
        app.runnable(&app.routes["s"].run.action),
        Some(Runnable::Capability(_))
    ));
    assert_eq!(
        app.summary(),
        "1 event, 1 connection, 2 actions, 0 subscribers, 0 schedules, 1 capability, 3 routes"
    );
}

#[test]
fn route_paths_match_segment_by_segment() {
    let path = RoutePath::parse("/orders/{order_id}/refunds/{refund_id}").unwrap();
    assert_eq!(
        path.matches("/orders/o1/refunds/r%202"),
        Some(params(&[("order_id", "o1"), ("refund_id", "r 2")]))
    );
    assert_eq!(
        path.matches("/orders/a%2Fb/refunds/%C3%A9?x=1"),
        Some(params(&[("order_id", "a/b"), ("refund_id", "é")])),
        "an encoded `/` stays in its segment; the query is ignored"
    );
    assert_eq!(path.matches("/orders//refunds/r"), None, "a parameter is never empty");
    assert_eq!(path.matches("/orders/o1/refunds/r/"), None);
    assert_eq!(path.matches("/orders/o1/refunds"), None);
    assert_eq!(path.matches("/orders/o1/refund/r"), None);
    assert_eq!(path.matches("orders/o1/refunds/r"), None);
    assert_eq!(
        path.matches("/orders/%zz/refunds/r"),
        None,
        "a bad escape does not match"
    );
    assert_eq!(
        path.matches("/orders/%FF/refunds/r"),
        None,
        "nor bytes that are not UTF-8"
    );
    assert_eq!(
        RoutePath::parse("/%72").map(|p| p.to_string()),
        Err("\"/%72\" holds `%`; a path holds letters, digits, `/` and - . _ ~ ! $ & ' ( ) * + , ; = : @ (no query, no spaces, no percent-encoding)".into())
    );
    let literal = RoutePath::parse("/a:b/@x").unwrap();
    assert_eq!(
        literal.matches("/a%3Ab/%40x"),
        Some(params(&[])),
        "literals compare decoded"
    );
    let root = RoutePath::parse("/").unwrap();
    assert_eq!(root.matches("/"), Some(params(&[])));
    assert_eq!(root.matches("/?q"), Some(params(&[])));
    assert_eq!(root.matches("/x"), None);
    assert_eq!(root.matches(""), None);
    for text in ["/", "/a", "/a/{b}/c", "/{x}/{y}"] {
        assert_eq!(RoutePath::parse(text).unwrap().to_string(), text);
    }
    assert_eq!(path.params().collect::<Vec<_>>(), ["order_id", "refund_id"]);
}

#[test]
fn the_most_specific_route_answers() {
    let app = app(
        "action a(x: string)\nroute any { get: \"/o/{id}\"  run: a(path.id) }\nroute mine { get: \"/o/mine\"  run: a(\"me\") }\nroute post { post: \"/o/{id}\"  run: a(path.id) }\nroute deep { get: \"/o/{id}/x\"  run: a(path.id) }\n",
    );
    let found = |m: Method, p: &str| app.route_for(m, p).map(|(r, ps)| (r.name.clone(), ps));
    assert_eq!(found(Method::Get, "/o/mine"), Some(("mine".into(), params(&[]))));
    assert_eq!(
        found(Method::Get, "/o/42"),
        Some(("any".into(), params(&[("id", "42")])))
    );
    assert_eq!(
        found(Method::Post, "/o/mine"),
        Some(("post".into(), params(&[("id", "mine")])))
    );
    assert_eq!(
        found(Method::Get, "/o/42/x"),
        Some(("deep".into(), params(&[("id", "42")])))
    );
    assert_eq!(found(Method::Put, "/o/42"), None);
    assert_eq!(found(Method::Get, "/p"), None);
}

#[test]
fn routes_answer_one_method_and_one_path_each() {
    let run = "action a(x: string)\n";
    assert_eq!(
        codes(&format!("{run}route r {{ get: \"/a\"  post: \"/a\"  run: a(\"x\") }}")),
        vec![Code::RouteMethodMissing]
    );
    assert_eq!(
        codes(&format!("{run}route r {{ patch: \"/a\"  run: a(\"x\") }}")),
        vec![Code::RouteMethodMissing, Code::KeyUnknown]
    );
    assert_eq!(
        codes(&format!(
            "{run}route r {{ get: \"/a/{{x}}\"  run: a(path.x) }}\nroute s {{ get: \"/a/{{y}}\"  run: a(path.y) }}"
        )),
        vec![Code::RouteDuplicatePath]
    );
    // Same path, other method; or a literal beside a placeholder: distinct.
    app(&format!(
        "{run}route r {{ get: \"/a/{{x}}\"  run: a(path.x) }}\nroute s {{ put: \"/a/{{y}}\"  run: a(path.y) }}\nroute t {{ get: \"/a/b\"  run: a(\"b\") }}"
    ));
    for bad in ["a", "/a//b", "/a/", "/{x", "/{}", "/{1x}", "/{x}{y}", "/a b", "/é"] {
        assert_eq!(
            codes(&format!("{run}route r {{ get: \"{bad}\"  run: a(\"x\") }}")),
            vec![Code::RoutePathInvalid],
            "{bad:?}"
        );
    }
}

#[test]
fn a_route_has_no_event_even_through_what_it_runs() {
    let src = "connection c { base_url: \"https://c\" }\naction inner() { call c.post(\"/\", body: event) }\naction outer() { run inner() }\nroute r { post: \"/r\"  run: outer() }";
    assert_eq!(codes(src), vec![Code::RouteEventUnavailable]);
    assert_eq!(
        codes("action f(x: string)\nroute r { post: \"/r\"  run: f(event.id) }"),
        vec![Code::CallArgumentsInvalid]
    );
    assert_eq!(
        codes("action f(x: string)\nroute r { post: \"/r/{id}\"  run: f(path.di) }"),
        vec![Code::RoutePathParamUnknown]
    );
    assert_eq!(
        codes("action f(x: int)\nroute r { post: \"/r/{id}\"  run: f(path.id) }"),
        vec![Code::CallArgumentsInvalid],
        "a path parameter is a string"
    );
    assert_eq!(
        codes("action f(x: string)\nroute r { post: \"/r\"  input: Nope  run: f(input.x) }"),
        vec![Code::RouteInputUnknown],
        "fields of an unknown input are not reported again"
    );
}

#[test]
fn the_runnable_of_a_run_is_an_action_or_a_capability() {
    let app = app(SHOP);
    let Some(Runnable::Capability(cap)) = app.runnable("send_receipt") else {
        panic!("a capability")
    };
    assert_eq!(cap.filler, "postmark");
    let r = app.runnable("send_receipt").unwrap();
    assert_eq!(r.name(), "send_receipt");
    assert_eq!(r.params().len(), 2);
    assert_eq!(r.statements().map(<[_]>::len), Some(2));
    assert_eq!(r.connections(), &set(&["postmark"]));
    let action = app.runnable("refund").unwrap();
    assert!(matches!(action, Runnable::Action(_)));
    assert_eq!(action.params()[0].name, "order_id");
    assert_eq!(action.emits(), &set(&["AuditEntry"]));
    assert!(app.runnable("nothing").is_none());
    let uses = jadpo_lang::check("a.jadpo", "connection c { base_url: \"https://c\" }\naction r() uses c")
        .app
        .unwrap();
    assert_eq!(
        uses.runnable("r").unwrap().statements(),
        None,
        "Rust supplies a `uses` body"
    );
}

#[test]
fn a_fills_body_reaches_only_its_own_connection() {
    let conns = "connection a { base_url: \"https://a\" }\nconnection b { base_url: \"https://b\" }\n";
    let cap = |body: &str| {
        format!("{conns}capability k()\ncapability other()\nconnection f {{ base_url: \"https://f\"  fills k {{ {body} }}  fills other {{ call f.get(\"/\") }} }}\naction on_a() {{ call a.get(\"/\") }}\naction on_f() {{ call f.get(\"/\") }}\naction rust() uses b\naction nothing()\n")
    };
    app(&cap("call f.get(\"/\") run on_f() run other() run nothing()"));
    assert_eq!(codes(&cap("call a.get(\"/\")")), vec![Code::CapabilityCallOutside]);
    assert_eq!(codes(&cap("run on_a()")), vec![Code::CapabilityCallOutside]);
    assert_eq!(codes(&cap("run rust()")), vec![Code::CapabilityCallOutside]);
    // A capability filled by another connection is outside too.
    let two = format!("{conns}capability k()\ncapability j()\nconnection a2 {{ base_url: \"https://x\"  fills j {{ call a2.get(\"/\") }} }}\nconnection f {{ base_url: \"https://f\"  fills k {{ run j() }} }}\n");
    assert_eq!(codes(&two), vec![Code::CapabilityCallOutside]);
}

#[test]
fn each_capability_has_exactly_one_filler() {
    let c = "connection c { base_url: \"https://c\" }\n";
    assert_eq!(codes(&format!("{c}capability k()")), vec![Code::CapabilityUnfilled]);
    assert_eq!(
        codes("capability k()\nconnection c { base_url: \"https://c\"  fills k { call c.get(\"/\") }  fills k { call c.get(\"/\") } }"),
        vec![Code::CapabilityFilledTwice]
    );
    assert_eq!(
        codes(&format!(
            "{c}action k()\nconnection d {{ base_url: \"https://d\"  fills k {{ }} }}"
        )),
        vec![Code::CapabilityUnknown]
    );
    assert_eq!(
        codes(&format!("{c}action k()\ncapability k()")),
        vec![Code::NameDuplicate],
        "a capability named like an action is not reported unfilled as well"
    );
}

#[test]
fn cycles_through_capabilities_are_reported_like_action_cycles() {
    let src = "capability k()\nconnection c { base_url: \"https://c\"  fills k { run a() } }\naction a() { run k() }";
    assert_eq!(codes(src), vec![Code::ActionCycle]);
    let checked = jadpo_lang::check("app.jadpo", src);
    assert!(
        checked.diagnostics[0].message.contains("actions and capabilities"),
        "{}",
        checked.diagnostics[0].message
    );
    assert_eq!(
        codes("capability k()\nconnection c { base_url: \"https://c\"  fills k { run k() } }"),
        vec![Code::ActionCycle]
    );
}

#[test]
fn capability_arguments_are_checked_like_an_actions() {
    let base = "event E { id: string }\ncapability k(id: string, n: int)\nconnection c { base_url: \"https://c\"  fills k { call c.put(\"/{id}\", body: { n: n }) } }\n";
    app(&format!(
        "{base}subscriber s {{ on: E run: k(event.id, n: 3) }}\nschedule t {{ every: 1h run: k(\"all\", 0) }}"
    ));
    assert_eq!(
        codes(&format!("{base}subscriber s {{ on: E run: k(event.id) }}")),
        vec![Code::CallArgumentsInvalid]
    );
    assert_eq!(
        codes(&format!("{base}action a() {{ run k(1, 2) }}")),
        vec![Code::CallArgumentsInvalid]
    );
}

#[test]
fn events_live_in_their_store_or_the_first() {
    let app = app(SHOP);
    assert_eq!(
        app.stores.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["main", "audit"]
    );
    assert_eq!(app.stores[0].url, Value::Env("DATABASE_URL".into()));
    assert_eq!(app.stores[1].url, Value::String("sqlite:audit.db".into()));
    assert_eq!(app.events["AuditEntry"].store.as_deref(), Some("audit"));
    assert_eq!(app.events["PaymentReceived"].store, None);
    assert_eq!(app.store_of("AuditEntry"), Some("audit"));
    assert_eq!(app.store_of("PaymentReceived"), Some("main"));
    assert_eq!(app.store_of("Nope"), None);
    // A subscriber's emits are written in its own event's store.
    let mismatch = SHOP.replace("event ReceiptDue in audit", "event ReceiptDue");
    assert_eq!(codes(&mismatch), vec![Code::EmitStoreMismatch]);
    // A schedule runs with the first store: its emits are written there.
    let schedule = format!("{SHOP}schedule nightly {{ every: 24h  run: send_receipt(\"x\", 1) }}\n");
    assert_eq!(codes(&schedule), vec![Code::EmitStoreMismatch]);
    let none = self::app("event E { id: string }");
    assert_eq!(none.store_of("E"), None, "no store blocks: the command line's store");
    assert!(none.stores.is_empty());
    // A store may be declared after the events in it.
    let later = self::app(
        "event E in b { id: string }\nstore a { url: \"postgres://u@h/a\" }\nstore b { url: \"postgresql://u@h/b\" }",
    );
    assert_eq!(later.store_of("E"), Some("b"));
}

#[test]
fn store_blocks_are_checked() {
    assert_eq!(codes("event E in x { id: string }"), vec![Code::StoreUnknown]);
    assert_eq!(codes("store a { }"), vec![Code::KeyMissing]);
    assert_eq!(codes("store a { url: \"sqlite:\" }"), vec![Code::ValueInvalid]);
    assert_eq!(codes("store a { url: 5 }"), vec![Code::ValueInvalid]);
    assert_eq!(
        codes("store a { url: \"sqlite:a.db\"  path: \"x\" }"),
        vec![Code::KeyUnknown]
    );
    assert_eq!(
        codes("store a { url: \"sqlite:a.db\" }\nstore a { url: \"sqlite:b.db\" }"),
        vec![Code::NameDuplicate]
    );
    // Each kind of block has its own names: a store may share an event's.
    app("store audit { url: \"sqlite:a.db\" }\nevent audit in audit { id: string }");
}

#[test]
fn the_summary_names_the_new_blocks_only_when_there_are_some() {
    assert_eq!(
        app(SHOP).summary(),
        "4 events, 2 connections, 2 actions, 1 subscriber, 0 schedules, 1 capability, 1 route, 2 stores"
    );
    assert_eq!(
        app("event E { id: string }").summary(),
        "1 event, 0 connections, 0 actions, 0 subscribers, 0 schedules"
    );
}
