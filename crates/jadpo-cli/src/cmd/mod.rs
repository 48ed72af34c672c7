//! One module per subcommand, and the flags several of them share.

pub(crate) mod alerts;
pub(crate) mod bench;
pub(crate) mod breakers;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod deliveries;
pub(crate) mod demo;
pub(crate) mod dev;
pub(crate) mod emit;
pub(crate) mod healthcheck;
pub(crate) mod migrate;
pub(crate) mod process;
pub(crate) mod retry;
pub(crate) mod serve;
pub(crate) mod simulate;
pub(crate) mod skip;

use std::path::PathBuf;
use std::time::Duration;

/// `--store URL`, shared by the operator commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct StoreArg {
    /// The store: sqlite:PATH or postgres://USER@HOST/DB (default:
    /// $JADPO_STORE, else sqlite:.jadpo/jadpo.db).
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, value_name = "URL", global = true)]
    pub store: Option<String>,
}

/// `--app FILE`, shared by the operator commands.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct AppArg {
    /// The app file (default: app.jadpo in the current folder).
    #[arg(long, value_name = "FILE", global = true)]
    pub app: Option<PathBuf>,
}

/// Names this process's leases: host and pid, so an operator can tell
/// which process holds a delivery.
pub(crate) fn worker_name(mode: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    format!("{mode}@{host}:{}", std::process::id())
}

/// `30s`, `5m`, `1h`, `500ms`, `0s` (a bare number is seconds).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 30s, 5m or 0s"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("{s:?}: the unit is one of ms, s, m, h")),
    };
    Ok(d)
}
