use super::*;
use proptest::prelude::*;

const fn expand(version: Version) -> Migration {
    Migration::expand(version, "")
}

const fn contract(version: Version, oldest_reader: Version) -> Migration {
    Migration::contract(version, oldest_reader, "")
}

/// Applied by builds from before oldest readers were recorded.
fn legacy(versions: std::ops::RangeInclusive<Version>) -> Vec<Applied> {
    versions
        .map(|version| Applied {
            version,
            oldest_reader: None,
        })
        .collect()
}

fn recorded(rows: &[(Version, Version)]) -> Vec<Applied> {
    rows.iter()
        .map(|&(version, r)| Applied {
            version,
            oldest_reader: Some(r),
        })
        .collect()
}

/// 1-3 expand, 4 contracts what builds before 4 use, 5-6 expand.
const KNOWN: &[Migration] = &[expand(1), expand(2), expand(3), contract(4, 4), expand(5), expand(6)];

#[test]
fn oldest_readers_carry_the_largest_contract_so_far() {
    assert_eq!(
        oldest_readers(KNOWN),
        vec![(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (6, 4)]
    );
}

/// A name, the store's rows, whether forced, and the plan.
type Case = (&'static str, Vec<Applied>, bool, Result<Plan, Refusal>);

#[test]
fn plans() {
    let all = oldest_readers(KNOWN);
    let cases: Vec<Case> = vec![
        (
            "a fresh store gets every migration",
            vec![],
            false,
            Ok(Plan::Apply(all.clone())),
        ),
        (
            "expands after the last contract apply without force",
            recorded(&all[..4]),
            false,
            Ok(Plan::Apply(all[4..].to_vec())),
        ),
        (
            "a current store applies nothing",
            recorded(&all),
            false,
            Ok(Plan::Apply(vec![])),
        ),
        (
            "a pending contract is refused while older builds may run",
            legacy(1..=3),
            false,
            Err(Refusal::ContractPending {
                version: 4,
                oldest_reader: 4,
                running: 0,
            }),
        ),
        (
            "force applies a pending contract",
            legacy(1..=3),
            true,
            Ok(Plan::Apply(all[3..].to_vec())),
        ),
        (
            "rows without oldest readers count as the build knows them",
            legacy(1..=5),
            false,
            Ok(Plan::Apply(all[5..].to_vec())),
        ),
        (
            "a newer store through expands: run on it",
            recorded(&[(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (6, 4), (7, 4), (8, 6)]),
            false,
            Ok(Plan::Ahead { store: 8 }),
        ),
        (
            "a newer store that contracted past this build: refused",
            recorded(&[(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (6, 4), (7, 7)]),
            true,
            Err(Refusal::SchemaNewer {
                store: 7,
                needs: 7,
                build: 6,
            }),
        ),
        (
            "an unknown migration with no oldest reader is assumed to contract",
            [recorded(&all), legacy(9..=9)].concat(),
            false,
            Err(Refusal::SchemaNewer {
                store: 9,
                needs: 9,
                build: 6,
            }),
        ),
    ];
    for (name, applied, force, want) in cases {
        assert_eq!(plan(KNOWN, &applied, force), want, "{name}");
    }
}

#[test]
fn a_store_is_ready_for_a_build_at_its_schema_or_ahead_through_expands_only() {
    let at = |applied: &[Applied]| standing(KNOWN, applied);
    let current = at(&recorded(&[(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (6, 4)]));
    assert_eq!(
        current,
        Standing {
            store: 6,
            build: 6,
            needs: 4
        }
    );
    assert_eq!(current.unready(), None);
    let older = at(&recorded(&[(1, 0), (2, 0), (3, 0), (4, 4), (5, 4)]));
    let (code, why) = older.unready().expect("a store one migration behind is not ready");
    assert_eq!(code, "store.schema_older");
    assert!(
        why.contains("version 5, older than this jadpo's 6") && why.contains("jadpo migrate"),
        "{why}"
    );
    assert!(at(&[]).unready().is_some(), "a store never migrated");
    // A newer build's expand (7): a rolling deploy under way, this one runs.
    let expanded = at(&recorded(&[(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (6, 4), (7, 4)]));
    assert_eq!(expanded.unready(), None);
    // A newer build's contract that stops builds before 7.
    let contracted = at(&recorded(&[(1, 0), (2, 0), (3, 0), (4, 4), (5, 4), (6, 4), (7, 7)]));
    let (code, why) = contracted.unready().expect("a schema this build cannot run on");
    assert_eq!(code, "store.schema_newer");
    assert!(why.contains("needs a jadpo that knows schema 7"), "{why}");
}

#[test]
fn refusals_name_their_code_versions_and_fix() {
    let newer = Refusal::SchemaNewer {
        store: 12,
        needs: 11,
        build: 9,
    };
    assert_eq!(newer.code(), "store.schema_newer");
    let text = newer.to_string();
    assert!(
        text.contains("version 12") && text.contains("schema 11") && text.contains("schema 9"),
        "{text}"
    );
    let contract = Refusal::ContractPending {
        version: 4,
        oldest_reader: 4,
        running: 0,
    };
    assert_eq!(contract.code(), "store.migration_contract");
    assert!(contract.to_string().contains("jadpo migrate --force"));
}

/// Migration lists of up to 12, each an expand or a contract that needs a
/// build at least as new as an earlier or its own version.
fn known_list() -> impl Strategy<Value = Vec<Migration>> {
    prop::collection::vec(prop::option::of(0..12i32), 1..12).prop_map(|changes| {
        changes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let version = i as Version + 1;
                match c {
                    None => expand(version),
                    Some(r) => contract(version, (*r).clamp(1, version)),
                }
            })
            .collect()
    })
}

proptest! {
    /// Whatever a store holds, a plan never applies a migration twice,
    /// applies in order, and the store it leaves passes `check`: a build
    /// never leaves a store it cannot run on.
    #[test]
    fn a_plan_leaves_a_store_the_build_runs_on(known in known_list(), upto in 0usize..12, force: bool) {
        let rows = oldest_readers(&known);
        let applied = recorded(&rows[..upto.min(rows.len())]);
        match plan(&known, &applied, force) {
            Ok(Plan::Apply(steps)) => {
                let mut after = applied.clone();
                for (v, r) in &steps {
                    prop_assert!(!after.iter().any(|a| a.version == *v));
                    prop_assert!(after.iter().all(|a| a.version < *v));
                    after.push(Applied { version: *v, oldest_reader: Some(*r) });
                }
                prop_assert_eq!(after.len(), known.len());
                prop_assert!(check(&known, &after).is_ok());
            }
            Ok(Plan::Ahead { .. }) => prop_assert!(false, "a store made by these migrations is never ahead"),
            Err(Refusal::ContractPending { oldest_reader, running, .. }) => {
                prop_assert!(!force && !applied.is_empty());
                prop_assert!(oldest_reader > running);
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// Without force, no applied migration raises the oldest reader past
    /// what the store needed before: no running build is stopped.
    #[test]
    fn without_force_no_running_build_is_stopped(known in known_list(), upto in 1usize..12) {
        let rows = oldest_readers(&known);
        let applied = recorded(&rows[..upto.min(rows.len())]);
        let before = needs(&known, &applied);
        if let Ok(Plan::Apply(steps)) = plan(&known, &applied, false) {
            for (_, r) in steps {
                prop_assert!(r <= before);
            }
        }
    }

    /// An older build (a prefix of the list) runs on a store the newer one
    /// migrated exactly when no contract past it was applied.
    #[test]
    fn an_older_build_runs_until_a_contract_passes_it(known in known_list(), older in 1usize..12) {
        let all = recorded(&oldest_readers(&known));
        let old = &known[..older.min(known.len())];
        let contracted = known.iter().any(|m| matches!(m.change, Change::Contract { oldest_reader } if oldest_reader > latest(old)));
        prop_assert_eq!(check(old, &all).is_err(), contracted);
    }
}
