//! Every error code, rendered, as committed insta snapshots
//! (`tests/snapshots/`). To review a change: `INSTA_UPDATE=always cargo test
//! -p jadpo-lang --test diagnostics`, then read the diff of the .snap files.

use jadpo_lang::Code;

/// The one way these tests look at diagnostics: as the user sees them.
fn diagnose(src: &str) -> String {
    let checked = jadpo_lang::check("app.jadpo", src);
    assert_eq!(
        checked.app.is_some(),
        checked.diagnostics.is_empty(),
        "an app is returned exactly when there are no errors"
    );
    checked.render(src)
}

const BASE: &str = r#"event PaymentReceived { payment_id: string  amount_cents: int }
connection payments { base_url: env("PAYMENTS_URL") }
action record_payment(payment_id: string) {
    call payments.post("/payments/{payment_id}/record", body: event)
}
action reconcile_all(day: string) uses payments
"#;

/// (expected code, snapshot name, source): the source shows the code at
/// least once; other codes may follow from the same mistake.
const CASES: &[(Code, &str, &str)] = &[
    (Code::ParseSyntax, "parse_syntax_missing_colon", "event Ping { id string }\n"),
    (
        Code::ParseSyntax,
        "parse_syntax_recovers_and_reports_each",
        "event Ping { id: string @ }\nevent Pong { id: }\nsubscriber s { on: Ping\n\nsubscriber t { on: Pong run: x( }\n",
    ),
    (Code::ParseSyntax, "parse_syntax_unclosed_string", "connection c { base_url: \"https://x\n}\n"),
    (Code::ParseSyntax, "parse_syntax_top_level", "evnt Ping { id: string }\nevent Pong { id: string }\n"),
    (
        Code::NameDuplicate,
        "name_duplicate",
        "event Ping { id: string }\nevent Ping { id: string  id: int }\n",
    ),
    (
        Code::KeyUnknown,
        "key_unknown",
        "subscriber s { on: PaymentReceived  run: record_payment(event.payment_id)  retries: { attempts: 3 } }\n",
    ),
    (Code::KeyMissing, "key_missing", "subscriber s { on: PaymentReceived }\n"),
    (Code::ValueInvalid, "value_invalid", "connection c { base_url: 5  signing_secret: \"hunter2\" }\n"),
    (Code::TypeUnknown, "type_unknown", "event Refund { amount: integer }\n"),
    (
        Code::DurationInvalid,
        "duration_invalid",
        "subscriber s { on: PaymentReceived  run: record_payment(event.payment_id)  timeout: 20m }\nschedule t { every: 5w  run: reconcile_all(\"x\") }\n",
    ),
    (
        Code::SubscriberEventUnknown,
        "subscriber_event_unknown",
        "subscriber s { on: PaymentRecieved  run: record_payment(event.payment_id) }\n",
    ),
    (
        Code::SubscriberActionUnknown,
        "subscriber_action_unknown",
        "subscriber s { on: PaymentReceived  run: record_paymnt(event.payment_id) }\n",
    ),
    (
        Code::SubscriberRetryInvalid,
        "subscriber_retry_invalid",
        "subscriber s {\n    on: PaymentReceived\n    run: record_payment(event.payment_id)\n    retry: { attempts: 0  within: 31d  tries: 3 }\n}\n",
    ),
    (
        Code::SubscriberRetryInvalid,
        "subscriber_retry_invalid_types",
        "subscriber s {\n    on: PaymentReceived\n    run: record_payment(event.payment_id)\n    retry: { attempts: \"20\"  within: 3  attempts: 5 }\n}\n",
    ),
    (
        Code::SubscriberKeyInvalid,
        "subscriber_key_invalid",
        "event Rated { id: string  score: float }\nsubscriber s { on: PaymentReceived  run: record_payment(event.payment_id)  key: payment_id }\nsubscriber t { on: Rated  run: reconcile_all(event.id)  key: event.score }\nsubscriber u { on: PaymentReceived  run: record_payment(event.payment_id)  key: event.customer }\n",
    ),
    (
        Code::SubscriberOrderInvalid,
        "subscriber_order_invalid",
        "subscriber s { on: PaymentReceived  run: record_payment(event.payment_id)  key: event.payment_id  order: lifo }\nsubscriber t { on: PaymentReceived  run: record_payment(event.payment_id)  key: event.payment_id  order: fifo  concurrency_per_key: 2 }\n",
    ),
    (
        Code::SubscriberOrderWithoutKey,
        "subscriber_order_without_key",
        "subscriber s { on: PaymentReceived  run: record_payment(event.payment_id)  order: fifo }\nsubscriber t { on: PaymentReceived  run: record_payment(event.payment_id)  concurrency_per_key: 2 }\n",
    ),
    (
        Code::SubscriberConcurrencyPerKeyInvalid,
        "subscriber_concurrency_per_key_invalid",
        "subscriber s { on: PaymentReceived  run: record_payment(event.payment_id)  key: event.payment_id  concurrency_per_key: 0 }\nsubscriber t { on: PaymentReceived  run: record_payment(event.payment_id)  key: event.payment_id  concurrency_per_key: 1001 }\nsubscriber u { on: PaymentReceived  run: record_payment(event.payment_id)  key: event.payment_id  concurrency_per_key: \"2\" }\n",
    ),
    (
        Code::ScheduleActionUnknown,
        "schedule_action_unknown",
        "schedule nightly { every: 1d  run: reconcile() }\n",
    ),
    (
        Code::ScheduleRetryNotAllowed,
        "schedule_retry_not_allowed",
        "schedule nightly { every: 1d  run: reconcile_all(\"all\")  retry: { attempts: 3 } }\n",
    ),
    (
        Code::ScheduleTriggerInvalid,
        "schedule_trigger_invalid",
        "schedule a { run: reconcile_all(\"all\") }\nschedule b { every: 1h  cron: \"0 3 * * *\"  run: reconcile_all(\"all\") }\n",
    ),
    (
        Code::ScheduleCronInvalid,
        "schedule_cron_invalid",
        "schedule nightly { cron: \"0 25 * * *\"  run: reconcile_all(\"all\") }\n",
    ),
    (
        Code::ScheduleEventUnavailable,
        "schedule_event_unavailable",
        "schedule nightly { every: 1d  run: record_payment(\"all\") }\n",
    ),
    (
        Code::ActionConnectionUnknown,
        "action_connection_unknown",
        "action notify(to: string) uses mailer\naction charge() {\n    call paymnts.post(\"/charges\")\n}\n",
    ),
    (
        Code::ActionRunUnknown,
        "action_run_unknown",
        "action twice(payment_id: string) {\n    run record_payment(payment_id)\n    run notify(payment_id)\n}\n",
    ),
    (
        Code::ActionCycle,
        "action_cycle",
        "action a() { run b() }\naction b() { run c() }\naction c() { run a() }\naction d() { run d() }\n",
    ),
    (
        Code::EventFieldUnknown,
        "event_field_unknown",
        "action log(id: string) {\n    call payments.post(\"/log/{id}\", body: event.amount)\n}\nsubscriber s { on: PaymentReceived  run: record_payment(event.paymentid) }\nsubscriber t { on: PaymentReceived  run: log(event.payment_id) }\n",
    ),
    (
        Code::CallArgumentsInvalid,
        "call_arguments_invalid",
        "action refund(payment_id: string, amount_cents: int) {\n    call payments.post(\"/refunds/{payment}\", body: amount)\n}\nsubscriber s { on: PaymentReceived  run: record_payment(event.amount_cents) }\nsubscriber t { on: PaymentReceived  run: refund(event.payment_id) }\nsubscriber u { on: PaymentReceived  run: record_payment(event.payment_id, 5) }\n",
    ),
    (
        Code::CallMethodUnknown,
        "call_method_unknown",
        "action fetch(payment_id: string) {\n    call payments.fetch(\"/payments/{payment_id}\")\n}\n",
    ),
    (
        Code::ConnectionRetryInvalid,
        "connection_retry_invalid",
        "connection mailer { base_url: \"https://mail.example\"  retry: { attempts: 11  within: 1h } }\n",
    ),
    (
        Code::ConnectionRateInvalid,
        "connection_rate_invalid",
        "connection pay {\n    base_url: env(\"PAY_URL\")\n    rate: 0/s\n}\nconnection mail { base_url: env(\"MAIL_URL\")  rate: 20000/s }\n",
    ),
    (
        Code::ConnectionRateInvalid,
        "connection_rate_invalid_form",
        "connection a { base_url: \"https://a\"  rate: 50 }\nconnection b { base_url: \"https://b\"  rate: 50/day }\nconnection c { base_url: \"https://c\"  rate: \"50/s\" }\nconnection d {\n    base_url: \"https://d\"\n    rate: 50/\n    concurrency: 5\n}\n",
    ),
    (
        Code::ConnectionConcurrencyInvalid,
        "connection_concurrency_invalid",
        "connection a { base_url: \"https://a\"  concurrency: 0 }\nconnection b { base_url: \"https://b\"  concurrency: 10001 }\nconnection c { base_url: \"https://c\"  concurrency: \"5\" }\n",
    ),
    (
        Code::NameDuplicate,
        "name_duplicate_connection_limits",
        "connection pay {\n    base_url: env(\"PAY_URL\")\n    rate: 50/s\n    concurrency: 10\n    rate: 600/min\n    concurrency: 20\n}\n",
    ),
    (
        Code::KeyMissing,
        "key_missing_alerts",
        "alerts { path: \"/jadpo/alerts\" }\n",
    ),
    (
        Code::KeyUnknown,
        "key_unknown_alerts",
        "alerts { connection: payments  path: \"/jadpo/alerts\"  pth: \"/x\" }\n",
    ),
    (
        Code::ParseSyntax,
        "parse_syntax_alerts_name",
        "alerts ops { connection: payments  path: \"/jadpo/alerts\" }\n",
    ),
    (
        Code::AlertsDuplicate,
        "alerts_duplicate",
        "alerts { connection: payments  path: \"/jadpo/alerts\" }\nalerts {\n    connection: payments\n    path: \"/ops\"\n}\n",
    ),
    (
        Code::AlertsConnectionUnknown,
        "alerts_connection_unknown",
        "alerts { connection: paymnts  path: \"/jadpo/alerts\" }\n",
    ),
    (
        Code::AlertsConnectionUnknown,
        "alerts_connection_unknown_names_the_connections",
        "connection mailer { base_url: \"https://mail.example\" }\nalerts { connection: ops  path: \"/jadpo/alerts\" }\n",
    ),
    (
        Code::AlertsPathInvalid,
        "alerts_path_invalid",
        "alerts {\n    connection: payments\n    path: \"jadpo/alerts\"\n}\n",
    ),
    (
        Code::AlertsPathInvalid,
        "alerts_path_invalid_placeholder",
        "alerts { connection: payments  path: \"/alerts/{id}\" }\n",
    ),
    (
        Code::CapabilityUnknown,
        "capability_unknown",
        "capability send_receipt(to: string)\nconnection mailer {\n    base_url: \"https://mail.example\"\n    fills send_receipt { call mailer.post(\"/email\", body: { to: to }) }\n    fills send_reciept { call mailer.post(\"/email\") }\n    fills record_payment { call mailer.post(\"/x\") }\n}\n",
    ),
    (
        Code::CapabilityUnfilled,
        "capability_unfilled",
        "capability send_receipt(to: string, amount_cents: int)\nsubscriber s { on: PaymentReceived  run: send_receipt(\"a@b.example\", event.amount_cents) }\n",
    ),
    (
        Code::CapabilityFilledTwice,
        "capability_filled_twice",
        "capability send_receipt(to: string)\nconnection mailer {\n    base_url: \"https://mail.example\"\n    fills send_receipt { call mailer.post(\"/email\", body: { to: to }) }\n}\nconnection backup {\n    base_url: \"https://backup.example\"\n    fills send_receipt { call backup.post(\"/send\") }\n}\n",
    ),
    (
        Code::CapabilityCallOutside,
        "capability_call_outside",
        "capability send_receipt(to: string)\nconnection mailer {\n    base_url: \"https://mail.example\"\n    fills send_receipt {\n        call mailer.post(\"/email\", body: { to: to })\n        call payments.post(\"/receipts\")\n        run record_payment(to)\n    }\n}\n",
    ),
    (
        Code::CallArgumentsInvalid,
        "call_arguments_invalid_capability",
        "capability send_receipt(to: string, amount_cents: int)\nconnection mailer {\n    base_url: \"https://mail.example\"\n    fills send_receipt { call mailer.post(\"/email/{address}\", body: amount) }\n}\nsubscriber s { on: PaymentReceived  run: send_receipt(event.amount_cents) }\n",
    ),
    (
        Code::ActionCycle,
        "action_cycle_capabilities",
        "capability a()\ncapability b()\nconnection m {\n    base_url: \"https://m.example\"\n    fills a { run b() }\n    fills b { run a() }\n}\n",
    ),
    (
        Code::NameDuplicate,
        "name_duplicate_action_capability",
        "capability record_payment(payment_id: string)\n",
    ),
    (
        Code::ParseSyntax,
        "parse_syntax_capability_and_fills",
        "event E { id: string  fills x { run a() } }\ncapability c(to: string) { call payments.post(\"/x\") }\ncapability d(to: string) uses payments\n",
    ),
    (
        Code::RouteMethodMissing,
        "route_method_missing",
        "route a { run: reconcile_all(\"all\") }\nroute b {\n    get: \"/b\"\n    post: \"/b\"\n    run: reconcile_all(\"all\")\n}\n",
    ),
    (
        Code::RoutePathInvalid,
        "route_path_invalid",
        "route a { post: \"refunds\"  run: reconcile_all(\"all\") }\nroute b { post: \"/refunds/{id}/{id}\"  run: reconcile_all(\"all\") }\nroute c { get: \"/refunds/x{id}\"  run: reconcile_all(\"all\") }\nroute d { delete: \"/refunds/\"  run: reconcile_all(\"all\") }\nroute e { put: 5  run: reconcile_all(\"all\") }\nroute f { get: \"/refunds?all=1\"  run: reconcile_all(\"all\") }\n",
    ),
    (
        Code::RoutePathParamUnknown,
        "route_path_param_unknown",
        "route reconcile {\n    post: \"/reconcile/{day}\"\n    run: reconcile_all(path.date)\n}\n",
    ),
    (
        Code::RouteInputUnknown,
        "route_input_unknown",
        "route refund {\n    post: \"/refunds/{order_id}\"\n    input: RefundRequest\n    run: reconcile_all(path.order_id)\n}\n",
    ),
    (
        Code::RouteDuplicatePath,
        "route_duplicate_path",
        "route a { post: \"/reconcile/{day}\"  run: reconcile_all(path.day) }\nroute b { post: \"/reconcile/{date}\"  run: reconcile_all(path.date) }\nroute c { get: \"/reconcile/{date}\"  run: reconcile_all(path.date) }\n",
    ),
    (
        Code::RouteEventUnavailable,
        "route_event_unavailable",
        "route record { put: \"/payments/{id}\"  run: record_payment(path.id) }\n",
    ),
    (
        Code::RouteActionUnknown,
        "route_action_unknown",
        "route r { post: \"/reconcile\"  run: reconcile(\"all\") }\n",
    ),
    (
        Code::CallArgumentsInvalid,
        "call_arguments_invalid_route",
        "route r {\n    post: \"/payments/{id}\"\n    run: reconcile_all(event.payment_id)\n}\nroute s { post: \"/s\"  run: reconcile_all(input.day) }\nroute t { post: \"/t\"  input: PaymentReceived  run: reconcile_all(input.amount_cents) }\nroute v { post: \"/v/{id}\"  run: reconcile_all(path) }\nroute w { post: \"/w/{id}\"  run: reconcile_all(id) }\n",
    ),
    (
        Code::EventFieldUnknown,
        "event_field_unknown_route_input",
        "route t { post: \"/t\"  input: PaymentReceived  run: reconcile_all(input.paymentid) }\n",
    ),
    (
        Code::EmitEventUnknown,
        "emit_event_unknown",
        "action audit(id: string) {\n    emit PaymentRecieved(payment_id: id, amount_cents: 5)\n}\n",
    ),
    (
        Code::EmitFieldUnknown,
        "emit_field_unknown",
        "action audit(id: string) {\n    emit PaymentReceived(payment_id: id, amount_cents: 5, note: \"x\")\n}\n",
    ),
    (
        Code::EmitFieldMissing,
        "emit_field_missing",
        "action audit(id: string) {\n    emit PaymentReceived(payment_id: id)\n}\n",
    ),
    (
        Code::EmitFieldType,
        "emit_field_type",
        "action audit(id: string) {\n    emit PaymentReceived(payment_id: 5, amount_cents: id)\n}\n",
    ),
    (
        Code::CallArgumentsInvalid,
        "call_arguments_invalid_emit",
        "action audit(id: string) {\n    emit PaymentReceived(id, payment_id: id, payment_id: id, amount_cents: 1)\n}\n",
    ),
    (
        Code::StoreUnknown,
        "store_unknown",
        "store main { url: env(\"DATABASE_URL\") }\nevent AuditEntry in audti { id: string }\n",
    ),
    (
        Code::StoreUnknown,
        "store_unknown_without_stores",
        "event AuditEntry in audit { id: string }\n",
    ),
    (Code::KeyMissing, "key_missing_store", "store audit { }\n"),
    (
        Code::EmitStoreMismatch,
        "emit_store_mismatch",
        "store main { url: env(\"DATABASE_URL\") }\nstore audit { url: \"sqlite:audit.db\" }\n\
         event AuditEntry in audit { id: string }\n\
         action audit_it(id: string) { emit AuditEntry(id: id) }\n\
         action record(id: string) { run audit_it(id) }\n\
         subscriber s { on: PaymentReceived  run: record(event.payment_id) }\n",
    ),
    (
        Code::NameDuplicate,
        "name_duplicate_store",
        "store main { url: env(\"DATABASE_URL\") }\nstore main { url: \"sqlite:main.db\" }\n",
    ),
    (
        Code::ValueInvalid,
        "value_invalid_store_url",
        "store a { url: \"mysql://db/a\" }\nstore b { url: secret(\"B_URL\") }\nstore c { url: env(\"B URL\") }\n",
    ),
];

#[test]
fn every_code_has_a_snapshot() {
    for code in Code::ALL {
        assert!(CASES.iter().any(|(c, _, _)| *c == code), "no snapshot case for {code}");
    }
}

#[test]
fn snapshots() {
    for (code, name, case) in CASES {
        let src = format!("{BASE}{case}");
        let rendered = diagnose(&src);
        assert!(
            rendered.contains(&format!("error[{code}]")),
            "{name} does not report {code}:\n{rendered}"
        );
        insta::assert_snapshot!(*name, rendered);
    }
}

#[test]
fn the_base_is_valid() {
    assert_eq!(diagnose(BASE), "");
}

#[test]
fn every_code_is_documented() {
    let doc = include_str!("../../../docs/app-file.md");
    for code in Code::ALL {
        assert!(
            doc.contains(&format!("`{code}`")),
            "{code} is missing from docs/app-file.md"
        );
    }
}
