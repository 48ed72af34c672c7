//! Which store a command uses, and opening it.
//!
//! The URL is `--store URL`, else `$JADPO_STORE`, else
//! `sqlite:.jadpo/jadpo.db`. Its shape is checked before anything is opened,
//! so a URL that can never work (`store.url_invalid`) is told apart from a
//! store that can't be reached now (`store.unavailable`); both exit 2.
//!
//! What it opens is the store crate's [`AnyStore`], either store behind
//! the same traits: each command is compiled once, for it.

use crate::output::CliError;
use jadpo_store::postgres::{Options, PgStore};
use jadpo_store::sqlite::{SqliteOptions, SqliteStore};
pub(crate) use jadpo_store::AnyStore;

/// The embedded default, relative to the current folder.
pub(crate) const DEFAULT_URL: &str = "sqlite:.jadpo/jadpo.db";

/// The environment variable read when `--store` is not given.
pub(crate) const ENV_VAR: &str = "JADPO_STORE";

/// Said with every `store.url_invalid`.
pub(crate) const ACCEPTED: &str = "a store URL is sqlite:PATH (such as sqlite:.jadpo/jadpo.db) \
    or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (postgresql:// too)";

/// The kinds of store a URL can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
}

/// The URL to use: the flag, else `$JADPO_STORE` (when not empty), else the
/// default.
pub(crate) fn resolve(flag: Option<&str>) -> String {
    if let Some(url) = flag {
        return url.to_owned();
    }
    match std::env::var(ENV_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => DEFAULT_URL.to_owned(),
    }
}

/// Unsets `$JADPO_STORE` when it is empty or only whitespace, before the
/// command line is parsed. docs/cli.md promises such a value counts as
/// unset, but clap's `env = "JADPO_STORE"` hands a set-but-empty variable
/// to every command as `--store ''`; doing it here, once, keeps every
/// command (and every later `std::env::var`) to one rule. An explicit
/// `--store ''` is still refused: someone typed it.
pub(crate) fn unset_empty_env() {
    if std::env::var_os(ENV_VAR).is_some_and(|v| v.to_str().is_some_and(|s| s.trim().is_empty())) {
        // Called first thing in `main`, before any thread exists that could
        // read the environment at the same time.
        std::env::remove_var(ENV_VAR);
    }
}

fn url_invalid(url: &str, why: &str) -> CliError {
    CliError::environment(
        "store.url_invalid",
        format!("store URL {:?}: {why}; {ACCEPTED}", redact(url)),
    )
}

/// Checks a URL's shape without opening anything.
pub(crate) fn kind(url: &str) -> Result<Kind, CliError> {
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

/// Opens (and migrates) the store at `url`: every migration that stops no
/// older process still running on it.
pub(crate) async fn open(url: &str) -> Result<AnyStore, CliError> {
    open_migrating(url, false).await
}

/// Opens the store at `url` and applies every migration, contracts that stop
/// older processes included (`jadpo migrate --force`).
pub(crate) async fn open_forced(url: &str) -> Result<AnyStore, CliError> {
    open_migrating(url, true).await
}

async fn open_migrating(url: &str, force: bool) -> Result<AnyStore, CliError> {
    let url = url.trim();
    let failed = |e: jadpo_store::StoreError| {
        let code = match e {
            jadpo_store::StoreError::InvalidUrl(_) => "store.unavailable",
            _ => e.code(),
        };
        CliError::environment(code, format!("cannot open the store {}: {}", redact(url), reason(e)))
    };
    match kind(url)? {
        Kind::Sqlite => SqliteStore::open_migrating(url, SqliteOptions::default(), force)
            .await
            .map(AnyStore::Sqlite)
            .map_err(failed),
        Kind::Postgres => {
            let store = PgStore::lazy(url, Options::default()).map_err(failed)?;
            store.migrate_with(force).await.map_err(failed)?;
            Ok(AnyStore::Postgres(store))
        }
    }
}

/// [`for_operator`] then [`open`].
pub(crate) async fn open_for(
    flag: Option<&str>,
    app: Option<&jadpo_lang::App>,
) -> Result<(String, AnyStore), CliError> {
    let url = for_operator(flag, app)?;
    let store = open(&url).await?;
    Ok((url, store))
}

fn reason(e: jadpo_store::StoreError) -> String {
    match e {
        jadpo_store::StoreError::Unavailable(why) => why,
        other => other.to_string(),
    }
}

/// The name of the one store of an app without `store` blocks.
pub(crate) const DEFAULT_NAME: &str = "default";

/// A store of the app, by name, and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub name: String,
    pub url: String,
}

