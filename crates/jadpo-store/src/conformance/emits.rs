//! Scenarios of the events a run emits: written with its outcome, in the
//! same transaction, only when it succeeded and its lease held, so no crash
//! or late worker can emit twice; their deliveries carry the chain's depth.

use super::*;

fn emits(depth: u32, ids: &[&str]) -> Emits {
    Emits {
        depth,
        events: ids
            .iter()
            .map(|id| NewEvent {
                name: "Emitted".into(),
                payload: format!("{{\"id\":\"{id}\"}}"),
                subscribers: vec!["log".into()],
                idempotency_key: None,
                trace: None,
                keys: Default::default(),
            })
            .collect(),
    }
}

async fn finish_emitting<S: Store>(
    s: &S,
    c: &Claimed,
    outcome: Outcome,
    emitted: Emits,
    now: i64,
) -> Result<FinishReport, StoreError> {
    s.finish(&Finish {
        emits: emitted,
        ..c.finish(outcome, at(now), at(now))
    })
    .await
}

/// A succeeded run's emits are written with its finish, one delivery per
/// subscriber of each, one emit deeper than its own event.
pub async fn a_runs_emits_are_written_with_its_success_and_carry_its_depth<S: Store>(s: &S) {
    emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 10).await.claimed.remove(0);
    assert_eq!(c.event_depth, 0, "an event from outside");
    let report = finish_emitting(s, &c, Outcome::Succeeded, emits(1, &["a", "b"]), 1)
        .await
        .unwrap();
    assert_eq!(report.emitted.len(), 2);
    let ids: Vec<DeliveryId> = report.emitted.iter().flat_map(|e| e.deliveries.clone()).collect();
    assert_eq!(ids.len(), 2, "one delivery per subscriber of each");
    let event = s.event(report.emitted[0].event_id).await.unwrap().unwrap();
    assert_eq!(
        (event.name.as_str(), event.payload.as_str()),
        ("Emitted", "{\"id\":\"a\"}")
    );
    let next = claim(s, 2, 10).await.claimed;
    assert_eq!(next.iter().map(|c| c.delivery.id).collect::<Vec<_>>(), ids);
    assert!(next.iter().all(|c| c.event_depth == 1), "one emit deep");
}

/// A run that did not succeed emits nothing: its events are dropped with it.
pub async fn a_failed_run_emits_nothing<S: Store>(s: &S) {
    emit(s, "log", 1, 0).await;
    let c = claim(s, 0, 10).await.claimed.remove(0);
    let report = finish_emitting(s, &c, retry_at("http.503", 60), emits(1, &["a"]), 1)
        .await
        .unwrap();
    assert!(report.emitted.is_empty());
    assert_eq!(
        counts(s).await.get(&jadpo_core::DeliveryState::Due),
        Some(&1),
        "only the retry"
    );
}

/// A worker killed after its provider call and before its finish: nothing
/// was written. Its rerun, after the lease ended, emits once; the first
/// worker's late finish is refused by the fence and emits nothing.
pub async fn a_lost_runs_emits_are_written_once_by_its_rerun<S: Store>(s: &S) {
    emit(s, "log", 1, 0).await;
    let lost = claim_as(s, "killed", 0, 10).await.claimed.remove(0);
    let rerun = claim_as(s, "w2", 61, 10).await.claimed.remove(0);
    assert_eq!(rerun.delivery.id, lost.delivery.id);
    let report = finish_emitting(s, &rerun, Outcome::Succeeded, emits(1, &["a"]), 62)
        .await
        .unwrap();
    assert_eq!(report.emitted.len(), 1);
    let late = finish_emitting(s, &lost, Outcome::Succeeded, emits(1, &["a"]), 63).await;
    assert!(matches!(late, Err(StoreError::LeaseLost(_))), "{late:?}");
    let all = s.list(&DeliveryFilter::default()).await.unwrap();
    assert_eq!(all.len(), 2, "the delivery and the one its rerun's emit made");
}

async fn counts<S: Store>(s: &S) -> std::collections::BTreeMap<jadpo_core::DeliveryState, u64> {
    s.counts_up_to(1_000).await.unwrap()
}
