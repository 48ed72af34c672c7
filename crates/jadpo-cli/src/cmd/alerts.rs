//! `jadpo alerts [--json] [--limit N] [--store URL]`
//!
//! The alerts raised, newest first: one `connection_unavailable` per
//! outage, with the connection, when the outage began, how many deliveries
//! were held when it was raised, and when. Exit codes: 0 shown; 2 `store.*`.

use super::StoreArg;
use crate::output::{self, time_short, CliError};
use crate::views;
use crate::{store_url, with_store};
use jadpo_store::Store;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print one JSON array of alerts.
    #[arg(long)]
    pub json: bool,
    /// The most to show, newest first (1 to 10000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    #[command(flatten)]
    pub store: StoreArg,
}

pub fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let (_, store) = store_url::open_flag(args.store.store.as_deref()).await?;
        with_store!(&store, |s| show(s, args.limit as usize, args.json).await)
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
                vec![
                    time_short(a.raised_at),
                    a.alert.clone(),
                    a.connection.clone(),
                    time_short(a.since),
                    a.held.to_string(),
                ]
            })
            .collect();
        output::print(&output::table(
            &["RAISED", "ALERT", "CONNECTION", "SINCE", "HELD"],
            &rows,
        ));
    }
    Ok(ExitCode::SUCCESS)
}
