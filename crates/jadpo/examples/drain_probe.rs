// Scratch: drains N no-op deliveries through the public API (not committed).
use jadpo::store::Store;
use std::sync::Arc;
use std::time::Instant;

const APP: &str = r#"
event Ping { n: int }
connection sink { base_url: "http://127.0.0.1:9" }
action noop(n: int) uses sink
subscriber s { on: Ping  run: noop(event.n) }
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(50_000);
    let c: usize = std::env::var("C").ok().and_then(|v| v.parse().ok()).unwrap_or(24);
    let url = std::env::var("STORE").unwrap_or_else(|_| format!("sqlite:/tmp/probe-{}.db", std::process::id()));
    if url.starts_with("postgres") {
        let schema = format!("probe_{}", std::process::id());
        std::process::Command::new("psql").arg(&url).arg("-qc").arg(format!("create schema {schema}")).status()?;
        let opts = jadpo::store::postgres::Options { schema: Some(schema), ..Default::default() };
        let store = jadpo::store::postgres::PgStore::connect(&url, opts).await?;
        run(store, n, c).await
    } else {
        let store = jadpo::store::sqlite::SqliteStore::open(&url).await?;
        run(store, n, c).await
    }
}

async fn run<S: jadpo::store::ScheduleStore>(store: S, n: usize, c: usize) -> Result<(), Box<dyn std::error::Error>> {
    let jadpo = jadpo::builder()
        .app_source("app.jadpo", APP)?
        .worker(jadpo::runtime::WorkerConfig { concurrency: c, ..Default::default() })
        .action("noop", Arc::new(|_a, _c| Box::pin(async { Ok(()) })))
        .build(store)
        .await?;
    let t = Instant::now();
    for i in (0..n).step_by(1000) {
        let evs: Vec<(&str, serde_json::Value)> = (i..(i + 1000).min(n)).map(|j| ("Ping", serde_json::json!({"n": j}))).collect();
        jadpo.emit_many(&evs).await?;
    }
    let emit = t.elapsed();
    let t = Instant::now();
    let running = jadpo.start();
    loop {
        let counts = jadpo.store().counts().await?;
        let done = counts.get(&jadpo::core::DeliveryState::Succeeded).copied().unwrap_or(0);
        if done as usize >= n { break; }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let drain = t.elapsed();
    running.stop().await;
    println!("emit {:.0}/s drain {:.0}/s ({} in {:?})", n as f64 / emit.as_secs_f64(), n as f64 / drain.as_secs_f64(), n, drain);
    Ok(())
}
