use super::*;
use crate::time::MINUTE;
use proptest::prelude::*;

const P: BreakerPolicy = BreakerPolicy::DEFAULT;

fn at(s: i64) -> Timestamp {
    Timestamp::from_millis(s * 1000)
}

fn d(n: i64) -> DeliveryId {
    DeliveryId(n)
}

/// A breaker opened at `t` by five unavailable attempts.
fn opened_at(t: i64) -> Breaker {
    let mut b = Breaker::new("payments");
    for i in 0..5 {
        b.record(CallVerdict::Unavailable, d(i), at(t), &P);
    }
    assert_eq!(b.state, BreakerState::Open);
    b
}

#[test]
fn five_unavailable_in_a_row_open_it() {
    let mut b = Breaker::new("payments");
    for i in 0..4 {
        assert_eq!(b.record(CallVerdict::Unavailable, d(i), at(0), &P), None);
        assert_eq!(b.gate(d(100), at(0)), Gate::Pass);
    }
    assert_eq!(
        b.record(CallVerdict::Unavailable, d(4), at(0), &P),
        Some(Transition::Opened)
    );
    assert_eq!(
        (b.state, b.pause, b.opened_at),
        (BreakerState::Open, MINUTE, Some(at(0)))
    );
    assert_eq!(b.gate(d(100), at(1)), Gate::Hold);
}

#[test]
fn an_answer_ends_the_run_refusals_included() {
    let mut b = Breaker::new("payments");
    for i in 0..4 {
        b.record(CallVerdict::Unavailable, d(i), at(0), &P);
    }
    // A 401 or a 404 is an answer: the provider is up.
    b.record(CallVerdict::Answered, d(9), at(0), &P);
    assert_eq!(b.consecutive_unavailable, 0);
    for i in 0..4 {
        b.record(CallVerdict::Unavailable, d(i), at(0), &P);
    }
    assert!(b.is_closed(), "4 + 4 with an answer between is not 5 in a row");
}

#[test]
fn pause_doubles_from_a_minute_to_at_most_ten() {
    let mut b = opened_at(0);
    let mut now = 0;
    let mut pauses = vec![b.pause.as_secs()];
    for probe in 10..16 {
        now += b.pause.as_secs() as i64;
        assert_eq!(b.gate(d(probe), at(now)), Gate::Probe);
        assert_eq!(b.gate(d(probe), at(now - 1)), Gate::Hold, "not before the pause ends");
        b.take_probe(d(probe), at(now + 60), at(now));
        assert_eq!(
            b.record(CallVerdict::Unavailable, d(probe), at(now), &P),
            Some(Transition::Reopened)
        );
        pauses.push(b.pause.as_secs());
    }
    assert_eq!(pauses, [60, 120, 240, 480, 600, 600, 600]);
}

#[test]
fn one_probe_at_a_time() {
    let mut b = opened_at(0);
    b.take_probe(d(1), at(90), at(60));
    assert_eq!(b.state, BreakerState::Probing);
    assert_eq!(b.gate(d(2), at(61)), Gate::Hold);
    assert_eq!(b.gate(d(1), at(61)), Gate::Probe, "the probe itself, claimed again");
    assert!(!b.wants_probe(at(61)));
}

#[test]
fn a_lost_probe_loses_its_place_when_its_lease_ends() {
    let mut b = opened_at(0);
    b.take_probe(d(1), at(90), at(60));
    assert_eq!(b.gate(d(2), at(89)), Gate::Hold);
    assert_eq!(b.gate(d(2), at(90)), Gate::Probe);
    assert!(b.wants_probe(at(90)));
    b.take_probe(d(2), at(150), at(90));
    assert_eq!(b.probe.unwrap().delivery, d(2));
}

#[test]
fn probe_answered_closes_and_resets_everything() {
    let mut b = opened_at(0);
    b.raise_alert(3).unwrap();
    b.take_probe(d(1), at(90), at(60));
    assert_eq!(
        b.record(CallVerdict::Answered, d(1), at(61), &P),
        Some(Transition::Closed)
    );
    let mut fresh = Breaker::new("payments");
    fresh.version = b.version;
    assert_eq!(b, fresh);
    b.check_invariants(&P).unwrap();
}

#[test]
fn a_run_already_under_way_when_it_opened_closes_it_too() {
    let mut b = opened_at(0);
    assert_eq!(
        b.record(CallVerdict::Answered, d(77), at(10), &P),
        Some(Transition::Closed)
    );
    // But its unavailable answer changes nothing but the count.
    let mut b = opened_at(0);
    assert_eq!(b.record(CallVerdict::Unavailable, d(77), at(10), &P), None);
    assert_eq!(
        (b.state, b.pause, b.opened_at),
        (BreakerState::Open, MINUTE, Some(at(0)))
    );
}

