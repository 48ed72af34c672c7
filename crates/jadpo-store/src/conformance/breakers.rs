//! Scenarios of the circuit breaker: hold, probe, reopen, release, alert.

use super::*;
use crate::Store;
use jadpo_core::alert::{AlertMessage, Sends};
use jadpo_core::breaker::{BreakerState, CallVerdict, Transition};
use jadpo_core::{Alert, DeliveryState, Outcome};
use std::time::Duration;

/// While a breaker is open, new deliveries are held, spending no attempt; after
/// the pause the sweep wakes the longest held as the probe, whose answer closes
/// the breaker and releases the rest, due at once, each hold's time counted
/// exactly once.
pub async fn held_while_open_then_probe_then_release<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    let waiting = emit(s, "pay", 3, 1).await;
    let r = claim(s, 1, 10).await;
    assert!(r.claimed.is_empty());
    assert_eq!(r.held, waiting);
    for id in &waiting {
        let d = get(s, *id).await;
        assert_eq!(
            (d.state, d.attempts),
            (DeliveryState::Held, 0),
            "held spends no attempt"
        );
        assert_eq!(
            d.held.as_ref().map(|h| (h.connection.as_str(), h.since)),
            Some(("payments", at(1)))
        );
    }
    let held = s
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Held),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(held.len(), 3);
    // The first five come due at 30 s and are held too.
    assert_eq!(claim(s, 30, 10).await.held.len(), 5);
    assert_eq!(breaker(s, "payments").await.held, 8);
    // After the minute's pause the sweep wakes the longest held as the probe.
    assert!(s.sweep(at(59), LEASE).await.unwrap().woken.is_empty());
    let sw = s.sweep(at(60), LEASE).await.unwrap();
    assert_eq!(sw.woken, vec![waiting[0]]);
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    assert_eq!(probe.delivery.id, waiting[0]);
    assert_eq!(probe.probe_for, vec!["payments".to_string()]);
    assert_eq!(breaker(s, "payments").await.breaker.state, BreakerState::Probing);
    let rep = finish(
        s,
        &probe,
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        61,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Closed)]);
    assert_eq!(rep.released, 7);
    let b = breaker(s, "payments").await;
    assert_eq!((b.breaker.state, b.held), (BreakerState::Closed, 0));
    let r = claim(s, 61, 10).await;
    assert_eq!(r.claimed.len(), 7, "released deliveries are due at once");
    // Held time is counted once, exactly: from the hold to the release (60
    // s for those held at 1 s, 31 s for those held when due at 30 s), so a
    // store that counted a hold twice, or from the wrong instant, fails.
    assert_eq!(
        probe.delivery.held_for,
        Duration::from_secs(59),
        "held from 1 s, woken at 60 s"
    );
    for c in &r.claimed {
        let held_since = if waiting.contains(&c.delivery.id) { 1 } else { 30 };
        assert_eq!(
            c.delivery.held_for,
            Duration::from_secs(61 - held_since),
            "delivery {} held since {held_since} s",
            c.delivery.id
        );
        assert!(c.delivery.held.is_none());
    }
}

/// After the pause, with no sweep between, the first delivery claimed is the
/// probe and the others are held behind it: one probe at a time.
pub async fn the_first_claimed_after_the_pause_is_the_probe<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    let ids = emit(s, "pay", 2, 61).await;
    // The five that opened it came due at 30 s: the oldest due is claimed
    // first and probes; the six others are held behind it.
    let r = claim(s, 61, 10).await;
    assert_eq!(r.claimed.len(), 1, "one probe at a time");
    assert_eq!(r.claimed[0].probe_for, vec!["payments".to_string()]);
    assert_eq!(r.held.len(), 6);
    assert!(r.held.contains(&ids[0]) && r.held.contains(&ids[1]));
}

/// A probe that finds the connection unavailable reopens the breaker for twice
/// the pause.
pub async fn a_probe_that_finds_it_unavailable_reopens_for_twice_the_pause<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 1, 0).await;
    claim(s, 0, 10).await;
    s.sweep(at(60), LEASE).await.unwrap();
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    let rep = finish(
        s,
        &probe,
        retry_at("http.503", 200),
        &[("payments", CallVerdict::Unavailable)],
        61,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Reopened)]);
    let b = breaker(s, "payments").await.breaker;
    assert_eq!(
        (b.state, b.pause, b.opened_at),
        (BreakerState::Open, Duration::from_secs(120), Some(at(61)))
    );
}

