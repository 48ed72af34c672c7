//! Upgrades without an outage: which migrations a build applies, and
//! whether it may run on the schema it finds. Pure: the drivers read the
//! store's migrations table, ask here, and do what the answer says.
//!
//! Every migration is an *expand* (it adds; every build already running on
//! the store keeps working) or a *contract* (it removes or changes what
//! builds before some version use). A rolling deploy ships expands: the new
//! build's processes migrate at start while the old ones keep claiming.
//! A contract ships in a later version and is applied only by
//! `jadpo migrate --force`, once no older process is left
//! (docs/deploy.md, "Upgrades").
//!
//! Each applied migration records its *oldest reader*: the oldest build
//! (named by the newest migration it knows) that still runs on the store
//! once it is applied. A build runs on a store whose schema is newer than it
//! knows while that store's oldest reader is not newer than the build; it
//! finds out at start and, while it runs, at every tick.

use std::fmt;

/// A schema version: the number of the newest migration applied or known.
pub type Version = i32;

/// What a migration does to builds already running on the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Adds only: every build that ran on the store before keeps running.
    Expand,
    /// Removes or changes something builds older than `oldest_reader` use:
    /// they stop working once it is applied.
    Contract {
        /// The oldest build (by the newest migration it knows) still running
        /// once it is applied.
        oldest_reader: Version,
    },
}

/// One migration as a build knows it.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Its number: the store's schema version once it is applied.
    pub version: Version,
    /// Whether it expands or contracts.
    pub change: Change,
    /// The statements it runs.
    pub sql: &'static str,
}

impl Migration {
    /// A migration that only adds.
    pub const fn expand(version: Version, sql: &'static str) -> Migration {
        Migration {
            version,
            change: Change::Expand,
            sql,
        }
    }

    /// A migration that stops builds older than `oldest_reader`: applied at
    /// start only when no such build may still run on the store, else by
    /// `jadpo migrate --force`.
    pub const fn contract(version: Version, oldest_reader: Version, sql: &'static str) -> Migration {
        Migration {
            version,
            change: Change::Contract { oldest_reader },
            sql,
        }
    }
}

/// One row of the store's migrations table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The migration's number.
    pub version: Version,
    /// `None` when a build from before oldest readers were recorded
    /// applied it.
    pub oldest_reader: Option<Version>,
}

/// What a build does with the store's schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Apply these migrations in order, each recorded with its oldest
    /// reader (none: the store is current).
    Apply(Vec<(Version, Version)>),
    /// The store is newer than this build through changes it still runs
    /// on: apply nothing, run on it as it is.
    Ahead {
        /// The store's schema version.
        store: Version,
    },
}

/// Why a build may not migrate, or not run on, the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `store.schema_newer`: the store's schema needs a build at least as
    /// new as `needs`; this one knows `build`.
    SchemaNewer {
        /// The store's schema version.
        store: Version,
        /// The oldest build that runs on it.
        needs: Version,
        /// The newest migration this build knows.
        build: Version,
    },
    /// `store.migration_contract`: migration `version` would stop builds
    /// older than `oldest_reader`, and builds as old as `running` may still
    /// run on the store.
    ContractPending {
        /// The contract's number.
        version: Version,
        /// The oldest build that runs once it is applied.
        oldest_reader: Version,
        /// The oldest build that may still be running on the store.
        running: Version,
    },
}

impl Refusal {
    /// The stable error code: `store.schema_newer` or
    /// `store.migration_contract`.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::SchemaNewer { .. } => "store.schema_newer",
            Refusal::ContractPending { .. } => "store.migration_contract",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::SchemaNewer { store, needs, build } => write!(
                f,
                "the store's schema is at version {store} and needs a jadpo that knows schema {needs} or later; \
                 this jadpo knows schema {build}: stop this process and run the newer jadpo (docs/deploy.md, \"Upgrades\")"
            ),
            Refusal::ContractPending {
                version,
                oldest_reader,
                running,
            } => write!(
                f,
                "migration {version} removes what jadpo builds before schema {oldest_reader} use, and builds as old as \
                 schema {running} may still run on this store: stop every older jadpo process, then run \
                 `jadpo migrate --force` (docs/deploy.md, \"Upgrades\")"
            ),
        }
    }
}

