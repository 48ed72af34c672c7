//! What an idle worker sleeps until (the store's next due time), and the
//! per-minute summary the console reads.

use super::*;
use crate::Store;
use jadpo_core::Outcome;

pub async fn next_due_is_the_first_due_time_or_lease_end<S: Store>(s: &S) {
    assert_eq!(s.next_due().await.unwrap(), None, "nothing stored");
    let ids = emit(s, "log", 2, 10).await;
    assert_eq!(s.next_due().await.unwrap(), Some(at(10)));
    let r = claim(s, 10, 1).await;
    assert_eq!(r.claimed[0].delivery.id, ids[0]);
    assert_eq!(s.next_due().await.unwrap(), Some(at(10)), "the other is still due");
    let r2 = claim(s, 10, 1).await;
    assert_eq!(
        s.next_due().await.unwrap(),
        Some(at(10).plus(LEASE)),
        "both running: the first lease end, when a claim could take it over"
    );
    finish(s, &r.claimed[0], retry_at("http.503", 40), &[], 11)
        .await
        .unwrap();
    assert_eq!(
        s.next_due().await.unwrap(),
        Some(at(40)),
        "a retry scheduled by backoff"
    );
    finish(s, &r2.claimed[0], Outcome::Succeeded, &[], 12).await.unwrap();
    assert_eq!(s.next_due().await.unwrap(), Some(at(40)));
    let r = claim(s, 40, 1).await;
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 41).await.unwrap();
    assert_eq!(s.next_due().await.unwrap(), None, "everything finished");
}

pub async fn the_per_minute_summary_adds_up_and_forgets_old_minutes<S: Store>(s: &S) {
    let count = |minute: i64, series: &str, n: u64| MinuteCount {
        minute: at(minute),
        series: series.into(),
        n,
    };
    // Two processes' counts for the same minutes add up; a count anywhere
    // in a minute goes to its start.
    s.add_minutes(
        &[
            count(60, "succeeded", 3),
            count(61, "succeeded", 1),
            count(60, "held", 2),
        ],
        at(0),
    )
    .await
    .unwrap();
    s.add_minutes(&[count(119, "succeeded", 4), count(120, "failed", 1)], at(0))
        .await
        .unwrap();
    assert_eq!(
        s.minutes(at(0)).await.unwrap(),
        vec![count(60, "held", 2), count(60, "succeeded", 8), count(120, "failed", 1)]
    );
    assert_eq!(
        s.minutes(at(121)).await.unwrap(),
        vec![count(120, "failed", 1)],
        "from the minute on"
    );
    // Forgetting keeps the minute `forget_before` is in.
    s.add_minutes(&[], at(150)).await.unwrap();
    assert_eq!(s.minutes(at(0)).await.unwrap(), vec![count(120, "failed", 1)]);
}
