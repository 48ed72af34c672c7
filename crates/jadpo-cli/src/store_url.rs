//! Which store a command uses, and opening it.
//!
//! The URL is `--store URL`, else `$JADPO_STORE`, else
//! `sqlite:.jadpo/jadpo.db`. Its shape is checked before anything is opened,
//! so a URL that can never work (`store.url_invalid`) is told apart from a
//! store that can't be reached now (`store.unavailable`); both exit 2.
//!
//! [`AnyStore`] is either store; [`with_store!`](crate::with_store) runs
//! generic code on whichever it is:
//!
//! ```ignore
//! let store = store_url::open(&url).await?;
//! let n = with_store!(&store, |s| count(s).await)?;
//! ```

use crate::output::CliError;
use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::sqlite::SqliteStore;

/// The embedded default, relative to the current folder.
pub const DEFAULT_URL: &str = "sqlite:.jadpo/jadpo.db";

/// The environment variable read when `--store` is not given.
pub const ENV_VAR: &str = "JADPO_STORE";

/// Said with every `store.url_invalid`.
pub const ACCEPTED: &str = "a store URL is sqlite:PATH (such as sqlite:.jadpo/jadpo.db) \
    or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (postgresql:// too)";

/// The kinds of store a URL can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// An open store of either kind.
#[derive(Clone, Debug)]
pub enum AnyStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Runs `$body` with `$s` bound to the concrete store inside an
/// [`AnyStore`]: the body is compiled once for each kind, so it may call
/// generic functions over `S: ScheduleStore`.
#[macro_export]
macro_rules! with_store {
    ($store:expr, |$s:ident| $body:expr) => {
        match $store {
            $crate::store_url::AnyStore::Sqlite($s) => $body,
            $crate::store_url::AnyStore::Postgres($s) => $body,
        }
    };
}

/// The URL to use: the flag, else `$JADPO_STORE` (when not empty), else the
/// default.
pub fn resolve(flag: Option<&str>) -> String {
    if let Some(url) = flag {
        return url.to_owned();
    }
    match std::env::var(ENV_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => DEFAULT_URL.to_owned(),
    }
}

fn url_invalid(url: &str, why: &str) -> CliError {
    CliError::environment(
        "store.url_invalid",
        format!("store URL {:?}: {why}; {ACCEPTED}", redact(url)),
    )
}

/// Checks a URL's shape without opening anything.
pub fn kind(url: &str) -> Result<Kind, CliError> {
    let url = url.trim();
    if url.is_empty() {
        return Err(url_invalid(url, "it is empty"));
    }
    if url.starts_with("sqlite:") {
        jadpo_store::sqlite::parse_url(url).map_err(|e| url_invalid(url, &reason(e)))?;
        return Ok(Kind::Sqlite);
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // Parses the URL into a pool without connecting.
        PgStore::lazy(url, Options::default()).map_err(|e| url_invalid(url, &reason(e)))?;
        return Ok(Kind::Postgres);
    }
    let why = match url.split_once(':') {
        Some((scheme, _))
            if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("the scheme `{scheme}:` is not one Jadpo knows")
        }
        _ => "it has no scheme".to_owned(),
    };
    Err(url_invalid(url, &why))
}

/// Opens (and migrates) the store at `url`.
pub async fn open(url: &str) -> Result<AnyStore, CliError> {
    let url = url.trim();
    let unavailable = |e: jadpo_store::StoreError| {
        CliError::environment(
            "store.unavailable",
            format!("cannot open the store {}: {}", redact(url), reason(e)),
        )
    };
    match kind(url)? {
        Kind::Sqlite => SqliteStore::open(url).await.map(AnyStore::Sqlite).map_err(unavailable),
        Kind::Postgres => PgStore::open(url).await.map(AnyStore::Postgres).map_err(unavailable),
    }
}

/// [`resolve`] then [`open`].
pub async fn open_flag(flag: Option<&str>) -> Result<(String, AnyStore), CliError> {
    let url = resolve(flag);
    let store = open(&url).await?;
    Ok((url, store))
}

fn reason(e: jadpo_store::StoreError) -> String {
    match e {
        jadpo_store::StoreError::Unavailable(why) => why,
        other => other.to_string(),
    }
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite:a.db"), "sqlite:a.db");
        assert_eq!(redact("postgresql://u:p@q@h/db?x=1"), "postgresql://u:***@h/db?x=1");
    }

    #[tokio::test]
    async fn shapes_are_checked_before_opening() {
        assert_eq!(kind("sqlite:a.db"), Ok(Kind::Sqlite));
        assert_eq!(kind("postgres://u@127.0.0.1/db"), Ok(Kind::Postgres));
        for bad in [
            "",
            "sqlite:",
            "mysql://h/db",
            "a.db",
            "sqlite::memory:",
            "postgres://u@h:notaport/db",
        ] {
            let e = kind(bad).unwrap_err();
            assert_eq!(e.code, "store.url_invalid", "{bad}");
            assert_eq!(e.exit, 2);
            assert!(e.message.contains("sqlite:PATH"), "{}", e.message);
        }
    }
}
