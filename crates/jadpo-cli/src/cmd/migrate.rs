//! `jadpo migrate [--store URL] [--force]`: creates or upgrades the store's
//! tables. Safe to run again, and from several processes at once. Applies
//! every migration that stops no older jadpo still running on the store; a
//! contract (one that removes what older versions use) needs `--force`,
//! given once no older process is left (docs/deploy.md, "Upgrades"). Exit
//! codes: 0 migrated; 2 `store.url_invalid`, `store.unavailable`,
//! `store.migration_contract`, `store.schema_newer`.

use super::{AppArg, StoreArg};
use crate::operator;
use crate::output::{self, CliError};
use crate::store_url::{self, AnyStore};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub app: AppArg,
    /// Also apply migrations that stop older jadpo versions (contracts):
    /// only once every older process on the store is stopped.
    #[arg(long)]
    pub force: bool,
}

pub(crate) fn run(args: Args) -> ExitCode {
    output::run_async(async move {
        let app = operator::stores_app(args.app.app.as_deref())?;
        let url = store_url::for_operator(args.store.store.as_deref(), app.as_ref())?;
        // Opening a store migrates it.
        let store = if args.force {
            store_url::open_forced(&url).await?
        } else {
            store_url::open(&url).await?
        };
        let kind = match store {
            AnyStore::Sqlite(_) => "SQLite",
            AnyStore::Postgres(_) => "PostgreSQL",
        };
        output::print(&format!("migrated the {kind} store {}\n", store_url::redact(&url)));
        Ok::<_, CliError>(ExitCode::SUCCESS)
    })
}
