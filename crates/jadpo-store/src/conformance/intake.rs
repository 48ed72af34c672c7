//! Idempotent intake: an event emitted again under its key.

use super::*;
use crate::{NewEvent, Store, StoreError};

fn keyed(name: &str, payload: &str, key: &str) -> NewEvent {
    NewEvent {
        name: name.into(),
        payload: payload.into(),
        subscribers: vec!["log".into(), "pay".into()],
        idempotency_key: Some(key.into()),
        trace: None,
        keys: Default::default(),
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

/// A keyed subscriber's delivery keeps its key, through a claim and an
/// end, in its own transaction and in a run's emits; a subscriber without
/// one has none; the listing finds a key's deliveries, newest first.
pub async fn a_delivery_keeps_its_key_and_is_found_by_it<S: Store>(s: &S) {
    use jadpo_core::key::{Key, KeyValue};
    let key = |v: &str| Key::new(KeyValue::Str(v)).unwrap();
    let with_key = |n: u32, k: &str| NewEvent {
        idempotency_key: None,
        keys: [("pay".to_string(), key(k).into())].into(),
        ..keyed("E", &format!(r#"{{"n":{n}}}"#), "")
    };
    let emitted = s
        .emit(&[with_key(1, "c-42"), with_key(2, "c-7"), with_key(3, "c-42")], at(0))
        .await
        .unwrap();
    let by_key = |k: &str| crate::DeliveryFilter {
        key: Some(k.into()),
        ..crate::DeliveryFilter::default()
    };
    let found = s.list(&by_key("c-42")).await.unwrap();
    let ids: Vec<_> = found.iter().map(|d| d.id).collect();
    assert_eq!(
        ids,
        [emitted[2].deliveries[1], emitted[0].deliveries[1]],
        "the key's, newest first"
    );
    assert!(found
        .iter()
        .all(|d| d.subscriber == "pay" && d.key == Some(key("c-42"))));
    let log = get(s, emitted[0].deliveries[0]).await;
    assert_eq!(
        (log.subscriber.as_str(), log.key),
        ("log", None),
        "an unkeyed subscriber's has none"
    );
    assert!(s.list(&by_key("c-1")).await.unwrap().is_empty());
    // Claimed and finished, it keeps its key; a run's emits keep theirs.
    let claimed = claim(s, 0, 10).await.claimed;
    let c = claimed
        .iter()
        .find(|c| c.delivery.id == emitted[1].deliveries[1])
        .unwrap();
    assert_eq!(c.delivery.key, Some(key("c-7")));
    s.finish(&crate::Finish {
        emits: crate::Emits {
            depth: 1,
            events: vec![with_key(4, "c-7")],
        },
        ..c.finish(jadpo_core::Outcome::Succeeded, at(1), at(1))
    })
    .await
    .unwrap();
    let after = get(s, c.delivery.id).await;
    assert_eq!(
        (after.state, after.key),
        (jadpo_core::DeliveryState::Succeeded, Some(key("c-7")))
    );
    assert_eq!(
        s.list(&by_key("c-7")).await.unwrap().len(),
        2,
        "the run's emit has the key too"
    );
}

/// An event keeps the trace it was emitted in: its read and every claim of
/// its deliveries carry it, and a run's emits join it. One emitted without
/// a trace has none.
pub async fn an_event_keeps_the_trace_it_was_emitted_in<S: Store>(s: &S) {
    let trace = jadpo_core::TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=00f067aa0ba902b7"),
    )
    .unwrap();
    let traced = NewEvent {
        trace: Some(trace.clone()),
        ..keyed("E", r#"{"n":1}"#, "t")
    };
    let plain = NewEvent {
        idempotency_key: None,
        ..keyed("E", r#"{"n":2}"#, "")
    };
    let emitted = s.emit(&[traced, plain], at(0)).await.unwrap();
    let read = s.event(emitted[0].event_id).await.unwrap().unwrap();
    assert_eq!(read.trace.as_ref(), Some(&trace));
    assert_eq!(s.event(emitted[1].event_id).await.unwrap().unwrap().trace, None);
    let claimed = claim(s, 0, 10).await.claimed;
    assert_eq!(claimed.len(), 4);
    for c in &claimed {
        let expected = (c.delivery.event_id == emitted[0].event_id).then_some(&trace);
        assert_eq!(c.event_trace.as_ref(), expected, "{:?}", c.delivery.id);
    }
    // A run's emits are in its event's trace.
    let c = claimed.iter().find(|c| c.event_trace.is_some()).unwrap();
    let report = s
        .finish(&crate::Finish {
            emits: crate::Emits {
                depth: 1,
                events: vec![NewEvent {
                    idempotency_key: None,
                    trace: c.event_trace.clone(),
                    ..keyed("Next", "{}", "")
                }],
            },
            ..c.finish(jadpo_core::Outcome::Succeeded, at(1), at(1))
        })
        .await
        .unwrap();
    let next = s.event(report.emitted[0].event_id).await.unwrap().unwrap();
    assert_eq!(next.trace, Some(trace));
}
