//! The notifications that wake idle workers in every process: which
//! transactions send one, that they are sent only on commit, and that the
//! store's listener turns them into wake-ups. Each test in a schema of its
//! own; skipped (loudly) without PostgreSQL, except under `CI=true`.
//!
//! Notifications of different transactions arrive in commit order, so a
//! test tells "none was sent" from "not yet arrived" without waiting: it
//! sends a marker of its own after the step and counts what arrives before
//! the marker.

use jadpo_core::{CallVerdict, DeliveryState, FailureKind, FailureRecord, Outcome};
use jadpo_store::conformance::{self, at, open_breaker, LEASE};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::postgres::{emit_in, Options, PgStore};
use jadpo_store::{NewEvent, Store};
use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::time::timeout;

const WITHIN: Duration = Duration::from_secs(10);

/// A connection listening on a store's channel, outside the store.
struct Heard {
    client: tokio_postgres::Client,
    channel: String,
    payloads: mpsc::UnboundedReceiver<String>,
    markers: u32,
}

impl Heard {
    async fn on(schema: &TestSchema, store: &PgStore) -> Heard {
        let channel = store.channel().await.unwrap();
        let (client, mut connection) = tokio_postgres::connect(schema.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        let (tx, payloads) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) = poll_fn(|cx| connection.poll_message(cx)).await {
                if let tokio_postgres::AsyncMessage::Notification(n) = message {
                    let _ = tx.send(n.payload().to_owned());
                }
            }
        });
        client.batch_execute(&format!("LISTEN \"{channel}\"")).await.unwrap();
        Heard {
            client,
            channel,
            payloads,
            markers: 0,
        }
    }

    /// How many of the store's notifications arrived since the last call:
    /// those before a marker sent now.
    async fn since_last(&mut self) -> usize {
        self.markers += 1;
        let marker = format!("marker {}", self.markers);
        self.client
            .execute("SELECT pg_notify($1, $2)", &[&self.channel, &marker])
            .await
            .unwrap();
        let mut n = 0;
        loop {
            let payload = timeout(WITHIN, self.payloads.recv())
                .await
                .expect("the marker arrives")
                .expect("still listening");
            if payload == marker {
                return n;
            }
            assert_eq!(payload, "", "the store's notifications carry no payload");
            n += 1;
        }
    }
}

fn events(n: usize, subscribers: &[&str]) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            name: "E".into(),
            payload: format!("{{\"n\":{i}}}"),
            subscribers: subscribers.iter().map(|s| s.to_string()).collect(),
            idempotency_key: None,
            trace: None,
            keys: Default::default(),
        })
        .collect()
}

async fn setup() -> Option<(Arc<TestSchema>, PgStore)> {
    let schema = TestSchema::create().await?;
    let store = schema.store(Options::default()).await;
    Some((schema, store))
}

#[tokio::test]
async fn the_channel_is_the_schemas_own() {
    let Some((schema, store)) = setup().await else { return };
    let Some((other, other_store)) = setup().await else {
        return;
    };
    assert_eq!(store.channel().await.unwrap(), format!("jadpo_due_{}", schema.name()));
    assert_eq!(
        other_store.channel().await.unwrap(),
        format!("jadpo_due_{}", other.name())
    );
}

#[tokio::test]
async fn each_write_that_makes_deliveries_due_sends_one_notification() {
    let Some((schema, s)) = setup().await else { return };
    let mut heard = Heard::on(&schema, &s).await;
    assert_eq!(heard.since_last().await, 0);

    s.emit(&events(100, &["log", "pay"]), at(0)).await.unwrap();
    assert_eq!(heard.since_last().await, 1, "one for 200 deliveries in one transaction");
    s.emit(&events(2, &[]), at(0)).await.unwrap();
    assert_eq!(
        heard.since_last().await,
        0,
        "events without subscribers make nothing due"
    );

    // Claims and finishes that make nothing due now send nothing.
    let r = conformance::claim(&s, 0, 1000).await;
    assert_eq!(r.claimed.len(), 200);
    for c in &r.claimed {
        let outcome = Outcome::Failed(FailureRecord::new("http.400", FailureKind::Rejected));
        conformance::finish(&s, c, outcome, &[], 1).await.unwrap();
    }
    assert_eq!(heard.since_last().await, 0);

    // An operator's retry, even one due later (the listeners then wait
    // for its time).
    let failed = r.claimed[0].delivery.id;
    assert_eq!(s.retry(&[(failed, at(500))], at(2)).await.unwrap(), vec![failed]);
    assert_eq!(heard.since_last().await, 1);
    assert!(s.retry(&[(failed, at(3))], at(3)).await.unwrap().is_empty());
    assert_eq!(heard.since_last().await, 0, "a retry that retried nothing");
}

