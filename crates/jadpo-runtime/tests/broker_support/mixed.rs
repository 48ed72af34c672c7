//! An HTTP and a broker connection in one action, through an outage of the
//! broker.

use super::*;

/// An action that calls an HTTP provider, then publishes to Redis (a server
/// of the test's own). Redis is killed: the publishes fail after their
/// calls, the broker connection's breaker opens, and from then on its
/// deliveries are held before anything runs, so the provider sees no more
/// calls than the runs that started; the HTTP connection's breaker stays
/// closed, its provider having answered every call. Redis back, every
/// delivery runs once more, calls and publishes.
pub(crate) async fn mixed_outage() {
    use jadpo_runtime::provider::TestProvider;
    let Some(mut server) = BrokerServer::start(Kind::Redis) else {
        return;
    };
    Outage::Redis.prepare(&server.url()).await;
    let provider = TestProvider::start().await;
    let source = r#"
event Paid { id: string  amount: int }
connection payments { base_url: env("PAYMENTS_URL")  timeout: 2s }
connection bus { driver: redis  url: env("BUS_URL")  timeout: 2s }
action record(id: string) {
    call payments.post("/payments/{id}", body: event, idempotency_key: id)
    call bus.publish("payments", body: event, idempotency_key: id)
}
subscriber announce_payment { on: Paid  run: record(event.id) }
"#;
    let (bus_url, payments_url) = (server.url(), provider.url());
    let env = move |k: &str| match k {
        "BUS_URL" => Some(bus_url.clone()),
        "PAYMENTS_URL" => Some(payments_url.clone()),
        _ => None,
    };
    let (store, clock, engine) = engine(source, env);
    let running = engine.start();
    server.kill();
    engine.emit(&paid(40)).await.unwrap();
    eventually("the bus's breaker open, every delivery held or waiting", || async {
        breaker(&*store)
            .await
            .is_some_and(|b| b.breaker.state == BreakerState::Open)
            && count(&*store, DeliveryState::Held).await + count(&*store, DeliveryState::Due).await == 40
    })
    .await;
    let runs: u64 = store
        .list(&DeliveryFilter::default())
        .await
        .unwrap()
        .iter()
        .map(|d| u64::from(d.attempts))
        .sum();
    assert_eq!(
        provider.calls(),
        runs,
        "each run called once before it published; held ones called nothing"
    );
    let payments = store
        .breakers()
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.breaker.connection == "payments");
    assert!(
        payments.is_none_or(|b| b.breaker.state == BreakerState::Closed),
        "the provider answered: its breaker is closed"
    );

    server.start_again();
    clock.advance(Duration::from_secs(61));
    for i in 0..3000 {
        if count(&*store, DeliveryState::Succeeded).await == 40 {
            break;
        }
        if i % 50 == 49 {
            clock.advance(Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(count(&*store, DeliveryState::Succeeded).await, 40);
    running.stop().await;
    let all = store.list(&DeliveryFilter::default()).await.unwrap();
    let runs: u64 = all.iter().map(|d| u64::from(d.attempts)).sum();
    assert_eq!(provider.calls(), runs, "one call a run, no more");
    let keys: std::collections::BTreeSet<String> = Outage::Redis
        .received(&server.url())
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys.len(), 40, "every delivery published");
}
