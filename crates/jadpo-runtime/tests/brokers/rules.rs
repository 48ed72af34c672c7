//! The engine's rules on a broker connection, as on an HTTP one: `rate:`
//! and `concurrency:` hold its publishes, and a capability it fills is
//! held behind its breaker. Redis is the broker here; the rules sit above
//! the driver, so one broker shows them for all.

use super::redis_stream::{entries, shared, stream};
use super::*;
use jadpo_core::limit::WaitFor;
use jadpo_core::{BreakerState, DeliveryState};
use jadpo_store::{DeliveryFilter, Store};
use jadpo_testing::proxy::{Mode, Proxy};
use jadpo_testing::wait::until_async as eventually;

/// An app whose `announce_payment` publishes each `Paid` to `stream`
/// through `bus`, a Redis connection with `settings`.
fn app(stream: &str, settings: &str) -> String {
    format!(
        r#"
event Paid {{ id: string  amount: int }}
connection bus {{ driver: redis  url: env("BUS_URL")  {settings} }}
action announce(id: string) {{
    call bus.publish("{stream}", body: event, idempotency_key: id)
}}
subscriber announce_payment {{ on: Paid  run: announce(event.id) }}
"#
    )
}

fn bus_url(url: String) -> impl Fn(&str) -> Option<String> + Clone {
    move |k: &str| (k == "BUS_URL").then(|| url.clone())
}

/// Deliveries waiting for `what` of `bus`, none of them tried yet.
async fn waiting<S: Store>(store: &S, what: WaitFor) -> usize {
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    all.iter()
        .filter(|d| {
            d.state == DeliveryState::Due
                && d.attempts == 0
                && d.waiting
                    .as_ref()
                    .is_some_and(|w| w.connection == "bus" && w.reason == what)
        })
        .count()
}

