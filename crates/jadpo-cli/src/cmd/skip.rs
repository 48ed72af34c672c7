//! `jadpo deliveries skip ID... [--by NAME] [--json]`
//!
//! An operator's skip (docs/retries.md, "Order per key"): each failed or
//! parked delivery records who skipped it and when, keeps its state and
//! its failure, and is never called again. A `strict` key it blocked goes
//! on with its next delivery. A delivery in another state, or skipped
//! already, is left as it is, each with the reason.
//!
//! Exit codes: 0 every delivery named was skipped; 1 one was not (not
//! found, not failed or parked, skipped already); 2 `store.*`,
//! `app.unreadable`, `cli.usage` (a `--by` that is empty, over 64 bytes or
//! holds a control character).

use crate::operator;
use crate::output::{self, CliError};
use crate::views;
use jadpo_core::{Delivery, DeliveryId, DeliveryState};
use jadpo_lang::App;
use jadpo_store::ScheduleStore;
use serde_json::json;
use std::collections::BTreeSet;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct SkipArgs {
    /// The deliveries to skip, by id.
    #[arg(value_name = "ID", required = true)]
    pub ids: Vec<i64>,
    /// Who skips them, as recorded on each (default: $USER, else `cli`).
    #[arg(long, value_name = "NAME", value_parser = parse_by)]
    pub by: Option<String>,
}

fn parse_by(s: &str) -> Result<String, String> {
    jadpo_core::delivery::check_operator_name(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// `--by`, else the user's login name when it can be recorded, else `cli`.
fn operator_name(args: &SkipArgs) -> String {
    args.by.clone().unwrap_or_else(|| {
        std::env::var("USER")
            .ok()
            .filter(|u| jadpo_core::delivery::check_operator_name(u).is_ok())
            .unwrap_or_else(|| "cli".into())
    })
}

/// A delivery not skipped, and why.
struct Left {
    id: DeliveryId,
    state: Option<DeliveryState>,
    reason: String,
}

fn not_skippable(d: &Delivery) -> Left {
    let reason = match &d.skipped {
        Some(s) => format!("already {}", views::skipped_text(s)),
        None => format!("is {}: only failed and parked deliveries are skipped", d.state),
    };
    Left {
        id: d.id,
        state: Some(d.state),
        reason,
    }
}

pub(crate) async fn skip<S: ScheduleStore + Clone>(
    store: S,
    app: Option<App>,
    args: &SkipArgs,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let by = operator_name(args);
    let mut left = Vec::new();
    let mut candidates = Vec::new();
    let mut seen = BTreeSet::new();
    for id in args.ids.iter().copied().map(DeliveryId) {
        if !seen.insert(id) {
            continue;
        }
        match store.delivery(id).await.map_err(CliError::store)? {
            None => left.push(Left {
                id,
                state: None,
                reason: "no such delivery".into(),
            }),
            Some(d) if !d.skippable_by_operator() => left.push(not_skippable(&d)),
            Some(d) => candidates.push(d.id),
        }
    }
    let mut skipped = Vec::new();
    if !candidates.is_empty() {
        let client = operator::client(app.unwrap_or_else(operator::empty_app), store.clone()).await?;
        for chunk in candidates.chunks(jadpo_store::MAX_BATCH) {
            let done = client.skip(chunk, &by).await.map_err(|e| match e {
                jadpo::SkipError::Store(e) => CliError::store(e),
                jadpo::SkipError::By(e) => CliError::environment("cli.usage", e.to_string()),
                e => CliError::environment(e.code(), e.to_string()),
            })?;
            for id in chunk.iter().filter(|id| !done.contains(id)) {
                left.push(Left {
                    id: *id,
                    state: None,
                    reason: "changed state meanwhile: not skipped".into(),
                });
            }
            skipped.extend(done);
        }
    }
    if json_out {
        let left: Vec<_> = left
            .iter()
            .map(|l| json!({"id": l.id.0, "state": l.state.map(|s| s.as_str()), "reason": l.reason}))
            .collect();
        output::print_json(&json!({
            "skipped": skipped.iter().map(|d| d.0).collect::<Vec<_>>(),
            "by": by,
            "not_skipped": left,
        }));
    } else {
        let mut out = String::new();
        if !skipped.is_empty() {
            let n = skipped.len();
            let list: Vec<String> = skipped.iter().map(ToString::to_string).collect();
            out.push_str(&format!(
                "skipped {n} deliver{}: {} (by {by}; nothing was called)\n",
                if n == 1 { "y" } else { "ies" },
                list.join(", ")
            ));
        }
        for l in &left {
            out.push_str(&format!("not skipped {}: {}\n", l.id, l.reason));
        }
        output::print(&out);
    }
    Ok(if left.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(output::EXIT_INVALID)
    })
}
