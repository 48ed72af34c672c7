//! Scenarios of schedules' state.

use super::*;
use jadpo_core::{FailureKind, FailureRecord};

/// A schedule is claimed when due, by one worker at a time; its finish is
/// fenced on the lease and sets its next due time.
pub async fn schedules_are_claimed_once_when_due_and_fenced<S: crate::ScheduleStore>(s: &S) {
    let all = [("nightly".to_string(), at(100))];
    assert!(
        s.claim_schedules(&all, "w1", at(99), LEASE).await.unwrap().is_empty(),
        "not due yet"
    );
    let c = s.claim_schedules(&all, "w1", at(100), LEASE).await.unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].due_at, c[0].lost_run), (at(100), false));
    assert!(
        s.claim_schedules(&all, "w2", at(101), LEASE).await.unwrap().is_empty(),
        "one run at a time"
    );
    let token = c[0].state.lease.as_ref().unwrap().token;
    assert_eq!(
        s.finish_schedule("nightly", token, None, at(3700), at(110))
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        s.finish_schedule("nightly", token, None, at(3700), at(110)).await,
        Err(StoreError::ScheduleLeaseLost(_))
    ));
    let state = s.schedules().await.unwrap().remove(0);
    assert_eq!(
        (state.next_due, state.lease.clone(), state.consecutive_failures),
        (at(3700), None, 0)
    );
    assert!(
        s.claim_schedules(&all, "w1", at(3699), LEASE).await.unwrap().is_empty(),
        "its next due time is its retry"
    );
}

/// A schedule's run whose worker is lost is taken over when its lease ends,
/// recorded as `lease_expired`; the lost worker's finish is refused.
pub async fn a_schedule_run_lost_with_its_worker_ends_as_lease_expired<S: crate::ScheduleStore>(s: &S) {
    let all = [("sync".to_string(), at(0))];
    let lost = s.claim_schedules(&all, "w1", at(0), LEASE).await.unwrap().remove(0);
    let again = s.claim_schedules(&all, "w2", at(60), LEASE).await.unwrap().remove(0);
    assert!(again.lost_run);
    assert_eq!(again.state.last_failure, Some(FailureRecord::lease_expired()));
    let old = lost.state.lease.as_ref().unwrap().token;
    assert!(matches!(
        s.finish_schedule("sync", old, None, at(500), at(70)).await,
        Err(StoreError::ScheduleLeaseLost(_))
    ));
}

/// A schedule failing three runs in a row raises one alert, kept as an alert
/// message; a fourth failure raises nothing more.
pub async fn a_schedule_failing_three_runs_in_a_row_raises_one_alert<S: crate::ScheduleStore>(s: &S) {
    let all = [("sync".to_string(), at(0))];
    let mut alerts = Vec::new();
    for i in 0..4 {
        let c = s
            .claim_schedules(&all, "w", at(i * 100), LEASE)
            .await
            .unwrap()
            .remove(0);
        let token = c.state.lease.as_ref().unwrap().token;
        let failure = Some(FailureRecord::new("http.503", FailureKind::Unavailable));
        alerts.extend(
            s.finish_schedule("sync", token, failure, at(i * 100 + 100), at(i * 100 + 10))
                .await
                .unwrap(),
        );
    }
    assert_eq!(alerts.len(), 1);
    assert_eq!((alerts[0].schedule.as_str(), alerts[0].failures), ("sync", 3));
    // Kept as an alert message, to be sent where the app routes alerts.
    let kept = s.alerts(10).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].message,
        jadpo_core::alert::AlertMessage::schedule_failing(&alerts[0], at(210))
    );
}