/// The idempotency keys on `key`'s entries, each once.
async fn keys(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> std::collections::BTreeSet<String> {
    let got = entries(conn, key).await;
    let keys: std::collections::BTreeSet<String> = got
        .iter()
        .filter_map(|f| f.iter().find(|(n, _)| n == "idempotency-key").map(|(_, v)| v.clone()))
        .collect();
    assert_eq!(keys.len(), got.len(), "no key twice: {got:?}");
    keys
}

/// `rate: 50/s` (a burst of 5): with the clock still, five publish and the
/// other seven wait for a token without an attempt; each tenth of a second
/// of the clock lets five more through.
#[tokio::test]
async fn rate_spaces_a_broker_connections_publishes() {
    let Some(mut conn) = shared().await else { return };
    let key = stream(&mut conn).await;
    let (store, clock, engine) = engine(&app(&key, "rate: 50/s"), bus_url(SHARED_REDIS.into()));
    let running = engine.start();
    engine.emit(&paid(12)).await.unwrap();
    eventually("five published, seven waiting for a token", || async {
        count(&*store, DeliveryState::Succeeded).await == 5 && waiting(&*store, WaitFor::Token).await == 7
    })
    .await;
    assert_eq!(keys(&mut conn, &key).await.len(), 5);
    clock.advance(Duration::from_millis(100));
    eventually("ten published, two waiting", || async {
        count(&*store, DeliveryState::Succeeded).await == 10 && waiting(&*store, WaitFor::Token).await == 2
    })
    .await;
    clock.advance(Duration::from_millis(100));
    eventually("all twelve published", || async {
        count(&*store, DeliveryState::Succeeded).await == 12
    })
    .await;
    running.stop().await;
    assert_eq!(keys(&mut conn, &key).await.len(), 12);
    let _: () = redis::AsyncCommands::del(&mut conn, &key).await.unwrap();
}

/// `concurrency: 1`: with Redis's answers stalled behind a proxy, one
/// publish is under way and the three others wait for its slot without an
/// attempt; once answers flow, every one publishes, each once.
#[tokio::test]
async fn concurrency_caps_a_broker_connections_publishes() {
    let Some(mut conn) = shared().await else { return };
    let key = stream(&mut conn).await;
    let proxy = Proxy::start("127.0.0.1:6379").await;
    let url = format!("redis://127.0.0.1:{}", proxy.port());
    let (store, clock, engine) = engine(&app(&key, "concurrency: 1  timeout: 30s"), bus_url(url));
    let running = engine.start();
    // The link is made while answers flow, as a running process's is.
    engine.emit(&paid(1)).await.unwrap();
    eventually("the first published", || async {
        count(&*store, DeliveryState::Succeeded).await == 1
    })
    .await;
    proxy.set(Mode::Stalled);
    let mut rest = paid(4);
    rest.iter_mut()
        .enumerate()
        .for_each(|(i, e)| e.payload = format!(r#"{{"id":"q{i}","amount":{i}}}"#));
    engine.emit(&rest).await.unwrap();
    eventually("one under way, three waiting for its slot", || async {
        count(&*store, DeliveryState::Running).await == 1 && waiting(&*store, WaitFor::Slot).await == 3
    })
    .await;
    proxy.set(Mode::Up);
    for _ in 0..3000 {
        if count(&*store, DeliveryState::Succeeded).await == 5 {
            break;
        }
        assert!(count(&*store, DeliveryState::Running).await <= 1, "one slot");
        clock.advance(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(count(&*store, DeliveryState::Succeeded).await, 5);
    running.stop().await;
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    assert!(all.iter().all(|d| d.attempts == 1), "waiting spent no attempt");
    assert_eq!(keys(&mut conn, &key).await.len(), 5);
    let _: () = redis::AsyncCommands::del(&mut conn, &key).await.unwrap();
}

/// A capability the broker connection fills: the subscriber that runs it
/// is routed to `bus`, publishes through it, and is held by its breaker
/// while Redis is cut off; once Redis is back, every one publishes.
#[tokio::test]
async fn a_capability_a_broker_fills_is_held_by_its_breaker() {
    let Some(mut conn) = shared().await else { return };
    let key = stream(&mut conn).await;
    let proxy = Proxy::start("127.0.0.1:6379").await;
    let url = format!("redis://127.0.0.1:{}", proxy.port());
    let source = format!(
        r#"
event Paid {{ id: string  amount: int }}
capability announce(id: string)
connection bus {{
    driver: redis  url: env("BUS_URL")  timeout: 2s
    fills announce {{ call bus.publish("{key}", body: {{ id: id }}, idempotency_key: id) }}
}}
subscriber announce_payment {{ on: Paid  run: announce(event.id) }}
"#
    );
    let (store, clock, engine) = engine(&source, bus_url(url));
    assert_eq!(
        engine.catalog().routes.get("announce_payment").unwrap().connections,
        ["bus"]
    );
    let running = engine.start();
    engine.emit(&paid(1)).await.unwrap();
    eventually("the first published", || async {
        count(&*store, DeliveryState::Succeeded).await == 1
    })
    .await;
    proxy.cut();
    let mut rest = paid(21);
    rest.remove(0);
    engine.emit(&rest).await.unwrap();
    eventually("bus's breaker open, the other 20 held or waiting", || async {
        breaker(&*store)
            .await
            .is_some_and(|b| b.breaker.state == BreakerState::Open)
            && count(&*store, DeliveryState::Held).await + count(&*store, DeliveryState::Due).await == 20
    })
    .await;
    let held = store
        .list(&DeliveryFilter {
            state: Some(DeliveryState::Held),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!held.is_empty());
    assert!(held.iter().all(|d| d.held.as_ref().unwrap().connection == "bus"));
    proxy.set(Mode::Up);
    clock.advance(Duration::from_secs(61));
    for i in 0..3000 {
        if count(&*store, DeliveryState::Succeeded).await == 21 {
            break;
        }
        if i % 50 == 49 {
            clock.advance(Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(count(&*store, DeliveryState::Succeeded).await, 21);
    running.stop().await;
    let want: std::collections::BTreeSet<String> = (0..21).map(|i| format!("p{i}")).collect();
    assert_eq!(keys(&mut conn, &key).await, want);
    let _: () = redis::AsyncCommands::del(&mut conn, &key).await.unwrap();
}
