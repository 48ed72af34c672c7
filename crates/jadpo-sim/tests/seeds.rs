//! The simulation over many seeds. A failure prints its seed; replay it with
//! `JADPO_SIM_SEED=<seed> cargo test -p jadpo-sim --test seeds replay -- --ignored --nocapture`.

use jadpo_sim::run_seed;

/// How many seeds `cargo test` runs; `JADPO_SIM_SEEDS` runs more.
const SEEDS: u64 = 1_000;

fn seeds() -> u64 {
    std::env::var("JADPO_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS)
}

#[test]
fn a_thousand_seeds_hold_every_invariant() {
    let n = seeds();
    let mut failures = Vec::new();
    let mut steps = 0;
    let mut retried = 0;
    for seed in 0..n {
        match run_seed(seed) {
            Ok(sim) => {
                steps += sim.stats.steps;
                retried += sim.stats.operator_retried;
            }
            Err(v) => failures.push(v.to_string()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // A simulation that does nothing proves nothing.
    assert!(steps > n * 50, "only {steps} steps in {n} seeds");
    assert!(n < 100 || retried > 0, "no operator retried anything in {n} seeds");
}

/// Not a check of its own: a tool for one seed, so the run lists it as
/// ignored instead of passing it without doing anything.
#[test]
#[ignore = "replays one seed: JADPO_SIM_SEED=<seed> ... replay -- --ignored"]
fn replay() {
    let var = std::env::var("JADPO_SIM_SEED").unwrap_or_default();
    let seed: u64 = var
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("set JADPO_SIM_SEED to the seed to replay (a u64), not {var:?}"));
    let cfg = jadpo_sim::SimConfig::random(seed);
    println!("{cfg:#?}");
    match run_seed(seed) {
        Ok(sim) => println!("seed {seed} holds: {:#?}", sim.stats),
        Err(v) => panic!("{v}"),
    }
}
