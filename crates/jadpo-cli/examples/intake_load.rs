//! HTTP intake load for docs/scaling.md: `cargo run --release --example
//! intake_load -- URL TOKEN CONCURRENCY SECONDS` POSTs `{"id": "..."}` to
//! URL (such as http://127.0.0.1:7420/events/Paid) from CONCURRENCY
//! connections at once, each sending its next request as soon as the last
//! was answered, for SECONDS; then prints requests a second and the
//! statuses seen, as one JSON line.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, token, concurrency, seconds] = &args[..] else {
        eprintln!("usage: intake_load URL TOKEN CONCURRENCY SECONDS");
        std::process::exit(2);
    };
    let concurrency: usize = concurrency.parse().expect("CONCURRENCY is a number");
    let seconds: u64 = seconds.parse().expect("SECONDS is a number");
    let client = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            let (client, url, token, stop) = (client.clone(), url.clone(), token.clone(), stop.clone());
            tokio::spawn(async move {
                let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let body = format!(r#"{{"id":"c{c}-{i}"}}"#);
                    let status = match client
                        .post(&url)
                        .bearer_auth(&token)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                    {
                        Ok(answer) => answer.status().as_u16(),
                        Err(_) => 0,
                    };
                    *statuses.entry(status).or_default() += 1;
                }
                statuses
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all: BTreeMap<u16, u64> = BTreeMap::new();
    for t in tasks {
        for (status, n) in t.await.expect("a load task") {
            *all.entry(status).or_default() += n;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total: u64 = all.values().sum();
    println!(
        "{{\"requests_per_s\": {:.1}, \"requests\": {total}, \"seconds\": {elapsed:.2}, \"statuses\": {:?}}}",
        total as f64 / elapsed,
        all.iter().map(|(s, n)| format!("{s}:{n}")).collect::<Vec<_>>()
    );
}
