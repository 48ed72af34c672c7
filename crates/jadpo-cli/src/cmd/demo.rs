//! `jadpo demo`: a provider's outage, for real. A local provider goes down and
//! comes back; a few thousand payment events are delivered to it through
//! the real engine, a real SQLite file and real HTTP, once with the circuit
//! breaker and once without, on a clock running `--time-scale` times faster.

use jadpo::store::sqlite::{SqliteOptions, SqliteStore};
use jadpo_core::{BreakerPolicy, BreakerState, DeliveryState};
use jadpo_runtime::logfmt::{self, Format};
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_runtime::WorkerConfig;
use jadpo_store::{BreakerView, DeliveryFilter, Store};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Payment events to deliver.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub events: u32,
    /// How long the provider is down, in engine minutes.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=1_440))]
    pub down_minutes: u32,
    /// Engine time runs this many times faster than real time.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub time_scale: u32,
    /// Deliveries run at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub workers: u32,
    /// Where the demo writes its app file and stores.
    #[arg(long, default_value = ".jadpo-demo")]
    pub dir: PathBuf,
    /// Skip the second run without the breaker.
    #[arg(long)]
    pub no_compare: bool,
}

const APP: &str = r#"// Written by `jadpo demo`: payments recorded with a provider that goes down.
event PaymentReceived {
    payment_id: string
    amount_cents: int
}

connection payments {
    base_url: env("PAYMENTS_URL")
    timeout: 5s
}

action record_payment(payment_id: string) {
    call payments.post("/payments/{payment_id}", body: event, idempotency_key: payment_id)
}

// The default budget: 10 attempts within 24 hours.
subscriber record_payment_webhook {
    on: PaymentReceived
    run: record_payment(event.payment_id)
}
"#;

#[derive(Debug, Default)]
struct Summary {
    delivered: usize,
    failed: usize,
    parked: usize,
    calls: u64,
    calls_while_down: u64,
    alerts: bool,
    engine_time: Duration,
    real_time: Duration,
}

