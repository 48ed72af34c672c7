//! Idempotent intake: an event emitted again under its key.

use super::*;
use crate::{NewEvent, Store, StoreError};

fn keyed(name: &str, payload: &str, key: &str) -> NewEvent {
    NewEvent {
        name: name.into(),
        payload: payload.into(),
        subscribers: vec!["log".into(), "pay".into()],
        idempotency_key: Some(key.into()),
    }
}

async fn events<S: Store>(s: &S) -> usize {
    s.list(&crate::DeliveryFilter::default()).await.unwrap().len() / 2
}

/// The same idempotency key and payload again returns the first event and makes
/// nothing; another payload refuses the whole emit. Keys are per event name,
/// and a repeat within one emit is the first.
pub async fn the_same_key_twice_makes_one_event_and_another_payload_is_refused<S: Store>(s: &S) {
    let first = s
        .emit(&[keyed("E", r#"{"n":1}"#, "k1")], at(0))
        .await
        .unwrap()
        .remove(0);
    assert!(!first.duplicate);
    assert_eq!(first.deliveries.len(), 2);
    // Again, later: the first event, nothing made.
    let again = s
        .emit(&[keyed("E", r#"{"n":1}"#, "k1")], at(5))
        .await
        .unwrap()
        .remove(0);
    assert!(again.duplicate);
    assert_eq!(
        (again.event_id, &again.public_id, &again.deliveries),
        (first.event_id, &first.public_id, &first.deliveries)
    );
    assert_eq!(events(s).await, 1);
    // The same key, another payload: refused, and the whole call makes
    // nothing (the unkeyed event beside it either).
    let plain = NewEvent {
        idempotency_key: None,
        ..keyed("E", r#"{"n":3}"#, "")
    };
    let refused = s.emit(&[plain, keyed("E", r#"{"n":2}"#, "k1")], at(6)).await;
    assert!(
        matches!(refused, Err(StoreError::IdempotencyConflict(ref n)) if n == "E"),
        "{refused:?}"
    );
    assert_eq!(events(s).await, 1);
    // Keys are per event name; within one call, a repeat is the first.
    let other = s
        .emit(&[keyed("F", r#"{"n":1}"#, "k1"), keyed("F", r#"{"n":1}"#, "k1")], at(7))
        .await
        .unwrap();
    assert!(!other[0].duplicate && other[1].duplicate);
    assert_ne!(other[0].event_id, first.event_id);
    assert_eq!(other[1].event_id, other[0].event_id);
    assert_eq!(events(s).await, 2);
}

/// The key goes with its event at retention: afterwards it names a new one.
pub async fn a_key_is_pruned_with_its_event<S: Store>(s: &S) {
    let first = s.emit(&[keyed("E", r#"{"n":1}"#, "k")], at(0)).await.unwrap().remove(0);
    let r = claim(s, 0, 10).await;
    for c in &r.claimed {
        finish(s, c, jadpo_core::Outcome::Succeeded, &[], 1).await.unwrap();
    }
    assert_eq!(r.claimed.len(), 2);
    assert_eq!(s.prune(at(100), 10).await.unwrap(), 2);
    assert_eq!(s.event(first.event_id).await.unwrap(), None);
    let again = s
        .emit(&[keyed("E", r#"{"n":2}"#, "k")], at(200))
        .await
        .unwrap()
        .remove(0);
    assert!(!again.duplicate);
    assert_ne!(again.event_id, first.event_id);
}