#[tokio::test]
async fn a_probes_wake_up_and_a_release_send_one_each() {
    let Some((schema, s)) = setup().await else { return };
    open_breaker(&s, 0).await;
    conformance::emit(&s, "pay", 3, 1).await;
    assert_eq!(conformance::claim(&s, 1, 10).await.held.len(), 3);
    let mut heard = Heard::on(&schema, &s).await;

    assert!(s.sweep(at(59), LEASE).await.unwrap().woken.is_empty());
    assert_eq!(heard.since_last().await, 0, "a sweep that wakes nothing");
    assert_eq!(s.sweep(at(60), LEASE).await.unwrap().woken.len(), 1);
    assert_eq!(heard.since_last().await, 1, "the probe is due now");

    let probe = conformance::claim(&s, 60, 10).await.claimed.remove(0);
    let answered = [("payments", CallVerdict::Answered)];
    let report = conformance::finish(&s, &probe, Outcome::Succeeded, &answered, 61)
        .await
        .unwrap();
    assert!(report.released > 0);
    assert_eq!(heard.since_last().await, 1, "the release behind the closed breaker");
    assert_eq!(
        s.counts().await.unwrap().get(&DeliveryState::Held),
        None,
        "everything held was released"
    );
}

#[tokio::test]
async fn emit_in_notifies_only_when_the_callers_transaction_commits() {
    let Some((schema, s)) = setup().await else { return };
    let mut heard = Heard::on(&schema, &s).await;
    let mut conn = s.connection().await.unwrap();

    let tx = conn.transaction().await.unwrap();
    emit_in(&tx, &events(3, &["log"]), at(0)).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(heard.since_last().await, 0, "rolled back: no notification");

    let tx = conn.transaction().await.unwrap();
    emit_in(&tx, &events(3, &["log"]), at(0)).await.unwrap();
    assert_eq!(heard.since_last().await, 0, "not before the commit");
    tx.commit().await.unwrap();
    assert_eq!(heard.since_last().await, 1, "one on commit");
}

#[tokio::test]
async fn the_listener_wakes_on_start_and_on_every_notification() {
    let Some((schema, s)) = setup().await else { return };
    let other = schema.store(Options::default()).await;
    let wake = Arc::new(Notify::new());
    let listener = tokio::spawn({
        let (s, wake) = (s.clone(), wake.clone());
        async move { s.listen(wake).await }
    });
    timeout(WITHIN, wake.notified())
        .await
        .expect("a wake-up once listening: anything sent before was missed");
    for round in 0..3 {
        other.emit(&events(1, &["log"]), at(round)).await.unwrap();
        timeout(WITHIN, wake.notified())
            .await
            .unwrap_or_else(|_| panic!("an emit by another store value wakes it (round {round})"));
    }
    listener.abort();
}

/// A finish that hands its key's slot on makes the next delivery of the
/// key due: the idle workers of every process hear of it, once for the
/// batch. A finish that hands nothing on sends nothing.
#[tokio::test]
async fn a_finish_that_hands_a_keys_slot_on_sends_one() {
    use jadpo_core::key::{Key, KeyValue, Keyed};
    use jadpo_core::key_rule::KeyRule;
    let Some((schema, s)) = setup().await else { return };
    // Two keys, two deliveries each: one due, one queued behind it.
    let keyed: Vec<NewEvent> = events(4, &["log"])
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            let key = Keyed {
                key: Key::new(KeyValue::Int(i as i64 % 2)).unwrap(),
                rule: Some(KeyRule::Fifo),
            };
            e.keys = [("log".to_string(), key)].into();
            e
        })
        .collect();
    s.emit(&keyed, at(0)).await.unwrap();
    let mut heard = Heard::on(&schema, &s).await;

    let first = conformance::claim(&s, 1, 10).await.claimed;
    assert_eq!(first.len(), 2, "one of each key");
    let batch: Vec<_> = first
        .iter()
        .map(|c| c.finish(Outcome::Succeeded, at(2), at(2)))
        .collect();
    s.finish_batch(&batch).await.unwrap();
    assert_eq!(heard.since_last().await, 1, "both keys' next ones are due");

    let second = conformance::claim(&s, 3, 10).await.claimed;
    assert_eq!(second.len(), 2);
    for c in &second {
        conformance::finish(&s, c, Outcome::Succeeded, &[], 4).await.unwrap();
    }
    assert_eq!(heard.since_last().await, 0, "nothing left queued to hand on to");
}
