//! Per-key order and caps (docs/retries.md, "Order per key"): deliveries
//! of one key wait, `queued`, for a slot, and take them in emit order.

use super::*;
use crate::{DeliveryFilter, NewEvent, Store};
use jadpo_core::key::{Key, KeyValue, Keyed};
use jadpo_core::key_rule::KeyRule;
use jadpo_core::DeliveryState;

/// An event `E` whose `log` delivery has key `key` under `rule`.
fn of_key(n: usize, key: &str, rule: KeyRule) -> NewEvent {
    of_key_for("log", n, key, rule)
}

/// An event `E` whose one delivery, to `subscriber`, has key `key` under
/// `rule`.
fn of_key_for(subscriber: &str, n: usize, key: &str, rule: KeyRule) -> NewEvent {
    NewEvent {
        name: "E".into(),
        payload: format!("{{\"n\":{n}}}"),
        subscribers: vec![subscriber.into()],
        idempotency_key: None,
        trace: None,
        keys: [(
            subscriber.to_string(),
            Keyed {
                key: Key::new(KeyValue::Str(key)).unwrap(),
                rule: Some(rule),
            },
        )]
        .into(),
    }
}

/// Emits one event per key of `keys`, in one call, at `now` seconds: the
/// deliveries' ids in that order.
async fn emit_keys<S: Store>(s: &S, keys: &[&str], rule: KeyRule, now: i64) -> Vec<DeliveryId> {
    let events: Vec<NewEvent> = keys.iter().enumerate().map(|(i, k)| of_key(i, k, rule)).collect();
    s.emit(&events, at(now))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect()
}

async fn state<S: Store>(s: &S, id: DeliveryId) -> DeliveryState {
    s.delivery(id).await.unwrap().unwrap().state
}

async fn states<S: Store>(s: &S, ids: &[DeliveryId]) -> Vec<DeliveryState> {
    let mut out = Vec::new();
    for id in ids {
        out.push(state(s, *id).await);
    }
    out
}

fn ids(r: &ClaimReport) -> Vec<DeliveryId> {
    let mut ids: Vec<DeliveryId> = r.claimed.iter().map(|c| c.delivery.id).collect();
    ids.sort();
    ids
}

fn failed() -> Outcome {
    Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected))
}