/// `NAME=URL`: a store's name is a word; a URL always has a `:` before any
/// `=`, so the two cannot be confused.
pub(crate) fn split_named(flag: &str) -> Option<(&str, &str)> {
    let (name, url) = flag.split_once('=')?;
    is_name(name).then_some((name, url))
}

/// A word, as an app file names a store: `main`, `audit_2`.
pub(crate) fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn store_unknown(name: &str, app: &jadpo_lang::App) -> CliError {
    let known: Vec<&str> = app.stores.iter().map(|s| s.name.as_str()).collect();
    let message = if known.is_empty() {
        format!(
            "the app declares no store `{name}` (it has no `store` blocks): give a store URL, \
             sqlite:PATH or postgres://USER@HOST/DATABASE"
        )
    } else {
        format!(
            "the app declares no store `{name}`; its stores are {}",
            known.join(", ")
        )
    };
    CliError::environment("store.unknown", message)
}

/// A `store` block's URL: as written, or read from its environment
/// variable now.
fn block_url(store: &jadpo_lang::StoreDecl, env: &dyn Fn(&str) -> Option<String>) -> Result<String, CliError> {
    match &store.url {
        jadpo_lang::Value::String(url) => Ok(url.clone()),
        jadpo_lang::Value::Env(var) | jadpo_lang::Value::Secret(var) => {
            env(var).filter(|u| !u.trim().is_empty()).ok_or_else(|| {
                CliError::environment(
                    "store.url_missing",
                    format!(
                        "store `{}` reads its URL from ${var}, which is not set: set it, or pass \
                         --store {}=URL",
                        store.name, store.name
                    ),
                )
            })
        }
    }
}

