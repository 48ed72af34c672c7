//! What an idle worker sleeps until (the store's next due time), and the
//! per-minute summary the console reads.

use super::*;
use crate::Store;
use jadpo_core::Outcome;

/// The next due time is the earliest due delivery's time or running lease's
/// end; `None` once everything finished.
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

/// A store keeps one scaled clock: the first anchor kept wins, a later one
/// (another process starting at another scale, or the same scale later)
/// reads the first back and changes nothing, and the anchor survives a
/// migration run again.
pub async fn the_first_clock_anchor_kept_is_the_only_one<S: Store>(s: &S) {
    use jadpo_core::clock::Anchor;
    assert_eq!(s.clock_anchor().await.unwrap(), None, "a new store runs on real time");
    let first = Anchor {
        scale: 600,
        real: at(1_000),
        engine: at(2_000),
    };
    assert_eq!(s.keep_clock_anchor(first).await.unwrap(), first);
    let later = Anchor::first(60, at(5_000));
    assert_eq!(s.keep_clock_anchor(later).await.unwrap(), first, "never moved");
    s.migrate().await.unwrap();
    assert_eq!(s.clock_anchor().await.unwrap(), Some(first));
}

/// A console sign-in is alive until its expiry or its sign-out, for every
/// reader of the store; a later sign-in forgets the expired ones.
pub async fn a_console_session_lives_until_it_expires_or_ends<S: Store>(s: &S) {
    assert!(!s.session_alive("a", at(0)).await.unwrap(), "never kept");
    s.start_session("a", at(100), at(0)).await.unwrap();
    s.start_session("b", at(50), at(0)).await.unwrap();
    assert!(s.session_alive("a", at(99)).await.unwrap());
    assert!(!s.session_alive("a", at(100)).await.unwrap(), "expired at its time");
    assert!(s.session_alive("b", at(10)).await.unwrap());
    s.end_session("b").await.unwrap();
    assert!(!s.session_alive("b", at(10)).await.unwrap(), "signed out");
    s.end_session("b").await.unwrap();
    s.start_session("c", at(300), at(200)).await.unwrap();
    assert!(!s.session_alive("a", at(0)).await.unwrap(), "forgotten once expired");
    assert!(s.session_alive("c", at(200)).await.unwrap());
}

/// The per-minute summary adds up every process's counts, each at its minute's
/// start, reads from a minute on, and forgets the minutes before the one
/// `forget_before` is in.
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