/// `fifo`: one delivery of a key at a time, in emit order; the rest are
/// queued, never claimed. A retry keeps the key (the next waits for its
/// backoff too), a success or a failure for good hands it to the next.
/// Another key is not held up.
pub async fn fifo_runs_a_keys_deliveries_one_at_a_time_in_emit_order<S: Store>(s: &S) {
    use DeliveryState::*;
    let d = emit_keys(s, &["k", "j", "k", "k"], KeyRule::Fifo, 0).await;
    let (k1, j1, k2, k3) = (d[0], d[1], d[2], d[3]);
    assert_eq!(states(s, &d).await, [Due, Due, Queued, Queued]);
    let queued = s
        .list(&DeliveryFilter {
            state: Some(Queued),
            ..DeliveryFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(queued.iter().map(|d| d.id).collect::<Vec<_>>(), [k3, k2]);
    assert_eq!(s.waits_for(k2).await.unwrap(), Some(k1), "the key's holder");
    assert_eq!(s.waits_for(k1).await.unwrap(), None, "not queued");
    assert_eq!(s.waits_for(j1).await.unwrap(), None);
    let r = claim(s, 0, 10).await;
    assert_eq!(ids(&r), [k1, j1], "only each key's first");
    let first = r.claimed.iter().find(|c| c.delivery.id == k1).unwrap();
    let kept = finish(s, first, retry_at("http.503", 30), &[], 1).await.unwrap();
    assert!(!kept.freed_slot, "a retry keeps its key's slot");
    assert_eq!(claim(s, 2, 10).await.claimed.len(), 0, "k2 waits for k1's retry");
    assert_eq!(states(s, &[k2, k3]).await, [Queued, Queued]);
    let r = claim(s, 30, 10).await;
    assert_eq!(ids(&r), [k1]);
    let freed = finish(s, &r.claimed[0], failed(), &[], 31).await.unwrap();
    assert!(freed.freed_slot, "the finish says its end freed the slot");
    assert_eq!(
        states(s, &[k1, k2, k3]).await,
        [Failed, Due, Queued],
        "a failure frees the key"
    );
    assert_eq!(s.waits_for(k3).await.unwrap(), Some(k2), "the next holds it now");
    let k2_row = s.delivery(k2).await.unwrap().unwrap();
    assert_eq!(
        (k2_row.attempts, k2_row.budget_from, k2_row.due_at),
        (0, at(0), at(31)),
        "waiting spent nothing; within counts from the event"
    );
    let r = claim(s, 31, 10).await;
    assert_eq!(ids(&r), [k2]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 32).await.unwrap();
    let r = claim(s, 32, 10).await;
    assert_eq!(ids(&r), [k3]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 33).await.unwrap();
    assert_eq!(claim(s, 34, 10).await.claimed.len(), 0);
}

/// A cap lets that many of a key run at once, in no order promised.
pub async fn a_cap_lets_that_many_of_a_key_run_at_once<S: Store>(s: &S) {
    let d = emit_keys(s, &["k", "k", "k", "k"], KeyRule::Cap(2), 0).await;
    assert_eq!(s.waits_for(d[2]).await.unwrap(), Some(d[1]), "the last to take a slot");
    let r = claim(s, 0, 10).await;
    assert_eq!(ids(&r), [d[0], d[1]]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 1).await.unwrap();
    let r2 = claim(s, 1, 10).await;
    assert_eq!(ids(&r2), [d[2]]);
    assert_eq!(s.waits_for(d[3]).await.unwrap(), Some(d[2]));
    assert_eq!(state(s, d[3]).await, DeliveryState::Queued);
}

/// `strict`: a delivery that fails for good keeps its key until an
/// operator retries it and it ends; `fifo` would have gone on.
pub async fn strict_blocks_a_key_behind_a_failure_until_an_operator_retries<S: Store>(s: &S) {
    use DeliveryState::*;
    let d = emit_keys(s, &["k", "k"], KeyRule::Strict, 0).await;
    let r = claim(s, 0, 10).await;
    assert_eq!(ids(&r), [d[0]]);
    finish(s, &r.claimed[0], failed(), &[], 1).await.unwrap();
    assert_eq!(states(s, &d).await, [Failed, Queued]);
    assert_eq!(claim(s, 100, 10).await.claimed.len(), 0);
    assert_eq!(s.retry(&[(d[0], at(200))], at(200)).await.unwrap(), [d[0]]);
    assert_eq!(states(s, &d).await, [Due, Queued], "it held the key all along");
    let r = claim(s, 200, 10).await;
    assert_eq!(ids(&r), [d[0]]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 201).await.unwrap();
    assert_eq!(states(s, &d).await, [Succeeded, Due]);
}

/// An operator's retry of a `fifo` delivery that ended takes the key again
/// if it is free, else waits queued, first in line: its place is its id.
pub async fn an_operator_retry_waits_for_its_key_first_in_line<S: Store>(s: &S) {
    use DeliveryState::*;
    let d = emit_keys(s, &["k", "k", "k"], KeyRule::Fifo, 0).await;
    let r = claim(s, 0, 10).await;
    finish(s, &r.claimed[0], failed(), &[], 1).await.unwrap();
    let r = claim(s, 1, 10).await;
    assert_eq!(ids(&r), [d[1]]);
    assert_eq!(s.retry(&[(d[0], at(2))], at(2)).await.unwrap(), [d[0]]);
    assert_eq!(states(s, &d).await, [Queued, Running, Queued]);
    assert_eq!(s.waits_for(d[0]).await.unwrap(), Some(d[1]));
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 3).await.unwrap();
    assert_eq!(states(s, &d).await, [Due, Succeeded, Queued], "the retried one first");
    let r = claim(s, 3, 10).await;
    assert_eq!(ids(&r), [d[0]]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 4).await.unwrap();
    assert_eq!(states(s, &d).await, [Succeeded, Succeeded, Due]);
}

/// A promotion makes the next delivery due at the freeing end's time, or
/// at its own due time when that is later: an end stamped earlier than an
/// emit (another process's clock) never makes it due before it was.
pub async fn a_promoted_delivery_is_never_due_before_its_own_time<S: Store>(s: &S) {
    let first = emit_keys(s, &["k"], KeyRule::Fifo, 0).await[0];
    let next = emit_keys(s, &["k"], KeyRule::Fifo, 100).await[0];
    let r = claim(s, 0, 10).await;
    assert_eq!(ids(&r), [first]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 50).await.unwrap();
    let row = s.delivery(next).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.due_at),
        (DeliveryState::Due, at(100)),
        "its own due time kept"
    );
    assert_eq!(claim(s, 60, 10).await.claimed.len(), 0, "not due before it was emitted");
    assert_eq!(ids(&claim(s, 100, 10).await), [next]);
}

