//! `jadpo retry ID...` and `jadpo retry --state failed|parked
//! [--subscriber S] [--connection C] [--key K] [--limit N] [--spread D] [--dry-run]`
//!
//! An operator's retry (docs/retries.md): each failed or parked
//! delivery gets a fresh budget from now, due at a time drawn at random
//! within `--spread` (30s by default) so a bulk retry doesn't reach the
//! provider all at once; a single delivery is due at once. Deliveries in
//! another state are skipped, each with the reason. `--dry-run` lists what
//! would be retried and changes nothing. Large retries show a progress bar
//! on a terminal.
//!
//! Workers are not started: the retry is written to the store, and the
//! workers of `jadpo dev`/`jadpo serve` on that store pick it up. No app file
//! is needed, except for `--connection`.
//!
//! Exit codes: 0 done (a bulk retry that matched nothing included); 1 a
//! delivery named by id was skipped (not found, or not failed/parked), or
//! `connection.unknown`; 2 `store.*`, `app.unreadable`.

use super::{AppArg, StoreArg};
use crate::operator::{self, Need};
use crate::output::{self, CliError};
use crate::store_url;
use crate::views;
use indicatif::{ProgressBar, ProgressStyle};
use jadpo_core::{Delivery, DeliveryId, DeliveryState};
use jadpo_lang::App;
use jadpo_store::{DeliveryFilter, ScheduleStore, Store};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// Deliveries retried per store call; the progress bar moves by as many.
const CHUNK: usize = 500;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "state"])))]
pub(crate) struct Args {
    /// The deliveries to retry, by id.
    #[arg(value_name = "ID", conflicts_with_all = ["state", "subscriber", "connection", "key"])]
    pub ids: Vec<i64>,
    /// Retry the deliveries in this state.
    #[arg(long, value_enum)]
    pub state: Option<RetryState>,
    /// With --state: only this subscriber's deliveries.
    #[arg(long, value_name = "NAME", requires = "state")]
    pub subscriber: Option<String>,
    /// With --state: only the deliveries of subscribers whose action may
    /// call this connection (needs the app file).
    #[arg(long, value_name = "NAME", requires = "state")]
    pub connection: Option<String>,
    /// With --state: only the deliveries with this key (their subscriber's
    /// `key:` over their event).
    #[arg(long, value_name = "KEY", requires = "state")]
    pub key: Option<String>,
    /// With --state: the most deliveries retried by this run, newest first;
    /// run it again for more.
    #[arg(long, value_name = "N", default_value_t = views::MAX_LIMIT, value_parser = views::parse_limit)]
    pub limit: usize,
    /// The window the retried deliveries are spread over, at random (such as
    /// 30s, 5m, 0s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_spread)]
    pub spread: Duration,
    /// List what would be retried; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print `{"dry_run", "retried", "skipped"}` as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
}

/// The states an operator retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RetryState {
    Failed,
    Parked,
}

impl From<RetryState> for DeliveryState {
    fn from(s: RetryState) -> DeliveryState {
        match s {
            RetryState::Failed => DeliveryState::Failed,
            RetryState::Parked => DeliveryState::Parked,
        }
    }
}

/// `30s`, `5m`, `1h`, `500ms`, `0s`; at most an hour.
pub(crate) fn parse_spread(s: &str) -> Result<Duration, String> {
    let d = super::parse_duration(s)?;
    if d > Duration::from_secs(3600) {
        return Err("the spread is at most 1h".into());
    }
    Ok(d)
}

/// A delivery not retried, and why (the JSON's `skipped` list).
struct NotRetried {
    id: DeliveryId,
    state: Option<DeliveryState>,
    reason: String,
}

pub(crate) fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let need_app = if args.connection.is_some() && args.app.app.is_none() {
            Need::Required
        } else {
            Need::Optional
        };
        let app = operator::load_app(args.app.app.as_deref(), need_app)?;
        let (_, store) = store_url::open_for(args.store.store.as_deref(), app.as_ref()).await?;
        retry(store, app, &args).await
    })
}

fn not_retryable(d: &Delivery) -> NotRetried {
    NotRetried {
        id: d.id,
        state: Some(d.state),
        reason: format!("is {}: only failed and parked deliveries are retried", d.state),
    }
}

