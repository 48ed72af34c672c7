//! `jadpo alerts [--json] [--limit N] [--store URL]`
//!
//! The alert messages, newest first: one `connection_unavailable` per
//! outage, with the connection, when the outage began and how many
//! deliveries were held when it was raised, followed by its `resolved`
//! message (how many were released) when the breaker closed; a schedule's
//! `schedule_failing`; and where each one's send to the app's alert route
//! stands. Exit codes: 0 shown; 2 `store.*`.

use super::{AppArg, StoreArg};
use crate::operator;
use crate::output::{self, time_short, CliError};
use crate::store_url;
use crate::views;
use jadpo_store::Store;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Print one JSON array of alerts.
    #[arg(long)]
    pub json: bool,
    /// The most to show, newest first (1 to 10000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
}

pub(crate) fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let app = operator::stores_app(args.app.app.as_deref())?;
        let (_, store) = store_url::open_for(args.store.store.as_deref(), app.as_ref()).await?;
        show(&store, args.limit as usize, args.json).await
    })
}

async fn show<S: Store>(store: &S, limit: usize, json: bool) -> Result<ExitCode, CliError> {
    let list = store.alerts(limit).await.map_err(CliError::store)?;
    if json {
        output::print_json(&views::alerts_json(&list));
    } else if list.is_empty() {
        output::print("no alerts raised\n");
    } else {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|a| {
                let m = &a.message;
                let subject = match (&m.connection, &m.schedule) {
                    (Some(c), _) => c.clone(),
                    (None, Some(s)) => format!("schedule {s}"),
                    (None, None) => String::new(),
                };
                let count = match (m.held, m.released, m.failures) {
                    (Some(n), _, _) => format!("{n} held"),
                    (_, Some(n), _) => format!("{n} released"),
                    (_, _, Some(n)) => format!("{n} failed runs"),
                    _ => String::new(),
                };
                let send = match &a.sends.last_error {
                    Some(code) if a.sends.sent_at.is_none() => format!("{} ({code})", a.sends.state().as_str()),
                    _ => a.sends.state().as_str().to_owned(),
                };
                vec![
                    time_short(m.raised_at),
                    m.alert.clone(),
                    m.kind.as_str().to_owned(),
                    subject,
                    time_short(m.since),
                    count,
                    send,
                ]
            })
            .collect();
        output::print(&output::table(
            &["RAISED", "ALERT", "STATUS", "SUBJECT", "SINCE", "COUNT", "SEND"],
            &rows,
        ));
    }
    Ok(ExitCode::SUCCESS)
}