/// A worker lost mid-run keeps its key: the delivery is claimed again when
/// its lease ends, and the next still waits.
pub async fn a_lost_lease_keeps_the_key<S: Store>(s: &S) {
    let d = emit_keys(s, &["k", "k"], KeyRule::Fifo, 0).await;
    assert_eq!(ids(&claim(s, 0, 10).await), [d[0]]);
    let later = LEASE.as_secs() as i64 + 1;
    assert_eq!(
        ids(&claim_as(s, "w2", later, 10).await),
        [d[0]],
        "taken over, not passed"
    );
    assert_eq!(state(s, d[1]).await, DeliveryState::Queued);
}

/// A claim that ends a delivery instead of running it hands its key on,
/// as a finish does: a `within:` spent while it waited (a long outage, a
/// long queue), or a lost run whose handled record says it committed.
pub async fn a_claim_that_ends_a_delivery_hands_its_key_on<S: Store>(s: &S) {
    use DeliveryState::*;
    let d = emit_keys(s, &["k", "k", "k"], KeyRule::Fifo, 0).await;
    let r = claim(s, 3601, 10).await;
    assert_eq!(r.gave_up, [d[0]], "`log` tries within an hour");
    assert_eq!(states(s, &d).await, [Failed, Due, Queued], "the key moved on");
    let e = emit_keys(s, &["j", "j"], KeyRule::Fifo, 3601).await;
    let lost = claim(s, 3601, 10).await;
    assert_eq!(lost.gave_up, [d[1]]);
    assert_eq!(ids(&lost), [e[0]]);
    let running = lost.claimed.iter().find(|c| c.delivery.id == e[0]).unwrap();
    s.commit_handled(e[0], running.token(), at(3602)).await.unwrap();
    let later = 3601 + LEASE.as_secs() as i64 + 1;
    let r = claim_as(s, "w2", later, 10).await;
    assert!(r.succeeded.contains(&e[0]), "committed, not run again: {r:?}");
    assert_eq!(state(s, e[1]).await, Due, "the key moved on");
}

/// Retention deletes a `strict` key's failed delivery nobody retried:
/// the key goes on with the next.
pub async fn a_pruned_strict_failure_frees_its_key<S: Store>(s: &S) {
    let d = emit_keys(s, &["k", "k"], KeyRule::Strict, 0).await;
    let r = claim(s, 0, 10).await;
    finish(s, &r.claimed[0], failed(), &[], 1).await.unwrap();
    assert_eq!(s.prune(at(100), 10).await.unwrap(), 1);
    assert_eq!(state(s, d[1]).await, DeliveryState::Due);
}

/// An operator's skip of a `strict` key's failure moves the key on to the
/// next, calls nothing, and records who and when; the skipped delivery
/// keeps its state and its failure. Skipped once only, a retry after it
/// waits behind the key's head, and retention does not hand the key on a
/// second time.
pub async fn a_skip_moves_a_strict_key_on_and_is_recorded<S: Store>(s: &S) {
    use DeliveryState::*;
    let d = emit_keys(s, &["k", "k", "k"], KeyRule::Strict, 0).await;
    assert_eq!(
        s.skip(&[d[0]], "ana", at(1)).await.unwrap(),
        [],
        "a due delivery is not skipped"
    );
    let r = claim(s, 0, 10).await;
    finish(s, &r.claimed[0], failed(), &[], 1).await.unwrap();
    assert_eq!(states(s, &d).await, [Failed, Queued, Queued]);
    assert_eq!(s.skip(&[d[0], d[0]], "ana", at(5)).await.unwrap(), [d[0]], "each once");
    assert_eq!(states(s, &d).await, [Failed, Due, Queued], "the key moved on");
    let row = s.delivery(d[0]).await.unwrap().unwrap();
    assert_eq!(
        row.skipped,
        Some(jadpo_core::Skipped {
            by: "ana".into(),
            at: at(5)
        })
    );
    assert_eq!(
        row.last_failure.map(|f| f.code),
        Some("http.400".into()),
        "its failure is kept"
    );
    assert_eq!(row.finished_at, Some(at(1)));
    assert_eq!(s.skip(&[d[0]], "bo", at(6)).await.unwrap(), [], "skipped once");
    assert_eq!(s.attempts(d[0]).await.unwrap().len(), 1, "nothing was called");
    assert_eq!(s.waits_for(d[2]).await.unwrap(), Some(d[1]));
    assert_eq!(s.retry(&[(d[0], at(7))], at(7)).await.unwrap(), [d[0]]);
    assert_eq!(
        states(s, &d).await,
        [Queued, Due, Queued],
        "retried, it waits first in line"
    );
    assert_eq!(
        s.delivery(d[0]).await.unwrap().unwrap().skipped,
        None,
        "a retry clears the skip"
    );
    let r = claim(s, 7, 10).await;
    assert_eq!(ids(&r), [d[1]]);
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 8).await.unwrap();
    assert_eq!(states(s, &d).await, [Due, Succeeded, Queued]);
    let r = claim(s, 8, 10).await;
    finish(s, &r.claimed[0], failed(), &[], 9).await.unwrap();
    s.skip(&[d[0]], "ana", at(10)).await.unwrap();
    assert_eq!(states(s, &d).await, [Failed, Succeeded, Due]);
    let r = claim(s, 10, 10).await;
    assert_eq!(ids(&r), [d[2]]);
    assert_eq!(
        s.prune(at(100), 10).await.unwrap(),
        2,
        "the skipped failure and the success"
    );
    assert_eq!(
        state(s, d[2]).await,
        Running,
        "retention took no slot from the key's holder"
    );
    finish(s, &r.claimed[0], Outcome::Succeeded, &[], 101).await.unwrap();
    let later = emit_keys(s, &["k"], KeyRule::Strict, 102).await;
    assert_eq!(
        state(s, later[0]).await,
        Due,
        "the key's one slot is free, not over-freed or lost"
    );
    let more = emit_keys(s, &["k"], KeyRule::Strict, 103).await;
    assert_eq!(state(s, more[0]).await, Queued, "and there is one slot, not two");
}

