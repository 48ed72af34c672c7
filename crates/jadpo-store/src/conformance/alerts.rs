//! Scenarios of alert messages: the `resolved` message of a closed outage,
//! and the claim, fence, retry and end of their sends.

use super::*;
use jadpo_core::alert::{AlertKind, AlertMessage, SendDecision, SendState, SEND_WITHIN};
use jadpo_core::breaker::{CallVerdict, Transition};
use jadpo_core::Outcome;

/// Opens the breaker of `payments` at 0, holds `held` more deliveries and
/// raises the outage's alert at 1.
async fn outage_alerted<S: Store>(s: &S, held: usize) {
    open_breaker(s, 0).await;
    emit(s, "pay", held, 0).await;
    claim(s, 0, 100).await;
    assert_eq!(s.sweep(at(1), LEASE).await.unwrap().alerts.len(), 1);
}

/// The finish whose probe closes an alerted breaker keeps the outage's
/// `resolved` message, with how many it released; the next outage gets messages
/// of its own.
pub async fn closing_an_alerted_breaker_writes_its_resolved_message<S: Store>(s: &S) {
    outage_alerted(s, 3).await;
    // After the pause, the probe answers and closes the breaker.
    let woken = s.sweep(at(60), LEASE).await.unwrap().woken;
    assert_eq!(woken.len(), 1);
    let probe = claim(s, 60, 10).await.claimed.remove(0);
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
    let kept = s.alerts(10).await.unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(
        kept[0].message,
        AlertMessage::resolved("payments", at(0), at(61), rep.released as u64)
    );
    assert_eq!(kept[0].message.kind, AlertKind::Resolved);
    // The five that opened it came due at 30 and were held too.
    assert_eq!(rep.released, 7);
    assert_ne!(kept[0].public_id, kept[1].public_id);
    // Closed, the outage raises nothing more.
    assert!(s.sweep(at(62), LEASE).await.unwrap().alerts.is_empty());
    // The next outage is alerted and resolved again, with messages of its
    // own: one outage's messages are not the next one's.
    open_breaker(s, 100).await;
    emit(s, "pay", 1, 100).await;
    assert!(!claim(s, 100, 100).await.held.is_empty());
    assert_eq!(
        s.sweep(at(101), LEASE).await.unwrap().alerts.len(),
        1,
        "the second outage's alert"
    );
    assert_eq!(s.sweep(at(160), LEASE).await.unwrap().woken.len(), 1);
    let probe = claim(s, 160, 10).await.claimed.remove(0);
    let rep = finish(
        s,
        &probe,
        Outcome::Succeeded,
        &[("payments", CallVerdict::Answered)],
        161,
    )
    .await
    .unwrap();
    assert_eq!(rep.transitions, vec![("payments".to_string(), Transition::Closed)]);
    let kept = s.alerts(10).await.unwrap();
    assert_eq!(kept.len(), 4, "two messages for each outage: {kept:?}");
    assert_eq!(
        kept[0].message,
        AlertMessage::resolved("payments", at(100), at(161), rep.released as u64)
    );
    assert_eq!(kept[1].message.kind, AlertKind::Raised);
    let ids: std::collections::BTreeSet<_> = kept.iter().map(|k| k.public_id.clone()).collect();
    assert_eq!(ids.len(), 4);
}

/// A breaker closed by a run under way, before any sweep raised its alert,
/// writes no `resolved` message: nothing was alerted.
pub async fn a_breaker_closed_before_its_alert_writes_no_resolved_message<S: Store>(s: &S) {
    open_breaker(s, 0).await;
    let probe_id = emit(s, "log", 1, 0).await;
    assert_eq!(probe_id.len(), 1);
    // A run under way when it opened answers before any sweep alerted.
    emit(s, "pay", 1, 0).await;
    let late = claim(s, 0, 10).await;
    assert!(late.held.len() == 1);
    let log = late
        .claimed
        .into_iter()
        .find(|c| c.delivery.subscriber == "log")
        .unwrap();
    finish(s, &log, Outcome::Succeeded, &[("payments", CallVerdict::Answered)], 1)
        .await
        .unwrap();
    assert!(s.alerts(10).await.unwrap().is_empty());
}