/// The deliveries a bulk retry takes: in the state, of the subscriber, of
/// the subscribers calling the connection; newest first, at most `limit`;
/// and whether more match (one more is read to know).
async fn matching<S: Store>(
    store: &S,
    app: Option<&App>,
    args: &Args,
    state: DeliveryState,
) -> Result<(Vec<Delivery>, bool), CliError> {
    let subscribers: Option<Vec<String>> = match &args.connection {
        None => None,
        Some(conn) => {
            let app = app.ok_or_else(|| {
                CliError::environment(
                    "app.unreadable",
                    "--connection needs the app file; give it with --app FILE",
                )
            })?;
            if !app.connections.contains_key(conn) {
                return Err(CliError::invalid(
                    "connection.unknown",
                    format!("the app declares no connection `{conn}`"),
                ));
            }
            let calling = views::subscribers_calling(app, conn);
            Some(match &args.subscriber {
                Some(s) => calling.into_iter().filter(|c| c == s).collect(),
                None => calling,
            })
        }
    };
    let base = DeliveryFilter {
        state: Some(state),
        subscriber: args.subscriber.clone(),
        key: args.key.clone(),
        limit: Some(args.limit + 1),
        ..DeliveryFilter::default()
    };
    let mut found = match subscribers {
        None => store.list(&base).await.map_err(CliError::store)?,
        Some(names) => {
            let mut all = Vec::new();
            for name in names {
                let filter = DeliveryFilter {
                    subscriber: Some(name),
                    ..base.clone()
                };
                all.extend(store.list(&filter).await.map_err(CliError::store)?);
            }
            all
        }
    };
    found.sort_by_key(|d| std::cmp::Reverse(d.id));
    found.dedup_by_key(|d| d.id);
    let more = found.len() > args.limit;
    found.truncate(args.limit);
    Ok((found, more))
}