/// A delivery held behind an open breaker keeps its key's slot: the next
/// of its key stays queued, not held, and the release lets the held one
/// run before it.
pub async fn a_hold_keeps_its_keys_place_and_the_release_its_order<S: Store>(s: &S) {
    use jadpo_core::breaker::CallVerdict;
    use DeliveryState::*;
    open_breaker(s, 0).await;
    let other = emit(s, "pay", 1, 1).await[0];
    let events: Vec<NewEvent> = (0..2).map(|i| of_key_for("pay", i, "k", KeyRule::Fifo)).collect();
    let d: Vec<DeliveryId> = s
        .emit(&events, at(1))
        .await
        .unwrap()
        .into_iter()
        .flat_map(|e| e.deliveries)
        .collect();
    let r = claim(s, 1, 10).await;
    assert_eq!(r.held, [other, d[0]], "the queued one is not even looked at");
    assert_eq!(states(s, &d).await, [Held, Queued]);
    // The longest held, the unkeyed one, probes; its success closes the
    // breaker and releases the keyed one, which runs before the next.
    assert_eq!(s.sweep(at(60), LEASE).await.unwrap().woken, [other]);
    let r = claim(s, 60, 10).await;
    let probe = r.claimed.iter().find(|c| c.delivery.id == other).expect("the probe");
    finish(s, probe, Outcome::Succeeded, &[("payments", CallVerdict::Answered)], 61)
        .await
        .unwrap();
    assert_eq!(states(s, &d).await, [Due, Queued], "released, it keeps its place");
    let r = claim(s, 61, 10).await;
    let head = r
        .claimed
        .iter()
        .find(|c| c.delivery.id == d[0])
        .expect("the released one runs");
    assert!(!r.claimed.iter().any(|c| c.delivery.id == d[1]), "not its next");
    finish(s, head, Outcome::Succeeded, &[("payments", CallVerdict::Answered)], 62)
        .await
        .unwrap();
    assert_eq!(states(s, &d).await, [Succeeded, Due]);
}

/// An operator's bulk retry keeps the order of the deliveries it retries,
/// in whatever order it names them (the command line's newest first).
pub async fn a_bulk_retry_keeps_its_keys_order<S: Store>(s: &S) {
    use DeliveryState::*;
    let d = emit_keys(s, &["k", "k", "k"], KeyRule::Fifo, 0).await;
    for t in 1..=3 {
        let r = claim(s, t, 10).await;
        assert_eq!(r.claimed.len(), 1);
        finish(s, &r.claimed[0], failed(), &[], t).await.unwrap();
    }
    assert_eq!(states(s, &d).await, [Failed, Failed, Failed]);
    let newest_first = [(d[2], at(10)), (d[1], at(10)), (d[0], at(10))];
    assert_eq!(s.retry(&newest_first, at(10)).await.unwrap().len(), 3);
    assert_eq!(states(s, &d).await, [Due, Queued, Queued], "the earliest takes the key");
    for (t, id) in (10..).zip(d) {
        let r = claim(s, t, 10).await;
        assert_eq!(ids(&r), [id], "in emit order");
        finish(s, &r.claimed[0], Outcome::Succeeded, &[], t).await.unwrap();
    }
}
