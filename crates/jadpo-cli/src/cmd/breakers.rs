//! `jadpo breakers [--json] [--store URL] [--app FILE]`
//!
//! Each connection's circuit breaker: its state, the unavailable attempts
//! in a row, when it opened, its pause, the probe out, the deliveries it
//! holds, and whether this outage's alert was raised. With the app file, a
//! connection whose breaker has no row yet is shown closed. Exit codes: 0
//! shown; 1 `app.invalid`; 2 `store.*`, `app.unreadable`.

use super::{AppArg, StoreArg};
use crate::operator::{self, Need};
use crate::output::{self, time_short, CliError};
use crate::store_url;
use crate::views;
use jadpo_core::BreakerState;
use jadpo_lang::App;
use jadpo_store::{BreakerView, Store};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Print one JSON array of breakers.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
}

pub(crate) fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let app = operator::load_app(args.app.app.as_deref(), Need::Optional)?;
        let (_, store) = store_url::open_for(args.store.store.as_deref(), app.as_ref()).await?;
        show(&store, app.as_ref(), args.json).await
    })
}

async fn show<S: Store>(store: &S, app: Option<&App>, json: bool) -> Result<ExitCode, CliError> {
    let list = views::breakers(store, app).await.map_err(CliError::store)?;
    if json {
        let now = views::store_clock(store).await?.now();
        let limits = views::limits(store, app, now).await.map_err(CliError::store)?;
        output::print_json(&views::breakers_with_limits_json(&list, &limits));
    } else if list.is_empty() {
        output::print("no breakers yet: no connection has been called, and no app file lists any\n");
    } else {
        output::print(&table(&list));
        if let Some(note) = views::scaled_note(&views::store_clock(store).await?) {
            eprintln!("note: times are this store's engine clock, {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn table(list: &[BreakerView]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|v| {
            let b = &v.breaker;
            let closed = b.state == BreakerState::Closed;
            let dash = || "-".to_owned();
            vec![
                b.connection.clone(),
                b.state.to_string(),
                b.consecutive_unavailable.to_string(),
                b.opened_at.filter(|_| !closed).map_or_else(dash, time_short),
                if closed {
                    dash()
                } else {
                    output::duration_short(b.pause)
                },
                match (b.probe, b.probe_due_at()) {
                    (Some(p), _) if b.state == BreakerState::Probing => format!("delivery {}", p.delivery),
                    (_, Some(at)) => format!("due {}", time_short(at)),
                    _ => dash(),
                },
                v.held.to_string(),
                if b.alert_raised { "raised" } else { "-" }.to_owned(),
            ]
        })
        .collect();
    output::table(
        &[
            "CONNECTION",
            "STATE",
            "UNAVAILABLE IN A ROW",
            "OPENED AT",
            "PAUSE",
            "PROBE",
            "HELD",
            "ALERT",
        ],
        &rows,
    )
}
