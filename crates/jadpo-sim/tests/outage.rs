//! The outage scenario: what the breaker saves, and what it must not cost.

use jadpo_core::{BreakerPolicy, Budget};
use jadpo_sim::outage::{self, OutageConfig};
use jadpo_sim::Sim;
use std::time::Duration;

#[test]
fn five_thousand_deliveries_and_an_hour_down() {
    let report = outage::run(&OutageConfig::default()).unwrap_or_else(|v| panic!("{v}"));
    println!("{report}");
    let (with, without) = (&report.with_breaker, &report.without_breaker);

    // With the breaker: a few dozen calls reach the provider while it is
    // down: those already running when it opened, and one probe per pause.
    assert!(
        with.calls_while_down <= 36,
        "{} calls while down",
        with.calls_while_down
    );
    assert!(with.calls_while_down >= 5, "five unavailable attempts open it");
    assert_eq!((with.succeeded, with.failed, with.parked), (5_000, 0, 0));
    assert_eq!((with.opened, with.alerts), (1, 1), "one outage, one alert");
    // Probes after 1, 2, 4, 8, 10, 10, 10, 10 minutes find it down; the next
    // one, at most ten minutes after recovery, closes it.
    assert_eq!(with.probes_unavailable, 8);
    let after = with.last_success_after_recovery.expect("deliveries succeeded");
    assert!(
        after <= Duration::from_secs(11 * 60),
        "last success {after:?} after recovery"
    );
    assert!(with.most_attempts <= 2, "held deliveries spend no attempts");

    // Without it, every delivery keeps calling: tens of thousands of calls,
    // about the 50,000 of ten attempts each, and deliveries whose ten attempts
    // all fell inside the hour fail.
    assert!(
        without.calls_while_down > 35_000,
        "{} calls while down",
        without.calls_while_down
    );
    assert!(without.calls > with.calls * 8);
    assert_eq!(without.alerts, 0);
    assert!(without.failed > 0);
}

/// Held time does not count towards `within:`: with a 20-minute budget and an
/// hour-long outage, no delivery fails while held, though all would without
/// the breaker.
#[test]
fn time_held_is_not_spent_from_within() {
    let config = OutageConfig {
        deliveries: 500,
        budget: Budget::new(10, Duration::from_secs(20 * 60)).unwrap(),
        ..OutageConfig::default()
    };
    let report = outage::run(&config).unwrap_or_else(|v| panic!("{v}"));
    println!("{report}");
    assert_eq!(report.with_breaker.failed, 0, "{report}");
    assert_eq!(report.with_breaker.succeeded, 500);
    assert_eq!(report.without_breaker.failed, 500, "{report}");
}

/// The scenario is a pure function of its seed.
#[test]
fn the_same_seed_gives_the_same_run() {
    let config = OutageConfig {
        deliveries: 300,
        ..OutageConfig::default()
    };
    let a = outage::run(&config).unwrap();
    let b = outage::run(&config).unwrap();
    assert_eq!(a, b);
    let other = outage::run(&OutageConfig { seed: 2, ..config }).unwrap();
    assert_ne!(a.without_breaker.calls, other.without_breaker.calls, "the seed matters");
}

/// Every delivery-level invariant, checked after every step, on a smaller
/// outage.
#[test]
fn a_small_outage_checked_after_every_step() {
    let mut cfg = OutageConfig {
        deliveries: 200,
        ..OutageConfig::default()
    }
    .sim(BreakerPolicy::DEFAULT);
    cfg.check_every_step = true;
    let sim = Sim::new(cfg).run().unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(sim.stats.alerts.len(), 1);
}