/// A probe whose run made no call through the connection gives its place back:
/// the breaker stays open and the next sweep wakes another.
pub async fn a_probe_that_no_longer_calls_the_provider_gives_the_probe_back<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 2, 0).await;
    claim(s, 0, 10).await;
    s.sweep(at(60), LEASE).await.unwrap();
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    finish(s, &probe, Outcome::Succeeded, &[], 61).await.unwrap();
    let b = breaker(s, "payments").await.breaker;
    assert_eq!((b.state, b.probe), (BreakerState::Open, None));
    assert_eq!(
        s.sweep(at(62), LEASE).await.unwrap().woken.len(),
        1,
        "the next held delivery probes"
    );
}

/// A probe whose worker is lost loses its place when its lease ends: the next
/// sweep wakes another, and the lost one's late answer changes nothing.
pub async fn a_lost_probe_loses_its_place_when_its_lease_ends<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 2, 0).await;
    claim(s, 0, 10).await;
    s.sweep(at(60), LEASE).await.unwrap();
    let lost = claim(s, 60, 10).await.claimed.remove(0);
    assert!(s.sweep(at(119), LEASE).await.unwrap().woken.is_empty());
    assert_eq!(s.sweep(at(120), LEASE).await.unwrap().woken.len(), 1);
    let r = claim(s, 120, 10).await;
    assert_eq!(r.claimed.len(), 1, "still one probe");
    assert_eq!(r.held.len() + r.claimed.len(), 2);
    assert!(r.lease_expired.contains(&lost.delivery.id));
    // The lost probe's late answer changes nothing: the breaker waits for
    // the probe that took its place, and nothing is released.
    let before = breaker(s, "payments").await;
    assert_eq!(
        finish(
            s,
            &lost,
            Outcome::Succeeded,
            &[("payments", CallVerdict::Answered)],
            121
        )
        .await,
        Err(StoreError::LeaseLost(lost.delivery.id))
    );
    assert_eq!(breaker(s, "payments").await, before);
    assert_eq!(before.breaker.state, BreakerState::Probing);
}

/// Five runs whose worker was lost report, late, that `payments` was
/// unavailable: enough to open its breaker, had they counted. Fenced out,
/// they move no breaker.
pub async fn late_finishes_after_a_takeover_move_no_breaker<S: Store>(s: &S) {
    emit(s, "pay", 5, 0).await;
    let lost = claim_as(s, "w1", 0, 5).await.claimed;
    assert_eq!(claim_as(s, "w2", 60, 5).await.claimed.len(), 5);
    for c in &lost {
        assert_eq!(
            finish(
                s,
                c,
                retry_at("http.503", 90),
                &[("payments", CallVerdict::Unavailable)],
                61
            )
            .await,
            Err(StoreError::LeaseLost(c.delivery.id))
        );
    }
    let b = s
        .breakers()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.breaker.connection == "payments");
    assert!(
        b.as_ref()
            .is_none_or(|b| b.breaker.state == BreakerState::Closed && b.breaker.consecutive_unavailable == 0),
        "{b:?}"
    );
    assert!(s.sweep(at(62), LEASE).await.unwrap().alerts.is_empty());
}

