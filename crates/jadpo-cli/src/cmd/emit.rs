//! `jadpo emit EVENT JSON [--store URL] [--app FILE] [--json]`
//!
//! Checks the payload against the event declared in the app (a missing
//! field, a wrong type or an unknown field is `event.invalid` naming the
//! field), then writes the event and one due delivery per subscriber. The
//! payload is checked before the store is opened, so bad input is told
//! apart from a store that is down. Exit codes: 0 emitted; 1
//! `event.invalid`, `event.unknown`, `event.too_large`,
//! `event.traceparent_invalid`, `event.tracestate_invalid`, `app.invalid`; 2
//! `app.unreadable`, `store.url_invalid`, `store.unavailable`.

use super::{AppArg, StoreArg};
use crate::operator::{self, Need};
use crate::output::{self, CliError};
use crate::store_url;
use jadpo_runtime::emit::MAX_PAYLOAD_BYTES;
use jadpo_store::ScheduleStore;
use serde_json::{json, Value};
use std::io::Read;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The event's name, as the app declares it (such as PaymentReceived).
    pub event: String,
    /// The payload: a JSON object with the event's fields, or `-` to read it
    /// from standard input.
    #[arg(value_name = "JSON")]
    pub payload: String,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
    /// Print `{"event_id", "public_id", "deliveries", "delivery_ids"}` as JSON
    /// (and `"duplicate": true` when the idempotency key was used before).
    #[arg(long)]
    pub json: bool,
    /// Emit under this key (1 to 255 bytes): the same key and payload again
    /// returns the first event and makes nothing; another payload is refused
    /// (event.idempotency_conflict).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// The trace the event joins, as a W3C `traceparent` (such as
    /// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01): each
    /// attempt of its deliveries belongs to it (docs/observability.md).
    #[arg(long, value_name = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with --traceparent (such as
    /// vendor=value,other=value; at most 512 bytes).
    #[arg(long, value_name = "TRACESTATE", requires = "traceparent")]
    pub tracestate: Option<String>,
}

pub(crate) fn run(args: Args) -> ExitCode {
    output::run_async(emit(args))
}

fn read_payload(arg: &str) -> Result<Value, CliError> {
    let text = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .take(MAX_PAYLOAD_BYTES as u64 * 4)
            .read_to_string(&mut text)
            .map_err(|e| CliError::environment("cli.stdin", format!("cannot read the payload from stdin: {e}")))?;
        text
    } else {
        arg.to_owned()
    };
    // serde_json's message names a line and column, never the text itself.
    serde_json::from_str(&text).map_err(|e| CliError::invalid("event.invalid", format!("the payload is not JSON: {e}")))
}

async fn emit(args: Args) -> Result<ExitCode, CliError> {
    let payload = read_payload(&args.payload)?;
    let app = operator::load_app(args.app.app.as_deref(), Need::Required)?.unwrap_or_else(operator::empty_app);
    jadpo_runtime::emit::prepare(&app, &args.event, &payload).map_err(event_error)?;
    let mut options = jadpo::EmitOptions::default();
    if let Some(key) = &args.idempotency_key {
        options.idempotency_key = Some(jadpo_runtime::emit::idempotency_key(key).map_err(event_error)?);
    }
    if let Some(parent) = &args.traceparent {
        options.trace = Some(trace_of(parent, args.tracestate.as_deref())?);
    }
    let url = store_url::for_event(args.store.store.as_deref(), Some(&app), Some(&args.event))?;
    let store = store_url::open(&url).await?;
    let out = emit_in(app, store, &args.event, &payload, &options).await?;
    if args.json {
        output::print_json(&out);
    } else if out["duplicate"] == true {
        output::print(&format!(
            "already emitted {} under this key: event {}, nothing made\n",
            args.event, out["event_id"]
        ));
    } else {
        output::print(&format!(
            "emitted {}: event {}, {} deliver{}\n",
            args.event,
            out["event_id"],
            out["deliveries"],
            if out["deliveries"] == 1 { "y" } else { "ies" }
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--traceparent` and `--tracestate`, both refused when malformed: on the
/// command line they are the operator's own words, not a header to skip.
fn trace_of(parent: &str, state: Option<&str>) -> Result<jadpo_core::TraceContext, CliError> {
    let trace = jadpo_core::TraceContext::parse(parent, state)
        .map_err(|e| CliError::invalid("event.traceparent_invalid", format!("--traceparent: {e}")))?;
    if state.is_some() && trace.tracestate().is_none() {
        return Err(CliError::invalid(
            "event.tracestate_invalid",
            format!(
                "--tracestate must be a comma-separated list of key=value members (keys in lowercase, \
                 at most 32 members, at most {} bytes)",
                jadpo_core::trace::MAX_TRACESTATE
            ),
        ));
    }
    Ok(trace)
}

fn event_error(e: jadpo_runtime::emit::EventError) -> CliError {
    let message = match e.field() {
        Some(field) if !e.message().contains(field) => format!("{} (field `{field}`)", e.message()),
        _ => e.message().to_owned(),
    };
    CliError::invalid(e.code(), message)
}

async fn emit_in<S: ScheduleStore>(
    app: jadpo_lang::App,
    store: S,
    event: &str,
    payload: &Value,
    options: &jadpo::EmitOptions,
) -> Result<Value, CliError> {
    let client = operator::client(app, store).await?;
    let emitted = client.emit_with(event, payload, options).await;
    let emitted = emitted.map_err(|e| match e {
        jadpo::EmitError::Event(e) => event_error(e),
        jadpo::EmitError::Store(e @ jadpo_store::StoreError::IdempotencyConflict(_)) => {
            CliError::invalid("event.idempotency_conflict", e.to_string())
        }
        jadpo::EmitError::Store(e) => CliError::store(e),
        e => CliError::environment(e.code(), e.to_string()),
    })?;
    let ids: Vec<i64> = emitted.deliveries.iter().map(|d| d.0).collect();
    let mut out = json!({
        "event_id": emitted.event_id.0,
        "public_id": emitted.public_id,
        "deliveries": ids.len(),
        "delivery_ids": ids
    });
    if emitted.duplicate {
        out["duplicate"] = json!(true);
    }
    Ok(out)
}