/// Each known migration's oldest reader: the largest contract's up to it.
pub fn oldest_readers(known: &[Migration]) -> Vec<(Version, Version)> {
    let mut oldest = 0;
    known
        .iter()
        .map(|m| {
            if let Change::Contract { oldest_reader } = m.change {
                oldest = oldest.max(oldest_reader);
            }
            (m.version, oldest)
        })
        .collect()
}

/// The oldest build that runs on the store as `applied` describes it. A
/// migration this build does not know and that records no oldest reader
/// counts as a contract of its own version: unknown, so assumed breaking.
pub fn needs(known: &[Migration], applied: &[Applied]) -> Version {
    let readers = oldest_readers(known);
    applied
        .iter()
        .map(|a| {
            a.oldest_reader.unwrap_or_else(|| {
                readers
                    .iter()
                    .find(|(v, _)| *v == a.version)
                    .map_or(a.version, |(_, r)| *r)
            })
        })
        .max()
        .unwrap_or(0)
}

/// The newest version `known` holds.
pub fn latest(known: &[Migration]) -> Version {
    known.last().map_or(0, |m| m.version)
}

/// Whether a build knowing `known` runs on the store as it is, after any
/// migration it would apply: what a running process checks at each tick.
pub fn check(known: &[Migration], applied: &[Applied]) -> Result<(), Refusal> {
    let build = latest(known);
    let store = applied.iter().map(|a| a.version).max().unwrap_or(0);
    let needs = needs(known, applied);
    if needs > build {
        return Err(Refusal::SchemaNewer { store, needs, build });
    }
    Ok(())
}

/// Where the store's schema stands against a build's, for a readiness
/// probe (`GET /readyz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The newest migration applied to the store (0: none).
    pub store: Version,
    /// The newest migration this build knows.
    pub build: Version,
    /// The oldest build that runs on the store ([`needs`]).
    pub needs: Version,
}

/// Where a store `applied` describes stands against a build knowing `known`.
pub fn standing(known: &[Migration], applied: &[Applied]) -> Standing {
    Standing {
        store: applied.iter().map(|a| a.version).max().unwrap_or(0),
        build: latest(known),
        needs: needs(known, applied),
    }
}

impl Standing {
    /// Why this build should take no work on the store, if it should not,
    /// as a stable code and a message: `store.schema_older`, the store lacks migrations this build uses (what it writes would
    /// fail), or `store.schema_newer`, it is newer than this build runs on.
    /// A store newer through
    /// expands only is fine: that is a rolling deploy under way, whose older
    /// processes keep working (docs/deploy.md, "Upgrades").
    pub fn unready(&self) -> Option<(&'static str, String)> {
        let Standing { store, build, needs } = *self;
        if store < build {
            let message = format!(
                "the store's schema is at version {store}, older than this jadpo's {build}: \
                 run `jadpo migrate` or restart this process, which migrates at start"
            );
            Some(("store.schema_older", message))
        } else if needs > build {
            let refusal = Refusal::SchemaNewer { store, needs, build };
            Some((refusal.code(), refusal.to_string()))
        } else {
            None
        }
    }
}

/// What a build knowing `known` does at start with the store `applied`
/// describes. A fresh store gets every migration; otherwise a contract that
/// would stop a build that may still be running is refused unless `force`.
pub fn plan(known: &[Migration], applied: &[Applied], force: bool) -> Result<Plan, Refusal> {
    check(known, applied)?;
    let store = applied.iter().map(|a| a.version).max().unwrap_or(0);
    if store > latest(known) {
        return Ok(Plan::Ahead { store });
    }
    let pending: Vec<(Version, Version)> = oldest_readers(known)
        .into_iter()
        .filter(|(v, _)| !applied.iter().any(|a| a.version == *v))
        .collect();
    if !applied.is_empty() && !force {
        let running = needs(known, applied);
        let contract = known.iter().find_map(|m| match m.change {
            Change::Contract { oldest_reader }
                if oldest_reader > running && pending.iter().any(|(v, _)| *v == m.version) =>
            {
                Some((m.version, oldest_reader))
            }
            _ => None,
        });
        if let Some((version, oldest_reader)) = contract {
            return Err(Refusal::ContractPending {
                version,
                oldest_reader,
                running,
            });
        }
    }
    Ok(Plan::Apply(pending))
}

#[cfg(test)]
#[path = "upgrade_tests.rs"]
mod tests;
