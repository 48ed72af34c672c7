//! `jadpo healthcheck [--url URL]`: asks a running Jadpo whether it is
//! healthy, for a container's `HEALTHCHECK` (an image from `scratch` has no
//! `curl`). Exit codes: 0 when the URL answered 200; 1
//! `healthcheck.unhealthy` for any other answer; 2 `healthcheck.unreachable`
//! when nothing answered within five seconds, `healthcheck.url_invalid`
//! for a URL that is not `http://` or `https://`.

use crate::output::{self, CliError};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// What to ask: `/healthz` (the store answers), `/livez` or `/readyz`
    /// of the process in this container.
    #[arg(long, default_value = "http://127.0.0.1:7420/healthz")]
    pub url: String,
}

pub(crate) fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let url = reqwest::Url::parse(&args.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                CliError::environment(
                    "healthcheck.url_invalid",
                    format!(
                        "--url {:?}: an http:// or https:// URL, such as http://127.0.0.1:7420/healthz",
                        args.url
                    ),
                )
            })?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| CliError::environment("healthcheck.unreachable", e.to_string()))?;
        let answer = client
            .get(url)
            .send()
            .await
            .map_err(|e| CliError::environment("healthcheck.unreachable", format!("{}: {e}", args.url)))?;
        let status = answer.status();
        if status != reqwest::StatusCode::OK {
            return Err(CliError::invalid(
                "healthcheck.unhealthy",
                format!("{} answered {status}", args.url),
            ));
        }
        output::print(&format!("{} answered 200\n", args.url));
        Ok(ExitCode::SUCCESS)
    })
}
