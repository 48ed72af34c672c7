use super::*;
use proptest::prelude::*;

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
const LEASE: Duration = Duration::from_secs(60);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn per_second(n: u32) -> Limits {
    Limits {
        rate: Some(Rate::new(n, Duration::from_secs(1)).unwrap()),
        concurrency: None,
    }
}

fn id(n: i64) -> DeliveryId {
    DeliveryId(n)
}

#[test]
fn rates_and_their_bursts() {
    let cases = [
        (1, 1, 1),
        (10, 1, 1),
        (50, 1, 5),
        (100, 1, 10),
        (1000, 1, 100),
        (100, 60, 1),
        (6000, 60, 10),
        (1, 3600, 1),
    ];
    for (n, per_s, burst) in cases {
        let r = Rate::new(n, Duration::from_secs(per_s)).unwrap();
        assert_eq!(r.burst(), burst, "{n}/{per_s}s");
    }
    assert!(Rate::new(0, Duration::from_secs(1)).is_err());
    assert!(Rate::new(10_001, Duration::from_secs(1)).is_err());
    assert!(Rate::new(10_000, Duration::from_secs(1)).is_ok());
    assert!(Rate::new(1, Duration::from_secs(7200)).is_err(), "under one an hour");
}

/// At 10/s the bucket holds one token. A delivery whose turn was at 100 ms
/// and whose claim came at 103 ms still takes its turn's token, and the
/// next turn's token is there at 200 ms: counted from the turn, a late
/// claim loses no time. Counted from the claim, the 3 ms the full bucket
/// could not hold would be lost, and the next turn missed.
#[test]
fn a_turn_claimed_a_little_late_keeps_its_token_and_the_next_ones() {
    let limits = per_second(10);
    let mut s = LimitState::new("crm", &limits, T0);
    assert_eq!(s.take(&limits, id(1), T0, T0.plus(LEASE)), Take::Go);
    let (turn, late) = (T0.plus(ms(100)), T0.plus(ms(103)));
    let mut by_claim = s.clone();
    assert_eq!(s.take_at_turn(&limits, id(2), turn, late, late.plus(LEASE)), Take::Go);
    assert_eq!(
        s.take_at_turn(&limits, id(3), T0.plus(ms(200)), T0.plus(ms(200)), T0.plus(LEASE)),
        Take::Go,
        "the next turn's token"
    );
    assert_eq!(by_claim.take(&limits, id(2), late, late.plus(LEASE)), Take::Go);
    assert_eq!(
        by_claim.take(&limits, id(3), T0.plus(ms(200)), T0.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(203)), WaitFor::Token),
        "without the turn, the late claim's 3 ms are lost"
    );
    // A turn takes no token that is not there: two turns due at once
    // with one token in the bucket, one goes and the other waits.
    let mut two = LimitState::new("crm", &limits, T0);
    assert_eq!(two.take(&limits, id(1), T0, T0.plus(LEASE)), Take::Go);
    let now = T0.plus(ms(150));
    assert_eq!(
        two.take_at_turn(&limits, id(2), T0.plus(ms(100)), now, now.plus(LEASE)),
        Take::Go
    );
    assert_eq!(
        two.take_at_turn(&limits, id(3), T0.plus(ms(100)), now, now.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(200)), WaitFor::Token)
    );
}

#[test]
fn a_full_bucket_lets_the_burst_through_then_paces_at_the_rate() {
    let limits = per_second(50);
    let mut s = LimitState::new("pay", &limits, T0);
    for i in 0..5 {
        assert_eq!(s.take(&limits, id(i), T0, T0.plus(LEASE)), Take::Go);
    }
    // The next token in 1/50 s.
    assert_eq!(
        s.take(&limits, id(5), T0, T0.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(20)), WaitFor::Token)
    );
    assert_eq!(
        s.take(&limits, id(5), T0.plus(ms(19)), T0.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(20)), WaitFor::Token)
    );
    assert_eq!(s.take(&limits, id(5), T0.plus(ms(20)), T0.plus(LEASE)), Take::Go);
}

#[test]
fn a_long_idle_refills_only_up_to_the_burst() {
    let limits = per_second(100);
    let mut s = LimitState::new("pay", &limits, T0);
    let later = T0.plus(Duration::from_secs(3600));
    let mut went = 0;
    while s.take(&limits, id(went), later, later.plus(LEASE)) == Take::Go {
        went += 1;
    }
    assert_eq!(went, 10, "the burst, not an hour's worth");
    assert_eq!(s.tokens_at(&limits, later), 0);
}

