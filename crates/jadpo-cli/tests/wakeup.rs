//! Two `jadpo serve` processes on one PostgreSQL store, their idle workers
//! polling only every ten minutes: an event emitted through one process (or
//! by `jadpo emit`, a third) starts in the other within seconds, because
//! the emit's notification wakes it. Fails, rather than skips, under
//! `CI=true` when PostgreSQL is unreachable.

#[path = "support/serve.rs"]
mod serve;

use jadpo_store::postgres::testing::TestSchema;
use serve::Pair;
use std::process::Command;
use std::time::{Duration, Instant};

/// Far longer than the test: only a wake-up starts anything in time.
const POLL: &str = "10m";
/// Emit to start, at most: ten minutes without the wake-up. Generous, so
/// a loaded machine is only slower; still a tenth of the poll.
const WITHIN: Duration = Duration::from_secs(60);

#[test]
fn an_emit_through_one_serve_process_starts_at_once_in_the_other() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(schema) = rt.block_on(TestSchema::create()) else {
        return;
    };
    // A's only worker hangs from the start: whatever starts is B's doing.
    let mut pair = Pair::start(&rt, &schema, "5m", 4, POLL);
    let (provider, a, url) = (&pair.provider, &pair.a, &pair.url);
    let b = &mut pair.b;

    let mut sent = 0;
    let mut deliver = |how: &dyn Fn(&str), id: &str| {
        // B's claim loop has finished its last look and gone idle (its last
        // word is `worker.idle`, not `worker.woken`), so this start is a
        // wake-up's doing, not a look already under way.
        b.wait_for("B's claim loop to go idle", |b| {
            b.last_of(&["worker.idle", "worker.woken"]).as_deref() == Some("worker.idle")
        });
        let started = Instant::now();
        how(id);
        sent += 1;
        let path = format!("/ping/{id}");
        while !provider.requests().iter().any(|r| r.path == path) {
            assert!(
                started.elapsed() < WITHIN,
                "{id}: not started within {WITHIN:?}; B's log:\n{}",
                b.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        eprintln!("{id}: emit to start {:?}", started.elapsed());
    };
    let through_a = |id: &str| {
        let body = format!(r#"{{"id":"{id}"}}"#);
        assert_eq!(a.http("POST", "/events/Ping", Some(&body)).0, 202);
    };
    for i in 0..3 {
        deliver(&through_a, &format!("api{i}"));
    }
    let by_cli = |id: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_jadpo"))
            .current_dir(pair.dir.path())
            .env_remove("JADPO_STORE")
            .args(["emit", "Ping", &format!(r#"{{"id":"{id}"}}"#), "--store", url])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    deliver(&by_cli, "cli");
    assert_eq!(provider.calls(), sent);

    let ((status_a, logs_a), (status_b, logs_b)) = pair.stop();
    assert!(status_a.success() && status_b.success(), "{logs_a}\n{logs_b}");
    let succeeded = |logs: &str| {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == "delivery.succeeded")
            .count() as u64
    };
    assert_eq!(succeeded(&logs_b), sent, "B ran every ping:\n{logs_b}");
    assert_eq!(succeeded(&logs_a), 0, "A's only worker was busy throughout:\n{logs_a}");
}