/// A send is claimed by one sender until its lease ends; a lost sender's late
/// end is fenced out by the count of sends, a retry waits for its time, and a
/// sent message is claimed no more.
pub async fn alert_sends_are_claimed_once_fenced_and_retried<S: Store>(s: &S) {
    outage_alerted(s, 1).await;
    let first = s.claim_alert_sends(at(1), 10, LEASE).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].sends.attempts, 1);
    assert!(
        s.claim_alert_sends(at(2), 10, LEASE).await.unwrap().is_empty(),
        "claimed until its lease ends"
    );
    // Its sender is lost: after the lease another claims it.
    let second = s.claim_alert_sends(at(61), 10, LEASE).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].sends.attempts, 2);
    let id = second[0].id;
    let retry = SendDecision::Retry {
        at: at(70),
        code: "http.503".into(),
    };
    assert!(
        !s.finish_alert_send(id, 1, &retry).await.unwrap(),
        "the lost sender is fenced"
    );
    assert!(s.finish_alert_send(id, 2, &retry).await.unwrap());
    let kept = s.alerts(1).await.unwrap().remove(0);
    assert_eq!(kept.sends.state(), SendState::Retrying);
    assert_eq!(kept.sends.last_error.as_deref(), Some("http.503"));
    assert!(
        s.claim_alert_sends(at(69), 10, LEASE).await.unwrap().is_empty(),
        "not before its retry"
    );
    let third = s.claim_alert_sends(at(70), 10, LEASE).await.unwrap();
    assert_eq!(third[0].sends.attempts, 3);
    assert!(s
        .finish_alert_send(id, 3, &SendDecision::Sent { at: at(71) })
        .await
        .unwrap());
    assert!(!s
        .finish_alert_send(id, 3, &SendDecision::Sent { at: at(72) })
        .await
        .unwrap());
    let kept = s.alerts(1).await.unwrap().remove(0);
    assert_eq!(
        (kept.sends.state(), kept.sends.sent_at),
        (SendState::Sent, Some(at(71)))
    );
    assert!(s.claim_alert_sends(at(10_000), 10, LEASE).await.unwrap().is_empty());
}

/// A claim after a message's send window finds nothing to send, and a send
/// given up fails the message for good, with its error code.
pub async fn alert_sends_are_given_up_and_old_ones_left_unsent<S: Store>(s: &S) {
    outage_alerted(s, 1).await;
    let late = at(1).plus(SEND_WITHIN);
    assert!(
        s.claim_alert_sends(late, 10, LEASE).await.unwrap().is_empty(),
        "never sent once its window passed"
    );
    assert_eq!(s.alerts(1).await.unwrap()[0].sends.state(), SendState::Unsent);
    let claimed = s.claim_alert_sends(at(2), 10, LEASE).await.unwrap().remove(0);
    let give_up = SendDecision::GiveUp {
        at: at(3),
        code: "http.404".into(),
    };
    assert!(s.finish_alert_send(claimed.id, 1, &give_up).await.unwrap());
    let kept = s.alerts(1).await.unwrap().remove(0);
    assert_eq!(
        (
            kept.sends.state(),
            kept.sends.failed_at,
            kept.sends.last_error.as_deref()
        ),
        (SendState::Failed, Some(at(3)), Some("http.404"))
    );
    assert!(s.claim_alert_sends(at(4), 10, LEASE).await.unwrap().is_empty());
}

/// Retention forgets alert messages raised before it, as it does finished
/// deliveries; newer ones stay, and a new message never takes an old id.
pub async fn prune_forgets_alert_messages_older_than_the_retention<S: Store>(s: &S) {
    outage_alerted(s, 1).await;
    let before = s.alerts(10).await.unwrap();
    assert_eq!(before.len(), 1);
    s.prune(at(1), 100).await.unwrap();
    assert_eq!(s.alerts(10).await.unwrap().len(), 1, "raised at 1: not before 1");
    s.prune(at(2), 100).await.unwrap();
    assert!(s.alerts(10).await.unwrap().is_empty(), "raised at 1: before 2");
}