async fn retry<S: ScheduleStore + Clone>(store: S, app: Option<App>, args: &Args) -> Result<ExitCode, CliError> {
    let mut skipped: Vec<NotRetried> = Vec::new();
    let mut candidates: Vec<Delivery> = Vec::new();
    let mut more = false;
    let by_id = args.state.is_none();
    if by_id {
        let mut seen = BTreeSet::new();
        for id in args.ids.iter().copied().map(DeliveryId) {
            if !seen.insert(id) {
                continue;
            }
            match store.delivery(id).await.map_err(CliError::store)? {
                None => skipped.push(NotRetried {
                    id,
                    state: None,
                    reason: "no such delivery".into(),
                }),
                Some(d) if !d.retryable_by_operator() => skipped.push(not_retryable(&d)),
                Some(d) => candidates.push(d),
            }
        }
    } else if let Some(state) = args.state {
        (candidates, more) = matching(&store, app.as_ref(), args, state.into()).await?;
    }

    let mut retried: Vec<DeliveryId> = Vec::new();
    if args.dry_run {
        retried = candidates.iter().map(|d| d.id).collect();
    } else if !candidates.is_empty() {
        let client = operator::client(app.unwrap_or_else(operator::empty_app), store.clone()).await?;
        let bar = if candidates.len() > CHUNK && std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(candidates.len() as u64);
            if let Ok(style) = ProgressStyle::with_template("retrying {bar:40} {pos}/{len} {elapsed}") {
                bar.set_style(style);
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        for chunk in candidates.chunks(CHUNK) {
            let ids: Vec<DeliveryId> = chunk.iter().map(|d| d.id).collect();
            let done = client.retry(&ids, args.spread).await.map_err(CliError::store)?;
            let done_set: BTreeSet<DeliveryId> = done.iter().copied().collect();
            for d in chunk.iter().filter(|d| !done_set.contains(&d.id)) {
                skipped.push(NotRetried {
                    id: d.id,
                    state: None,
                    reason: "changed state meanwhile: not retried".into(),
                });
            }
            retried.extend(done);
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
    }

    report(args, &candidates, more, &retried, &skipped);
    let explicit_skip = by_id && !skipped.is_empty();
    Ok(if explicit_skip {
        ExitCode::from(output::EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    })
}

/// `more`: a `--state` retry stopped at `--limit` with more matching.
fn report(args: &Args, candidates: &[Delivery], more: bool, retried: &[DeliveryId], skipped: &[NotRetried]) {
    let stopped = format!("(stopped at --limit {}; run again for more)\n", args.limit);
    if args.json {
        output::print_json(&report_json(args, retried, skipped));
        // Not on stdout, which stays one JSON object.
        if more {
            eprint!("note: {stopped}");
        }
        return;
    }
    let mut out = outcome_text(args, candidates, retried, skipped);
    for s in skipped {
        out.push_str(&format!("skipped {}: {}\n", s.id, s.reason));
    }
    if more {
        out.push_str(&stopped);
    }
    output::print(&out);
}

fn report_json(args: &Args, retried: &[DeliveryId], skipped: &[NotRetried]) -> serde_json::Value {
    let skipped: Vec<_> = skipped
        .iter()
        .map(|s| json!({"id": s.id.0, "state": s.state.map(|s| s.as_str()), "reason": s.reason}))
        .collect();
    json!({
        "dry_run": args.dry_run,
        "retried": retried.iter().map(|d| d.0).collect::<Vec<_>>(),
        "skipped": skipped,
        "spread_ms": u64::try_from(args.spread.as_millis()).unwrap_or(u64::MAX),
    })
}

/// The line saying what was (or in a dry run, would be) retried, after the
/// dry run's table of candidates; empty when all were skipped.
fn outcome_text(args: &Args, candidates: &[Delivery], retried: &[DeliveryId], skipped: &[NotRetried]) -> String {
    let mut out = String::new();
    let n = retried.len();
    let plural = if n == 1 { "y" } else { "ies" };
    // Beyond 20 the ids would drown the line; `--json` lists them all.
    let ids = if (1..=20).contains(&n) {
        let list: Vec<String> = retried.iter().map(ToString::to_string).collect();
        format!(": {}", list.join(", "))
    } else {
        String::new()
    };
    if n == 0 && skipped.is_empty() {
        out.push_str("nothing to retry: no delivery matches\n");
    } else if args.dry_run {
        if n > 0 {
            out.push_str(&candidates_table(candidates));
        }
        out.push_str(&format!(
            "would retry {n} deliver{plural}{ids} (dry run: nothing changed)\n"
        ));
    } else if n > 0 {
        let when = if n > 1 && !args.spread.is_zero() {
            format!("due over the next {}", output::duration_short(args.spread))
        } else {
            "due now".into()
        };
        out.push_str(&format!(
            "retried {n} deliver{plural}{ids} ({when}, each with a fresh budget)\n"
        ));
    }
    out
}

fn candidates_table(candidates: &[Delivery]) -> String {
    let rows: Vec<Vec<String>> = candidates
        .iter()
        .map(|d| {
            vec![
                d.id.to_string(),
                d.subscriber.clone(),
                d.state.to_string(),
                d.attempts.to_string(),
                d.last_failure
                    .as_ref()
                    .map_or_else(|| "-".into(), |f| format!("{} ({})", f.code, f.kind)),
            ]
        })
        .collect();
    output::table(&["ID", "SUBSCRIBER", "STATE", "ATTEMPTS", "LAST FAILURE"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag's default is the one the embedded API uses: clap needs it
    /// as text, so the two are kept equal here.
    #[test]
    fn the_default_spread_is_the_embedded_apis() {
        let command = <Args as clap::Args>::augment_args(clap::Command::new("retry"));
        let spread = command
            .get_arguments()
            .find(|a| a.get_id() == "spread")
            .and_then(|a| a.get_default_values().first().cloned())
            .expect("--spread has a default");
        assert_eq!(parse_spread(spread.to_str().unwrap()), Ok(jadpo::RETRY_SPREAD));
    }

    #[test]
    fn spreads_are_short_durations() {
        assert_eq!(parse_spread("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_spread("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_spread("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_spread("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_spread("2h").is_err());
        assert!(parse_spread("soon").is_err());
        assert!(parse_spread("3d").is_err());
    }
}
