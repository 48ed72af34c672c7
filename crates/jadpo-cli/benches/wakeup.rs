//! Emit-to-start latency between two `jadpo serve` processes on one
//! PostgreSQL store, with idle workers: from sending `POST /events/Ping` to
//! process A until the local provider receives the call that process B's
//! worker makes for it. A runs one delivery at a time and that one hangs
//! (its call goes to a port that never answers), so every ping is B's, and
//! B only learns of it through the emit's notification: both poll every ten
//! minutes. Between samples the bench pauses 50-150 ms so B is idle again.
//!
//! `cargo bench -p jadpo-cli --bench wakeup` (`JADPO_BENCH_SAMPLES=N`,
//! default 200). Needs PostgreSQL (`JADPO_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`); results in
//! docs/performance.md.

#[path = "../tests/support/serve.rs"]
mod serve;

use jadpo_store::postgres::testing::TestSchema;
use serve::Pair;
use std::time::{Duration, Instant};

fn main() {
    let samples: usize = std::env::var("JADPO_BENCH_SAMPLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        eprintln!("wakeup: skipped, PostgreSQL is unreachable");
        return;
    };
    let pair = Pair::start(&rt, &schema, "15m", 16, "10m");
    let (provider, a, b) = (&pair.provider, &pair.a, &pair.b);

    let mut latencies = Vec::with_capacity(samples);
    let mut emits = Vec::with_capacity(samples);
    for i in 0..samples {
        std::thread::sleep(Duration::from_millis(50 + (i as u64 * 37) % 100));
        let body = format!(r#"{{"id":"p{i}"}}"#);
        let sent = Instant::now();
        let (status, answer) = a.http("POST", "/events/Ping", Some(&body));
        emits.push(sent.elapsed());
        assert_eq!(status, 202, "{answer}");
        let path = format!("/ping/p{i}");
        let arrived = loop {
            if let Some(r) = provider.requests().into_iter().find(|r| r.path == path) {
                break r.at;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(10),
                "p{i} did not start within 10 s; B's log:\n{}",
                b.log_text()
            );
            std::thread::sleep(Duration::from_micros(500));
        };
        latencies.push(arrived.duration_since(sent));
    }
    let ((_, logs_a), (_, logs_b)) = pair.stop();
    let succeeded = |logs: &str| logs.matches("\"delivery.succeeded\"").count();
    assert_eq!(succeeded(&logs_b), samples, "B ran every ping");
    assert_eq!(succeeded(&logs_a), 0, "A's only worker was busy throughout");

    println!("wakeup: {samples} emits through process A, each started by process B (both polling every 10 min)");
    report("emit to start (POST sent to provider called)", &mut latencies);
    report("the emit's own request (POST sent to 202)", &mut emits);
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(at(0.50)),
        ms(at(0.90)),
        ms(at(0.99)),
        ms(samples[samples.len() - 1])
    );
}
