//! Order per key across three `jadpo serve` processes on one PostgreSQL
//! store, through the real binary, in real time: 20 customers' payments,
//! 15 each, to a subscriber with `key: event.customer` and `order: fifo`,
//! emitted over the API of two processes while a provider answers `503`
//! to the first call of one or two payments of each customer, and the third
//! process SIGKILLed with its calls in flight. The provider records every call's arrival. Per customer: the
//! calls arrive in emit order (a retry or a lost run's second try before
//! the next payment, never after it), none while the customer's previous
//! call is still in flight, and every payment succeeds.

#[path = "support/serve.rs"]
mod serve;

use jadpo_runtime::provider::{Behaviour, Recorded, TestProvider};
use jadpo_store::postgres::testing::TestSchema;
use jadpo_store::{DeliveryFilter, Store};
use serve::Serve;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const APP: &str = r#"
event Paid { id: string  customer: string  seq: int }
connection pay { base_url: "PAY_URL" }
action charge(id: string) { call pay.post("/charge/{id}", body: event, idempotency_key: id) }
subscriber charge { on: Paid  run: charge(event.id)  timeout: 2s  key: event.customer  order: fifo }
"#;

const CUSTOMERS: usize = 20;
const EACH: usize = 15;
const N: usize = CUSTOMERS * EACH;
/// A successful call takes this long: the provider answers after it.
const CALL: Duration = Duration::from_millis(20);
/// What one customer can wait, in the worst case, is the sum of its
/// payments' waits, since they go one at a time: a `503` on a first
/// attempt waits at most 30 s (the delivery backoff's first ceiling), at
/// most two per customer, and a run lost in the kill waits for its lease,
/// its limit (2 s) and the 30 s margin. So 92 s, and the calls; this leaves
/// as much again for a busy machine. The 503s are placed on payments, not
/// on call numbers, so that no customer can draw more of them than this.
const ALL_DONE_WITHIN: Duration = Duration::from_secs(180);

/// The payments of customer `c` whose first call is answered `503`: one for
/// every customer, a second for every other one.
fn failing(c: usize) -> Vec<usize> {
    let first = (c * 4 + 3) % EACH;
    if c.is_multiple_of(2) {
        vec![first, (first + 6) % EACH]
    } else {
        vec![first]
    }
}

/// Each call's customer and place in that customer's order, from its body
/// (the event).
fn of(r: &Recorded) -> (String, i64) {
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("a JSON body");
    let customer = v["customer"].as_str().expect("a customer").to_owned();
    (customer, v["seq"].as_i64().expect("a seq"))
}

#[test]
fn three_processes_keep_each_customers_order_through_503s_and_a_kill() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    let pay = rt.block_on(TestProvider::start());
    pay.set(Behaviour::Slow(CALL));
    for c in 0..CUSTOMERS {
        for seq in failing(c) {
            pay.script_path(&format!("/charge/c{c}-{seq}"), [Behaviour::Status(503)]);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.jadpo"), APP.replace("PAY_URL", &pay.url())).unwrap();
    let url = serve::url(&schema);
    let store = rt.block_on(schema.store(Default::default()));
    let mut processes: Vec<Serve> = (0..3)
        .map(|_| Serve::start(dir.path(), &url, &["--workers", "8"]))
        .collect();
    let ports: Vec<u16> = processes.iter().map(|p| p.port).collect();

    // Each customer's payments in turn, each accepted before the next is
    // sent: their emit order is their `seq`. Customers interleave, and the
    // two processes that stay up take turns emitting.
    let emitter = std::thread::spawn(move || {
        for seq in 0..EACH {
            for c in 0..CUSTOMERS {
                let body = format!(r#"{{"id":"c{c}-{seq}","customer":"c{c}","seq":{seq}}}"#);
                let port = ports[(seq + c) % 2];
                let (status, answer) = serve::http(port, "POST", "/events/Paid", Some(&body), Duration::from_secs(30));
                assert_eq!(status, 202, "{answer}");
            }
        }
    });
    // A third of the way, the third process is killed with its calls in
    // flight; its deliveries come back when their leases end.
    let start = Instant::now();
    while pay.calls() < (N / 3) as u64 {
        assert!(start.elapsed() < ALL_DONE_WITHIN, "only {} calls", pay.calls());
        std::thread::sleep(Duration::from_millis(5));
    }
    processes.remove(2).kill();
    emitter.join().expect("every payment was accepted");
    let succeeded = || {
        rt.block_on(store.list(&DeliveryFilter {
            state: Some(jadpo_core::DeliveryState::Succeeded),
            limit: Some(N),
            ..Default::default()
        }))
        .unwrap()
        .len()
    };
    while succeeded() < N {
        if start.elapsed() >= ALL_DONE_WITHIN {
            // What each unfinished delivery is, and what it waits for: the
            // state of the store a stuck key leaves, for its diagnosis.
            let all = rt.block_on(store.list(&DeliveryFilter {
                limit: Some(N),
                ..Default::default()
            }));
            let stuck: Vec<String> = all
                .unwrap()
                .into_iter()
                .filter(|d| d.state != jadpo_core::DeliveryState::Succeeded)
                .map(|d| {
                    let waits = rt.block_on(store.waits_for(d.id)).ok().flatten();
                    format!(
                        "{} {} key {:?} attempts {} due {} lease {:?} last {:?} waits for {waits:?}",
                        d.id,
                        d.state,
                        d.key.as_ref().map(|k| k.as_str().to_owned()),
                        d.attempts,
                        d.due_at,
                        d.lease.as_ref().map(|l| (l.owner.clone(), l.until)),
                        d.last_failure.as_ref().map(|f| f.code.clone()),
                    )
                })
                .collect();
            panic!(
                "{} of {N} payments succeeded after {ALL_DONE_WITHIN:?}; the others:\n{}",
                succeeded(),
                stuck.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in processes {
        assert!(p.terminate().0.success());
    }

    let mut by_customer: BTreeMap<String, Vec<(Instant, i64, u16)>> = BTreeMap::new();
    for r in pay.requests() {
        let (customer, seq) = of(&r);
        by_customer.entry(customer).or_default().push((r.at, seq, r.status));
    }
    assert_eq!(by_customer.len(), CUSTOMERS);
    let mut retried = 0;
    for (customer, calls) in &mut by_customer {
        calls.sort_by_key(|(at, _, _)| *at);
        let order: Vec<i64> = calls.iter().map(|(_, seq, _)| *seq).collect();
        assert!(
            order.windows(2).all(|w| w[0] <= w[1]),
            "{customer}'s calls arrived out of emit order: {order:?}"
        );
        let mut paid: Vec<i64> = calls.iter().filter(|c| c.2 == 200).map(|c| c.1).collect();
        paid.dedup();
        assert_eq!(
            paid,
            (0..EACH as i64).collect::<Vec<_>>(),
            "{customer}: each payment succeeded"
        );
        for w in calls.windows(2) {
            let (at, seq, status) = w[0];
            // A 200 is answered CALL after it arrived, a 503 at once.
            let answered = if status == 200 { at + CALL } else { at };
            assert!(
                w[1].0 >= answered,
                "{customer}: payment {} was called while payment {seq}'s call was in flight",
                w[1].1
            );
        }
        retried += calls.len() - EACH;
    }
    let failed: usize = (0..CUSTOMERS).map(|c| failing(c).len()).sum();
    assert!(
        retried >= failed,
        "each 503 put a payment's call twice: {retried} < {failed}"
    );
}
