//! `jadpo deliveries [--state S] [--subscriber S] [--connection C]
//! [--event ID] [--limit N] [--json]`, `jadpo deliveries show ID [--json]`
//! and `jadpo deliveries skip ID... [--by NAME] [--json]` (`super::skip`).
//!
//! Newest first. Held deliveries are listed with the connection holding
//! them and since when, so an operator sees what an outage holds without
//! reading the breakers (docs/cli.md). `--connection C` lists the deliveries
//! held on C and, when the app file is available, every delivery of a
//! subscriber whose action may call C. Exit codes: 0 listed or shown; 1
//! `delivery.not_found`, `app.invalid`; 2 `store.url_invalid`,
//! `store.unavailable`, `app.unreadable`.

use super::{AppArg, StoreArg};
use crate::operator::{self, Need};
use crate::output::{self, time_short, CliError};
use crate::store_url;
use crate::views::{self, DeliveryQuery};
use jadpo_core::{Delivery, DeliveryId, DeliveryState, EventId};
use jadpo_lang::App;
use jadpo_store::Store;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub show: Option<Sub>,
    #[command(flatten)]
    pub list: ListArgs,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum Sub {
    /// Show one delivery with its attempt history.
    Show(ShowArgs),
    /// Skip failed or parked deliveries: record who and when, call
    /// nothing, and let a `strict` key they block go on (docs/retries.md).
    Skip(super::skip::SkipArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct ShowArgs {
    /// The delivery's id.
    pub id: i64,
}

/// Global, so that clap accepts them after `show ID` too and `run` refuses
/// them there with `cli.usage`, in either order (docs/cli.md).
#[derive(clap::Args, Debug)]
pub(crate) struct ListArgs {
    /// Only deliveries in this state.
    #[arg(long, global = true, value_parser = state_parser())]
    pub state: Option<DeliveryState>,
    /// Only this subscriber's deliveries.
    #[arg(long, value_name = "NAME", global = true)]
    pub subscriber: Option<String>,
    /// Only deliveries held on this connection or whose subscriber's action
    /// may call it (the latter needs the app file).
    #[arg(long, value_name = "NAME", global = true)]
    pub connection: Option<String>,
    /// Only the deliveries of this event.
    #[arg(long, value_name = "ID", global = true)]
    pub event: Option<i64>,
    /// Only the deliveries with this key: their subscriber's `key:` over
    /// their event, such as a customer's id.
    #[arg(long, value_name = "KEY", global = true)]
    pub key: Option<String>,
    /// Only deliveries older than this one: the next page after a listing
    /// whose last delivery was ID.
    #[arg(long, value_name = "ID", global = true)]
    pub before: Option<i64>,
    /// The most deliveries listed, newest first (default 100).
    #[arg(long, value_name = "N", value_parser = views::parse_limit, global = true)]
    pub limit: Option<usize>,
    /// Print one JSON array of deliveries (with `show`: the delivery and
    /// its `history` as one JSON object).
    #[arg(long, global = true)]
    pub json: bool,
}

/// `--state`: every state the core has, by its name, so a state added
/// there is one here too.
fn state_parser() -> impl clap::builder::TypedValueParser<Value = DeliveryState> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(DeliveryState::ALL.map(DeliveryState::as_str))
        .map(|s| DeliveryState::parse(&s).expect("one of the possible values"))
}

pub(crate) fn run(args: Args) -> ExitCode {
    let l = &args.list;
    let filtered = l.state.is_some()
        || l.subscriber.is_some()
        || l.connection.is_some()
        || l.event.is_some()
        || l.key.is_some()
        || l.before.is_some()
        || l.limit.is_some();
    if args.show.is_some() && filtered {
        return CliError::environment(
            "cli.usage",
            format!(
                "`deliveries {} ID` takes no filter (--state, --subscriber, --connection, --event, --key, --before, --limit)",
                if matches!(args.show, Some(Sub::Skip(_))) { "skip" } else { "show" }
            ),
        )
        .report();
    }
    output::run_async(async move {
        let app = operator::load_app(args.app.app.as_deref(), Need::Optional)?;
        let (_, store) = store_url::open_for(args.store.store.as_deref(), app.as_ref()).await?;
        match args.show {
            Some(Sub::Show(show)) => show_one(&store, show.id, args.list.json).await,
            Some(Sub::Skip(skip)) => super::skip::skip(store, app, &skip, args.list.json).await,
            None => list(&store, app.as_ref(), &args.list).await,
        }
    })
}

async fn list<S: Store>(store: &S, app: Option<&App>, args: &ListArgs) -> Result<ExitCode, CliError> {
    if args.connection.is_some() && app.is_none() {
        eprintln!(
            "note: no app file ({}), so --connection lists only the deliveries held on it",
            operator::DEFAULT_APP
        );
    }
    let limit = args.limit.unwrap_or(views::DEFAULT_LIMIT);
    let query = DeliveryQuery {
        state: args.state,
        subscriber: args.subscriber.clone(),
        connection: args.connection.clone(),
        event: args.event.map(EventId),
        key: args.key.clone(),
        before: args.before.map(jadpo_core::DeliveryId),
        limit,
    };
    let (found, more) = views::page(store, app, &query).await.map_err(CliError::store)?;
    let names = views::event_names(store, &found).await.map_err(CliError::store)?;
    // On stderr even with --json, so stdout stays one JSON array.
    let stopped = || {
        if let (true, Some(last)) = (more, found.last()) {
            eprintln!(
                "note: stopped at --limit {limit}; more match: the next page is --before {}",
                last.id
            );
        }
    };
    if args.json {
        output::print_json(&views::deliveries_json(&found, &names));
        stopped();
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        output::print("no deliveries match\n");
        return Ok(ExitCode::SUCCESS);
    }
    output::print(&table(&found, &names));
    stopped();
    if let Some(note) = views::scaled_note(&views::store_clock(store).await?) {
        eprintln!("note: times are this store's engine clock, {note}");
    }
    Ok(ExitCode::SUCCESS)
}

fn failure_text(d: &Delivery) -> String {
    d.last_failure
        .as_ref()
        .map_or_else(|| "-".into(), |f| format!("{} ({})", f.code, f.kind))
}

/// What the WHEN column says: when it is due (and what it waits for, if a
/// connection's limit kept it from starting), until when it runs, since
/// when it is held, or when it finished.
fn when_text(d: &Delivery) -> String {
    match d.state {
        DeliveryState::Due => match &d.waiting {
            Some(w) => format!("due {}, {}", time_short(d.due_at), views::waiting_text(w)),
            None => format!("due {}", time_short(d.due_at)),
        },
        DeliveryState::Running => d
            .lease
            .as_ref()
            .map_or_else(|| "running".into(), |l| format!("lease until {}", time_short(l.until))),
        DeliveryState::Held => d
            .held
            .as_ref()
            .map_or_else(|| "held".into(), |h| format!("held since {}", time_short(h.since))),
        DeliveryState::Queued => format!("queued behind key {}", d.key.as_ref().map_or("", |k| k.as_str())),
        _ => d
            .finished_at
            .map_or_else(|| "-".into(), |t| format!("finished {}", time_short(t))),
    }
}

fn table(found: &[Delivery], names: &BTreeMap<EventId, String>) -> String {
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|d| {
            let event = names.get(&d.event_id).map_or("?", String::as_str);
            vec![
                d.id.to_string(),
                d.subscriber.clone(),
                format!("{event} #{}", d.event_id),
                d.state.to_string(),
                d.attempts.to_string(),
                failure_text(d),
                when_text(d),
                d.held.as_ref().map_or_else(|| "-".into(), |h| h.connection.clone()),
            ]
        })
        .collect();
    output::table(
        &[
            "ID",
            "SUBSCRIBER",
            "EVENT",
            "STATE",
            "ATTEMPTS",
            "LAST FAILURE",
            "WHEN",
            "HELD ON",
        ],
        &rows,
    )
}