#[test]
fn a_clock_that_steps_back_adds_no_tokens() {
    let limits = per_second(10);
    let mut s = LimitState::new("pay", &limits, T0);
    assert_eq!(s.take(&limits, id(1), T0, T0.plus(LEASE)), Take::Go);
    let back = T0.minus(Duration::from_secs(30));
    assert!(matches!(
        s.take(&limits, id(2), back, back.plus(LEASE)),
        Take::WaitUntil(_, _)
    ));
    assert_eq!(s.refilled_at, T0, "the refill time does not go back");
    // 100 ms after the original time the next token is there.
    assert_eq!(s.take(&limits, id(2), T0.plus(ms(100)), T0.plus(LEASE)), Take::Go);
}

#[test]
fn slots_are_held_until_released_or_their_lease_ends() {
    let limits = Limits {
        rate: None,
        concurrency: Some(2),
    };
    let mut s = LimitState::new("pay", &limits, T0);
    assert_eq!(s.take(&limits, id(1), T0, T0.plus(ms(5_000))), Take::Go);
    assert_eq!(s.take(&limits, id(2), T0, T0.plus(ms(3_000))), Take::Go);
    assert_eq!(
        s.take(&limits, id(3), T0, T0.plus(ms(9_000))),
        Take::WaitUntil(T0.plus(SLOT_RECHECK), WaitFor::Slot),
        "a finish usually frees one long before the first lease ends"
    );
    let late = T0.plus(ms(2_900));
    assert_eq!(
        s.take(&limits, id(3), late, late.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(3_000)), WaitFor::Slot),
        "or the lease's end, if sooner"
    );
    assert_eq!(
        s.take(&limits, id(1), T0, T0.plus(ms(6_000))),
        Take::Go,
        "one delivery, one slot"
    );
    assert!(s.release(id(1), T0));
    assert!(!s.release(id(1), T0));
    assert_eq!(s.take(&limits, id(3), T0, T0.plus(ms(9_000))), Take::Go);
    // Delivery 2's process was killed: its slot comes back when its lease ends.
    assert!(matches!(
        s.take(&limits, id(4), T0.plus(ms(2_999)), T0.plus(LEASE)),
        Take::WaitUntil(_, _)
    ));
    assert_eq!(s.take(&limits, id(4), T0.plus(ms(3_000)), T0.plus(LEASE)), Take::Go);
    assert_eq!(s.slots_in_use(T0.plus(ms(3_000))), 2);
}

#[test]
fn waiters_for_a_slot_look_again_after_the_typical_hold_shared_among_the_slots() {
    let limits = Limits {
        rate: None,
        concurrency: Some(4),
    };
    let mut s = LimitState::new("pay", &limits, T0);
    assert_eq!(s.slot_spacing(&limits), SLOT_RECHECK, "nothing learnt yet");
    // Calls hold their slot 80 ms.
    for i in 0..4 {
        assert_eq!(s.take(&limits, id(i), T0, T0.plus(LEASE)), Take::Go);
    }
    for i in 0..4 {
        assert!(s.release(id(i), T0.plus(ms(80))));
    }
    assert_eq!(s.hold_ms, 80);
    assert_eq!(s.slot_spacing(&limits), ms(20), "80 ms shared among 4 slots");
    for i in 10..14 {
        assert_eq!(s.take(&limits, id(i), T0, T0.plus(LEASE)), Take::Go);
    }
    assert_eq!(
        s.take(&limits, id(20), T0, T0.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(20)), WaitFor::Slot)
    );
    // A slow call moves the average by an eighth.
    assert!(s.release(id(10), T0.plus(ms(880))));
    assert_eq!(s.hold_ms, 180);
}

#[test]
fn a_delivery_needs_a_slot_and_a_token_and_a_refusal_changes_nothing() {
    let limits = Limits {
        rate: Some(Rate::new(10, Duration::from_secs(1)).unwrap()),
        concurrency: Some(5),
    };
    let mut s = LimitState::new("pay", &limits, T0);
    assert_eq!(s.take(&limits, id(1), T0, T0.plus(LEASE)), Take::Go);
    let before = s.clone();
    assert_eq!(
        s.take(&limits, id(2), T0, T0.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(100)), WaitFor::Token)
    );
    assert_eq!(s, before, "no slot taken while waiting for a token");
}