/// Held time moves the deadline: a delivery whose two minutes (`within:`)
/// ran out while it was held still runs when released, its deadline later
/// by exactly the time it was held.
pub async fn a_delivery_released_after_its_raw_within_still_runs<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    assert_eq!(claim(s, 30, 10).await.held.len(), 5, "the five that opened it");
    let brief = emit(s, "brief", 1, 40).await[0];
    assert_eq!(claim(s, 40, 10).await.held, vec![brief]);
    // A probe finds it down again: reopened for two minutes from 61 s.
    assert_eq!(s.sweep(at(60), LEASE).await.unwrap().woken.len(), 1);
    let probe = claim(s, 60, 10).await.claimed.remove(0);
    assert_ne!(probe.delivery.id, brief, "the longest held probes first");
    finish(
        s,
        &probe,
        retry_at("http.503", 400),
        &[("payments", CallVerdict::Unavailable)],
        61,
    )
    .await
    .unwrap();
    // The next probe answers at 200 s and releases the rest.
    assert_eq!(s.sweep(at(181), LEASE).await.unwrap().woken.len(), 1);
    let probe = claim(s, 181, 10).await.claimed.remove(0);
    assert_ne!(probe.delivery.id, brief);
    let rep = finish(
        s,
        &probe,
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        200,
    )
    .await
    .unwrap();
    assert_eq!(rep.released, 4);
    // Emitted at 40 s with two minutes, its raw deadline was 160 s; held
    // from 40 s to 200 s, it is 320 s.
    let r = claim(s, 200, 10).await;
    assert!(r.gave_up.is_empty(), "held time moved its deadline: {r:?}");
    let run = r
        .claimed
        .iter()
        .find(|c| c.delivery.id == brief)
        .expect("released and run");
    assert_eq!(run.delivery.held_for, Duration::from_secs(160));
    assert_eq!(run.delivery.attempts, 1, "held spent no attempt");
}

/// Six deliveries claimed together; five find `payments` unavailable and
/// open its breaker while the sixth is still under way. Returns the sixth.
async fn opened_with_one_under_way<S: Store>(s: &S) -> crate::Claimed {
    emit(s, "pay", 6, 0).await;
    let r = claim(s, 0, 6).await;
    for c in &r.claimed[..5] {
        finish(
            s,
            c,
            retry_at("http.503", 30),
            &[("payments", CallVerdict::Unavailable)],
            1,
        )
        .await
        .unwrap();
    }
    r.claimed[5].clone()
}

/// A delivery claimed before its breaker opened is held just before its run
/// ([`Store::hold_claimed`](crate::Store::hold_claimed)), its attempt given
/// back.
pub async fn a_breaker_opening_after_the_claim_holds_before_the_run<S: Store>(s: &S) {
    let late = &opened_with_one_under_way(s).await;
    let b = breaker(s, "payments").await.breaker;
    assert!(!b.lets_run(late.delivery.id, at(2)));
    s.hold_claimed(late.delivery.id, late.token(), "payments", at(2))
        .await
        .unwrap();
    let d = get(s, late.delivery.id).await;
    assert_eq!(
        (d.state, d.attempts),
        (DeliveryState::Held, 0),
        "its attempt is given back"
    );
}

/// A run already under way when its breaker opened closes it with its answer,
/// releasing what the breaker held.
pub async fn a_run_under_way_when_it_opened_closes_it_with_its_answer<S: Store>(s: &S) {
    let under_way = opened_with_one_under_way(s).await;
    let more = emit(s, "pay", 1, 2).await;
    assert_eq!(claim(s, 2, 1).await.held, more);
    let rep = finish(
        s,
        &under_way,
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        3,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Closed)]);
    assert_eq!(rep.released, 1);
    assert_eq!(get(s, more[0]).await.state, DeliveryState::Due);
}

/// An outage raises one alert, with the number of deliveries held, kept as an
/// unsent alert message; later sweeps raise nothing more.
pub async fn one_alert_per_outage_with_the_held_count<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    emit(s, "pay", 4, 0).await;
    claim(s, 0, 10).await;
    let alerts = s.sweep(at(1), LEASE).await.unwrap().alerts;
    assert_eq!(
        alerts,
        vec![Alert {
            connection: "payments".into(),
            since: at(0),
            held: 4
        }]
    );
    assert!(s.sweep(at(2), LEASE).await.unwrap().alerts.is_empty());
    assert!(s.sweep(at(600), LEASE).await.unwrap().alerts.is_empty());
    assert!(breaker(s, "payments").await.breaker.alert_raised);
    // Kept in the store, for `jadpo alerts`, `GET /alerts` and the sender.
    let kept = s.alerts(10).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].message, AlertMessage::raised(&alerts[0], at(1)));
    assert_eq!(kept[0].sends, Sends::default(), "not sent yet");
    assert_eq!(kept[0].public_id.len(), 36, "a UUID: {}", kept[0].public_id);
    assert!(s.alerts(0).await.unwrap().is_empty());
}