#[test]
fn probe_given_back_lets_another_probe_at_once() {
    let mut b = opened_at(0);
    b.take_probe(d(1), at(90), at(60));
    assert!(!b.give_back_probe(d(2)), "only the probe gives back the probe");
    assert!(b.give_back_probe(d(1)));
    assert_eq!(b.state, BreakerState::Open);
    assert_eq!(b.gate(d(2), at(61)), Gate::Probe);
}

#[test]
fn one_alert_per_outage() {
    let mut b = opened_at(0);
    let alert = b.raise_alert(12).unwrap();
    assert_eq!(
        alert,
        Alert {
            connection: "payments".into(),
            since: at(0),
            held: 12
        }
    );
    assert_eq!(b.raise_alert(13), None);
    // Reopening after a failed probe is the same outage.
    b.take_probe(d(1), at(120), at(60));
    b.record(CallVerdict::Unavailable, d(1), at(61), &P);
    assert_eq!(b.raise_alert(14), None);
    // Closed, then opened again: a new outage, a new alert.
    b.record(CallVerdict::Answered, d(2), at(200), &P);
    assert_eq!(b.raise_alert(1), None, "no alert while closed");
    let mut b2 = b.clone();
    for i in 0..5 {
        b2.record(CallVerdict::Unavailable, d(i), at(300), &P);
    }
    assert_eq!(b2.raise_alert(5).unwrap().since, at(300));
}

#[test]
fn version_moves_on_every_change_and_only_then() {
    let mut b = Breaker::new("payments");
    let v = b.version;
    b.record(CallVerdict::Answered, d(1), at(0), &P);
    assert_eq!(b.version, v, "an answer while closed with no run changes nothing");
    b.record(CallVerdict::Unavailable, d(1), at(0), &P);
    assert_eq!(b.version, v + 1);
    let v = b.version;
    b.record(CallVerdict::Answered, d(1), at(0), &P);
    assert_eq!(b.version, v + 1);
}

#[test]
fn only_the_probe_runs_past_an_open_breaker() {
    let mut b = Breaker::new("payments");
    assert!(b.lets_run(d(1), at(0)));
    b = opened_at(0);
    assert!(
        !b.lets_run(d(1), at(61)),
        "pause passed, but it did not take the probe at its claim"
    );
    b.take_probe(d(1), at(120), at(61));
    assert!(b.lets_run(d(1), at(62)));
    assert!(!b.lets_run(d(2), at(62)));
    assert!(!b.lets_run(d(1), at(120)), "its lease ended: no longer the probe");
}

#[test]
fn closed_gate_passes_everything() {
    let b = Breaker::new("payments");
    assert_eq!(b.gate(d(1), at(0)), Gate::Pass);
    assert_eq!(b.probe_due_at(), None);
    assert!(!b.wants_probe(at(1_000)));
}

#[derive(Clone, Debug)]
enum Op {
    Record(bool, i64),
    Claim(i64),
    GiveBack(i64),
    Alert,
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), 0i64..4).prop_map(|(a, d)| Op::Record(a, d)),
        (0i64..4).prop_map(Op::Claim),
        (0i64..4).prop_map(Op::GiveBack),
        Just(Op::Alert),
        (0u16..900).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Any sequence of operations keeps the breaker consistent, never has
    /// two probes, and raises at most one alert between a close and the next.
    #[test]
    fn any_sequence_keeps_the_invariants(ops in proptest::collection::vec(op(), 1..200)) {
        let mut b = Breaker::new("c");
        let mut now = 0i64;
        let mut alerts_this_outage = 0;
        for op in ops {
            let before = b.clone();
            match op {
                Op::Record(answered, from) => {
                    let v = if answered { CallVerdict::Answered } else { CallVerdict::Unavailable };
                    match b.record(v, d(from), at(now), &P) {
                        Some(Transition::Closed) => {
                            prop_assert!(answered);
                            alerts_this_outage = 0;
                        }
                        Some(Transition::Opened) => prop_assert!(before.is_closed()),
                        Some(Transition::Reopened) => {
                            prop_assert_eq!(before.probe.map(|p| p.delivery), Some(d(from)));
                            prop_assert!(b.pause >= before.pause);
                        }
                        None => {}
                    }
                }
                Op::Claim(who) => {
                    if b.gate(d(who), at(now)) == Gate::Probe {
                        prop_assert!(b.probe_out(at(now)).is_none_or(|p| p == d(who)));
                        b.take_probe(d(who), at(now + 30), at(now));
                    }
                }
                Op::GiveBack(who) => { b.give_back_probe(d(who)); }
                Op::Alert => {
                    if b.raise_alert(0).is_some() {
                        alerts_this_outage += 1;
                    }
                }
                Op::Advance(s) => now += i64::from(s),
            }
            prop_assert!(alerts_this_outage <= 1);
            prop_assert!(b.version >= before.version);
            prop_assert!((b == before) == (b.version == before.version));
            if let Err(e) = b.check_invariants(&P) {
                return Err(TestCaseError::fail(e));
            }
        }
    }
}