#[test]
fn a_429_with_retry_after_pauses_the_connection() {
    let limits = per_second(100);
    let mut s = LimitState::new("pay", &limits, T0);
    s.rate_limited(Some(Duration::from_secs(30)), T0);
    let until = T0.plus(Duration::from_secs(30));
    assert_eq!(
        s.take(&limits, id(1), T0.plus(ms(10)), T0.plus(LEASE)),
        Take::WaitUntil(until, WaitFor::Pause)
    );
    // A shorter pause does not shorten it.
    s.rate_limited(Some(Duration::from_secs(5)), T0.plus(ms(10)));
    assert_eq!(s.paused_until, Some(until));
    assert_eq!(s.take(&limits, id(1), until, until.plus(LEASE)), Take::Go);
}

#[test]
fn a_429_without_retry_after_halves_the_rate_for_a_minute() {
    let limits = per_second(10);
    let mut s = LimitState::new("pay", &limits, T0);
    assert_eq!(s.take(&limits, id(1), T0, T0.plus(LEASE)), Take::Go);
    s.rate_limited(None, T0);
    assert_eq!(
        s.take(&limits, id(2), T0, T0.plus(LEASE)),
        Take::WaitUntil(T0.plus(ms(200)), WaitFor::Token),
        "a token every 200 ms, not 100"
    );
    let after = T0.plus(SLOW_FOR).plus(Duration::from_secs(1));
    assert_eq!(s.take(&limits, id(2), after, after.plus(LEASE)), Take::Go);
    assert_eq!(
        s.take(&limits, id(3), after, after.plus(LEASE)),
        Take::WaitUntil(after.plus(ms(100)), WaitFor::Token),
        "recovered"
    );
}

#[test]
fn only_a_change_moves_the_version() {
    let limits = per_second(1);
    let mut s = LimitState::new("pay", &limits, T0);
    assert_eq!(s.take(&limits, id(1), T0, T0.plus(LEASE)), Take::Go);
    let v = s.version;
    assert!(matches!(
        s.take(&limits, id(2), T0, T0.plus(LEASE)),
        Take::WaitUntil(_, _)
    ));
    assert_eq!(s.version, v);
    assert!(!s.release(id(9), T0));
    assert_eq!(s.version, v);
}

proptest! {
    /// However calls arrive, no one-second window holds more than the rate
    /// and its burst (110%), and no more slots are in use than allowed.
    #[test]
    fn the_rate_and_the_slots_hold(
        n in 1u32..2_000,
        concurrency in 1u32..20,
        steps in proptest::collection::vec((0u64..40, 1u32..80, 0u8..4, 1u64..3_000), 1..600),
    ) {
        let limits = Limits {
            rate: Some(Rate::new(n, Duration::from_secs(1)).unwrap()),
            concurrency: Some(concurrency),
        };
        let mut s = LimitState::new("pay", &limits, T0);
        let mut now = T0;
        let mut sent: Vec<Timestamp> = Vec::new();
        let mut next_id = 0;
        for (gap, attempts, release, lease_ms) in steps {
            now = now.plus(ms(gap));
            if release == 0 && !s.slots.is_empty() {
                let d = s.slots[0].delivery;
                s.release(d, now);
            }
            for _ in 0..attempts {
                next_id += 1;
                if s.take(&limits, id(next_id), now, now.plus(ms(lease_ms))) == Take::Go {
                    sent.push(now);
                    // Most calls end quickly: their slots come back.
                    if next_id % 3 != 0 {
                        s.release(id(next_id), now);
                    }
                }
                prop_assert!(s.slots_in_use(now) <= concurrency as usize);
                prop_assert!(s.tokens_milli >= 0);
            }
        }
        // The rate and a tenth of it, whatever the bucket's size says.
        let allowed = n as usize + (n as usize / 10).max(1);
        for (i, start) in sent.iter().enumerate() {
            let end = start.plus(Duration::from_secs(1));
            let in_window = sent[i..].iter().take_while(|t| **t < end).count();
            prop_assert!(in_window <= allowed, "{in_window} in a second at {n}/s");
        }
    }
}
