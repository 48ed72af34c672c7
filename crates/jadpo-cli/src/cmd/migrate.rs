//! `jadpo migrate [--store URL]`: creates or upgrades the store's tables.
//! Safe to run again, and from several processes at once. Exit codes: 0
//! migrated; 2 `store.url_invalid`, `store.unavailable`.

use super::{AppArg, StoreArg};
use crate::operator;
use crate::output::{self, CliError};
use crate::store_url::{self, AnyStore};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
}

pub fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let app = operator::stores_app(args.app.app.as_deref())?;
        let url = store_url::for_operator(args.store.store.as_deref(), app.as_ref())?;
        // Opening a store migrates it.
        let store = store_url::open(&url).await?;
        let kind = match store {
            AnyStore::Sqlite(_) => "SQLite",
            AnyStore::Postgres(_) => "PostgreSQL",
        };
        output::print(&format!("migrated the {kind} store {}\n", store_url::redact(&url)));
        Ok::<_, CliError>(ExitCode::SUCCESS)
    })
}
