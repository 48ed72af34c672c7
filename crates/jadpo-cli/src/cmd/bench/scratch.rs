//! The bench's own store, so it never mixes with the rows already there: a
//! fresh schema on the PostgreSQL server the URL names, or a fresh SQLite
//! file in a new folder beside the file the URL names (in the system's
//! temporary folder without a URL). Removed at the end unless kept.

use crate::output::CliError;
use crate::store_url::{self, AnyStore, Kind};
use jadpo_store::postgres::{scratch, Options, PgStore};
use jadpo_store::sqlite::SqliteStore;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) enum Scratch {
    Sqlite {
        dir: PathBuf,
        url: String,
    },
    Postgres {
        /// The URL given: the server and database.
        server: String,
        schema: String,
    },
}

fn stamp() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{}_{secs}", std::process::id())
}

fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

impl Scratch {
    /// Makes the fresh schema or folder for `url` (`None`: a temporary
    /// SQLite file).
    pub(super) async fn create(url: Option<&str>) -> Result<Scratch, CliError> {
        let Some(url) = url.map(str::trim).filter(|u| !u.is_empty()) else {
            return Scratch::sqlite_in(&std::env::temp_dir());
        };
        match store_url::kind(url)? {
            Kind::Sqlite => {
                let path = jadpo_store::sqlite::parse_url(url).map_err(CliError::store)?;
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                Scratch::sqlite_in(&parent)
            }
            Kind::Postgres => {
                let schema = format!("jadpo_bench_{}", stamp());
                scratch::create_schema(url, &schema).await.map_err(|e| {
                    CliError::environment(
                        "store.unavailable",
                        format!(
                            "cannot create the bench's schema on {}: {}",
                            store_url::redact(url),
                            match e {
                                jadpo_store::StoreError::Unavailable(why) => why,
                                other => other.to_string(),
                            }
                        ),
                    )
                })?;
                Ok(Scratch::Postgres {
                    server: url.to_owned(),
                    schema,
                })
            }
        }
    }

    fn sqlite_in(parent: &Path) -> Result<Scratch, CliError> {
        let dir = parent.join(format!("jadpo-bench-{}", stamp().replace('_', "-")));
        std::fs::create_dir_all(parent)
            .and_then(|_| std::fs::create_dir(&dir))
            .map_err(|e| {
                CliError::environment(
                    "store.unavailable",
                    format!("cannot create the bench's folder {}: {e}", dir.display()),
                )
            })?;
        let dir = dir.canonicalize().unwrap_or(dir);
        let url = format!("sqlite:{}", dir.join("bench.db").display());
        Ok(Scratch::Sqlite { dir, url })
    }

    /// Opens (and migrates) the store in the schema or folder.
    pub(super) async fn open(&self) -> Result<AnyStore, CliError> {
        match self {
            Scratch::Sqlite { url, .. } => SqliteStore::open(url)
                .await
                .map(AnyStore::Sqlite)
                .map_err(CliError::store),
            Scratch::Postgres { server, schema } => {
                // Named after the schema, so its drop can end them.
                let url = with_param(server, &format!("application_name={schema}"));
                let options = Options {
                    schema: Some(schema.clone()),
                    ..Options::default()
                };
                PgStore::connect(&url, options)
                    .await
                    .map(AnyStore::Postgres)
                    .map_err(CliError::store)
            }
        }
    }

    pub(super) fn kind(&self) -> &'static str {
        match self {
            Scratch::Sqlite { .. } => "sqlite",
            Scratch::Postgres { .. } => "postgres",
        }
    }

    /// The PostgreSQL schema, if any.
    pub(super) fn schema(&self) -> Option<&str> {
        match self {
            Scratch::Sqlite { .. } => None,
            Scratch::Postgres { schema, .. } => Some(schema),
        }
    }

    /// A URL other commands reach the bench's store with (password hidden):
    /// `jadpo deliveries --store URL`.
    pub(super) fn url(&self) -> String {
        match self {
            Scratch::Sqlite { url, .. } => url.clone(),
            Scratch::Postgres { server, schema } => {
                store_url::redact(&with_param(server, &format!("options=-c%20search_path%3D{schema}")))
            }
        }
    }

    /// Drops the schema or removes the folder. Failing to is said on
    /// stderr, not an error: the figures are already measured.
    pub(super) async fn remove(self) {
        let what = self.url();
        let failed = match self {
            Scratch::Sqlite { dir, .. } => std::fs::remove_dir_all(&dir).err().map(|e| e.to_string()),
            Scratch::Postgres { server, schema } => scratch::drop_schema(&server, &schema)
                .await
                .err()
                .map(|e| e.to_string()),
        };
        if let Some(why) = failed {
            eprintln!("warning: could not remove the bench's store {what}: {why}");
        }
    }
}