async fn show_one<S: Store>(store: &S, id: i64, json: bool) -> Result<ExitCode, CliError> {
    let id = DeliveryId(id);
    let Some(d) = store.delivery(id).await.map_err(CliError::store)? else {
        return Err(CliError::invalid(
            "delivery.not_found",
            format!("no delivery {id} in this store"),
        ));
    };
    let attempts = store.attempts(id).await.map_err(CliError::store)?;
    let record = store.event(d.event_id).await.map_err(CliError::store)?;
    let waits_for = store.waits_for(id).await.map_err(CliError::store)?;
    if json {
        output::print_json(&views::delivery_detail_json(&d, record.as_ref(), &attempts, waits_for));
        return Ok(ExitCode::SUCCESS);
    }
    let trace_id = record
        .as_ref()
        .and_then(|e| e.trace.as_ref())
        .map(|t| t.trace_id().to_owned());
    let event = record.map(|e| e.name);
    let scaled = views::scaled_note(&views::store_clock(store).await?);
    let mut out = format!("delivery {id}\n");
    let mut field = |name: &str, value: String| out.push_str(&format!("  {name:<13} {value}\n"));
    field(
        "event",
        format!("{} (event {})", event.as_deref().unwrap_or("?"), d.event_id),
    );
    field("subscriber", d.subscriber.clone());
    if let Some(key) = &d.key {
        field("key", key.to_string());
    }
    field("state", d.state.to_string());
    field("attempts", d.attempts.to_string());
    field("last failure", failure_text(&d));
    if let Some(h) = &d.held {
        field("held on", format!("{} since {}", h.connection, time_short(h.since)));
    }
    field("when", when_text(&d));
    if let Some(w) = d.waiting.as_ref().filter(|_| d.state == DeliveryState::Due) {
        field("waiting", views::waiting_text(w));
    }
    if d.state == DeliveryState::Queued {
        field("waiting", views::queued_text(&d, waits_for));
    }
    if let Some(s) = &d.skipped {
        field("skipped", views::skipped_text(s));
    }
    field("budget from", time_short(d.budget_from));
    if !d.held_for.is_zero() {
        field("held for", output::duration_short(d.held_for));
    }
    field("created", time_short(d.created_at));
    if let Some(trace_id) = trace_id {
        field("trace", trace_id);
    }
    if let Some(note) = scaled {
        field("clock", format!("{note} (every time above is engine time)"));
    }
    out.push('\n');
    if attempts.is_empty() {
        out.push_str("no attempts yet\n");
    } else {
        let rows: Vec<Vec<String>> = attempts
            .iter()
            .map(|a| {
                let f = a.failure.as_ref();
                vec![
                    a.attempt.to_string(),
                    time_short(a.started_at),
                    output::duration_short(a.ended_at.since(a.started_at)),
                    a.state.to_string(),
                    f.map_or_else(|| "-".into(), |f| f.code.clone()),
                    f.map_or_else(|| "-".into(), |f| f.kind.to_string()),
                ]
            })
            .collect();
        out.push_str(&output::table(
            &["ATTEMPT", "STARTED", "TOOK", "OUTCOME", "CODE", "KIND"],
            &rows,
        ));
    }
    output::print(&out);
    Ok(ExitCode::SUCCESS)
}