/// Every store `dev` and `serve` work, in the app's order, the first the
/// default. Without `store` blocks: the one of `--store` (or
/// $JADPO_STORE, else `default_url`). With them: each block's URL, except
/// where `--store NAME=URL` overrides it; a plain `--store URL` overrides
/// the first.
pub(crate) fn stores_of(
    app: &jadpo_lang::App,
    flags: &[String],
    default_url: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Named>, CliError> {
    if app.stores.is_empty() {
        let url = match flags {
            [] => default_url.map(str::to_owned),
            [one] if split_named(one).is_none() => Some(one.clone()),
            [one] => return Err(store_unknown(split_named(one).map_or("", |(n, _)| n), app)),
            _ => {
                return Err(CliError::invalid(
                    "cli.usage",
                    "more than one --store, but the app has no `store` blocks: give one store URL",
                ))
            }
        };
        return Ok(url
            .map(|url| Named {
                name: DEFAULT_NAME.into(),
                url,
            })
            .into_iter()
            .collect());
    }
    let mut overrides: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    for flag in flags {
        let (name, url) = split_named(flag).unwrap_or((app.stores[0].name.as_str(), flag.as_str()));
        if !app.stores.iter().any(|s| s.name == name) {
            return Err(store_unknown(name, app));
        }
        overrides.insert(name, url);
    }
    app.stores
        .iter()
        .map(|s| {
            let url = match overrides.get(s.name.as_str()) {
                Some(url) => (*url).to_owned(),
                None => block_url(s, env)?,
            };
            kind(&url)?;
            Ok(Named {
                name: s.name.clone(),
                url,
            })
        })
        .collect()
}

/// The store an operator command reads: `--store URL` as written;
/// `--store NAME` (or `NAME=URL`) one of the app's `store` blocks; without
/// the flag, the app's first store, else $JADPO_STORE, else the default.
pub(crate) fn for_operator(flag: Option<&str>, app: Option<&jadpo_lang::App>) -> Result<String, CliError> {
    for_event(flag, app, None)
}

/// [`for_operator`], but without the flag an event goes to its own store.
pub(crate) fn for_event(
    flag: Option<&str>,
    app: Option<&jadpo_lang::App>,
    event: Option<&str>,
) -> Result<String, CliError> {
    let env = |k: &str| std::env::var(k).ok();
    let home = |app: &jadpo_lang::App| {
        let name = event.and_then(|e| app.store_of(e));
        app.stores
            .iter()
            .find(|s| Some(s.name.as_str()) == name)
            .unwrap_or(&app.stores[0])
            .clone()
    };
    match (flag, app) {
        (Some(flag), _) if split_named(flag).is_some() => Ok(split_named(flag).map(|(_, u)| u.to_owned()).unwrap_or_default()),
        (Some(name), Some(app)) if is_name(name) => {
            let store = app.stores.iter().find(|s| s.name == name).ok_or_else(|| store_unknown(name, app))?;
            block_url(store, &env)
        }
        (Some(name), None) if is_name(name) => Err(CliError::environment(
            "store.unknown",
            format!("--store {name} names a store of the app file, but there is no app file: give --app FILE, or a store URL"),
        )),
        (None, Some(app)) if !app.stores.is_empty() => block_url(&home(app), &env),
        (flag, _) => Ok(resolve(flag)),
    }
}

/// The stores for a log line: `sqlite:a.db`, or `main=postgres://u:***@h/db,
/// audit=sqlite:audit.db`; never a password.
pub(crate) fn describe(stores: &[Named]) -> String {
    match stores {
        [one] if one.name == DEFAULT_NAME => redact(&one.url),
        _ => stores
            .iter()
            .map(|s| format!("{}={}", s.name, redact(&s.url)))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The URL without its password (`***` in its place), for messages, log
/// lines and reports: [`jadpo_store::redact_url`], which says what it hides.
/// Every URL a command shows goes through here.
pub(crate) fn redact(url: &str) -> String {
    jadpo_store::redact_url(url)
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
        assert_eq!(redact("postgres://u:a/b?c#d@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://u@h/db?Password=secret"),
            "postgres://u@h/db?Password=***"
        );
    }

    #[test]
    fn a_bad_url_and_the_log_line_never_show_the_password() {
        for url in [
            "postgres://u:secret@h:notaport/db",
            "postgres://u@h/db?sslmode=bogus&password=secret",
            "postgres://u:se/cr?et@h:x/db",
            "host=h password=secret",
            "postgres:u:secret@h/db",
        ] {
            let e = kind(url).unwrap_err();
            assert_eq!(e.code, "store.url_invalid", "{url}");
            assert!(!e.message.contains("secret"), "{url}: {}", e.message);
        }
        let stores = named(&[
            ("main", "postgres://u@h/db?password=secret"),
            ("audit", "postgres://u:secret@h/db"),
        ]);
        let line = describe(&stores);
        assert_eq!(line, "main=postgres://u@h/db?password=***,audit=postgres://u:***@h/db");
    }

    fn app(src: &str) -> jadpo_lang::App {
        jadpo_lang::check("app.jadpo", src).app.expect("a valid app")
    }

    const TWO: &str = "store main { url: env(\"MAIN_URL\") }\nstore audit { url: \"sqlite:audit.db\" }\n\
                       event Paid { id: string }\nevent Audit in audit { id: string }\n";

    fn env(k: &str) -> Option<String> {
        (k == "MAIN_URL").then(|| "postgres://u@h/db".to_owned())
    }

    fn named(pairs: &[(&str, &str)]) -> Vec<Named> {
        pairs
            .iter()
            .map(|(n, u)| Named {
                name: n.to_string(),
                url: u.to_string(),
            })
            .collect()
    }

    #[test]
    fn a_name_before_an_equals_sign_is_a_store_name_a_url_never_is() {
        assert_eq!(split_named("audit=sqlite:a.db"), Some(("audit", "sqlite:a.db")));
        assert_eq!(split_named("postgres://u@h/db?sslmode=disable"), None);
        assert_eq!(split_named("sqlite:a=b.db"), None);
        assert!(is_name("audit_2") && !is_name("2audit") && !is_name("sqlite:a.db") && !is_name(""));
    }

    #[test]
    fn the_stores_of_an_app_come_from_its_blocks_and_the_flags() {
        let none = app("event Paid { id: string }\n");
        let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            stores_of(&none, &[], Some(DEFAULT_URL), &env).unwrap(),
            named(&[("default", DEFAULT_URL)])
        );
        assert_eq!(
            stores_of(&none, &flags(&["sqlite:x.db"]), None, &env).unwrap(),
            named(&[("default", "sqlite:x.db")])
        );
        assert!(
            stores_of(&none, &[], None, &env).unwrap().is_empty(),
            "serve without a store"
        );
        assert_eq!(
            stores_of(&none, &flags(&["audit=sqlite:x.db"]), None, &env)
                .unwrap_err()
                .code,
            "store.unknown"
        );

        let two = app(TWO);
        assert_eq!(
            stores_of(&two, &[], None, &env).unwrap(),
            named(&[("main", "postgres://u@h/db"), ("audit", "sqlite:audit.db")])
        );
        assert_eq!(
            stores_of(&two, &flags(&["audit=sqlite:other.db"]), None, &env).unwrap(),
            named(&[("main", "postgres://u@h/db"), ("audit", "sqlite:other.db")])
        );
        assert_eq!(
            stores_of(&two, &flags(&["sqlite:first.db"]), None, &env).unwrap()[0].url,
            "sqlite:first.db",
            "a plain URL is the first store's"
        );
        let e = stores_of(&two, &flags(&["audti=sqlite:x.db"]), None, &env).unwrap_err();
        assert_eq!((e.code, e.exit), ("store.unknown", 2));
        assert!(e.message.contains("main, audit"), "{}", e.message);
        let e = stores_of(&two, &[], None, &|_| None).unwrap_err();
        assert_eq!(e.code, "store.url_missing");
        assert!(
            e.message.contains("$MAIN_URL") && e.message.contains("--store main=URL"),
            "{}",
            e.message
        );
        assert_eq!(
            stores_of(&two, &flags(&["audit=mysql://x"]), None, &env)
                .unwrap_err()
                .code,
            "store.url_invalid"
        );
    }

    #[test]
    fn an_operator_command_picks_a_store_by_name_and_an_emit_its_events() {
        let two = app(TWO);
        assert_eq!(for_operator(Some("audit"), Some(&two)).unwrap(), "sqlite:audit.db");
        assert_eq!(
            for_operator(Some("audit=sqlite:o.db"), Some(&two)).unwrap(),
            "sqlite:o.db"
        );
        assert_eq!(for_operator(Some("sqlite:u.db"), Some(&two)).unwrap(), "sqlite:u.db");
        assert_eq!(
            for_operator(Some("nope"), Some(&two)).unwrap_err().code,
            "store.unknown"
        );
        assert_eq!(for_operator(Some("audit"), None).unwrap_err().code, "store.unknown");
        assert_eq!(for_event(None, Some(&two), Some("Audit")).unwrap(), "sqlite:audit.db");
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