pub(crate) fn run(args: Args) -> ExitCode {
    // Breaker changes, failures and alerts; not every delivery.
    logfmt::init(Format::Human, "error,jadpo_runtime::log=warn");
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error[cli.runtime]: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async move {
        if let Err(e) = std::fs::create_dir_all(&args.dir).and_then(|_| std::fs::write(args.dir.join("app.jadpo"), APP))
        {
            eprintln!(
                "error[demo.dir_unwritable]: cannot write to {}: {e}",
                args.dir.display()
            );
            return ExitCode::from(2);
        }
        println!(
            "jadpo demo: {} payment events; the provider is down for the first {} minutes; time runs {}x faster.",
            args.events, args.down_minutes, args.time_scale
        );
        println!("app: {}\n", args.dir.join("app.jadpo").display());
        let with = match phase(&args, "with-breaker", BreakerPolicy::DEFAULT).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        let without = if args.no_compare {
            None
        } else {
            match phase(&args, "without-breaker", BreakerPolicy::NEVER_OPENS).await {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            }
        };
        print_summary(&args, &with, without.as_ref());
        if with.delivered + with.failed + with.parked == args.events as usize {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

async fn phase(args: &Args, name: &str, policy: BreakerPolicy) -> Result<Summary, String> {
    let db = args.dir.join(format!("{name}.db"));
    remove_db(&db);
    let provider = TestProvider::start().await;
    provider.set(Behaviour::Down);
    let jadpo = build_engine(args, name, &db, policy, provider.url()).await?;
    println!("== {name}: {}", db.display());
    // The store keeps the scaled clock, so `jadpo deliveries --store` on the
    // demo's file afterwards reads the same times the demo wrote.
    let clock = jadpo.clock().clone();
    let running = jadpo.start();
    let start_engine = clock.now();
    let start_real = Instant::now();
    emit_payments(&jadpo, args.events).await?;
    let down_until = start_engine.plus(Duration::from_secs(u64::from(args.down_minutes) * 60));
    let mut last_state = BreakerState::Closed;
    let mut last_held = 0usize;
    let mut summary = Summary::default();
    let mut next_report = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = clock.now();
        let at = minutes(now.since(start_engine));
        if provider.behaviour() == Behaviour::Down && now >= down_until {
            provider.set(Behaviour::Up);
            println!("  +{at}  provider is back up");
        }
        let counts = count_deliveries(jadpo.store()).await;
        if let Some(b) = payments_breaker(jadpo.store()).await {
            report_outage_edge(last_state, b.breaker.state, last_held, &at);
            last_state = b.breaker.state;
            summary.alerts |= b.breaker.alert_raised;
        }
        last_held = counts.held;
        if Instant::now() >= next_report {
            println!(
                "  +{at}  delivered {:>5}  held {:>5}  failed {:>4}  provider calls {:>6}",
                counts.delivered,
                counts.held,
                counts.failed,
                provider.calls()
            );
            next_report = Instant::now() + Duration::from_secs(2);
        }
        if counts.finished() == args.events as usize {
            summary = Summary {
                delivered: counts.delivered,
                failed: counts.failed,
                parked: counts.parked,
                calls: provider.calls(),
                calls_while_down: provider.calls_while(&Behaviour::Down),
                engine_time: now.since(start_engine),
                real_time: start_real.elapsed(),
                ..summary
            };
            break;
        }
    }
    running.stop().await;
    println!(
        "  done in {} of engine time ({:.1} s real)\n",
        minutes(summary.engine_time),
        summary.real_time.as_secs_f64()
    );
    Ok(summary)
}

async fn build_engine(
    args: &Args,
    name: &str,
    db: &Path,
    policy: BreakerPolicy,
    provider_url: String,
) -> Result<jadpo::Jadpo<SqliteStore>, String> {
    let store = SqliteStore::open_with(
        &format!("sqlite:{}", db.display()),
        SqliteOptions {
            policy,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| format!("error[store.unavailable]: {e}"))?;
    jadpo::builder()
        .app_source("app.jadpo", APP)
        .map_err(|e| e.to_string())?
        .env(move |k| (k == "PAYMENTS_URL").then(|| provider_url.clone()))
        .time_scale(args.time_scale)
        .worker(WorkerConfig {
            name: format!("demo-{name}"),
            concurrency: args.workers as usize,
            ..WorkerConfig::default()
        })
        .build(store)
        .await
        .map_err(|e| e.to_string())
}

async fn emit_payments(jadpo: &jadpo::Jadpo<SqliteStore>, events: u32) -> Result<(), String> {
    let payloads: Vec<(&str, serde_json::Value)> = (0..events)
        .map(|i| {
            (
                "PaymentReceived",
                serde_json::json!({"payment_id": format!("pay_{i:05}"), "amount_cents": 1000 + i}),
            )
        })
        .collect();
    for chunk in payloads.chunks(1_000) {
        jadpo.emit_many(chunk).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The deliveries in each state at one poll of the store.
struct Counts {
    delivered: usize,
    failed: usize,
    parked: usize,
    held: usize,
}

impl Counts {
    /// Held deliveries are still waiting; the other three states are final.
    fn finished(&self) -> usize {
        self.delivered + self.failed + self.parked
    }
}

async fn count_deliveries(store: &SqliteStore) -> Counts {
    // A poll that fails counts as none, so the demo waits for the next one.
    let count = |s: DeliveryState| async move {
        store
            .list(&DeliveryFilter {
                state: Some(s),
                ..Default::default()
            })
            .await
            .map(|l| l.len())
            .unwrap_or(0)
    };
    Counts {
        delivered: count(DeliveryState::Succeeded).await,
        failed: count(DeliveryState::Failed).await,
        parked: count(DeliveryState::Parked).await,
        held: count(DeliveryState::Held).await,
    }
}

async fn payments_breaker(store: &SqliteStore) -> Option<BreakerView> {
    store
        .breakers()
        .await
        .ok()
        .and_then(|b| b.into_iter().find(|b| b.breaker.connection == "payments"))
}

/// Probes and reopenings show in the log lines; here, only the outage's
/// start and end, with the held deliveries a close releases.
fn report_outage_edge(was: BreakerState, is: BreakerState, held_before: usize, at: &str) {
    if was == BreakerState::Closed && is != BreakerState::Closed {
        println!("  +{at}  breaker OPENED: deliveries are held, not sent");
    }
    if was != BreakerState::Closed && is == BreakerState::Closed {
        println!("  +{at}  breaker CLOSED: a probe was answered; {held_before} held deliveries released, due at once");
    }
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
}

fn print_summary(args: &Args, with: &Summary, without: Option<&Summary>) {
    println!(
        "Summary: {} deliveries, provider down for {} minutes",
        args.events, args.down_minutes
    );
    let col = |s: Option<&Summary>, f: &dyn Fn(&Summary) -> String| s.map_or("-".to_string(), f);
    let rows: Vec<(&str, String, String)> = vec![
        (
            "delivered",
            with.delivered.to_string(),
            col(without, &|s| s.delivered.to_string()),
        ),
        (
            "failed",
            with.failed.to_string(),
            col(without, &|s| s.failed.to_string()),
        ),
        (
            "parked",
            with.parked.to_string(),
            col(without, &|s| s.parked.to_string()),
        ),
        (
            "calls the provider received",
            with.calls.to_string(),
            col(without, &|s| s.calls.to_string()),
        ),
        (
            "  of them while it was down",
            with.calls_while_down.to_string(),
            col(without, &|s| s.calls_while_down.to_string()),
        ),
        (
            "connection_unavailable alert",
            with.alerts.to_string(),
            col(without, &|s| s.alerts.to_string()),
        ),
        (
            "all finished after",
            minutes(with.engine_time),
            col(without, &|s| minutes(s.engine_time)),
        ),
    ];
    println!("{:<32}{:>14}{:>18}", "", "with breaker", "without breaker");
    for (name, a, b) in rows {
        println!("{name:<32}{a:>14}{b:>18}");
    }
}
