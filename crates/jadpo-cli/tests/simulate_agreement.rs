//! `jadpo simulate` agrees with the real engine (docs/simulate.md,
//! "How far to trust it"). One scenario file is run twice: through
//! `jadpo simulate`, and played in real time against `jadpo dev
//! --time-scale 60` on a SQLite file, its events posted to the API at the
//! scenario's times and a real local HTTP provider switched from phase to
//! phase of the scenario's timeline. Both must end with the same counts of
//! delivered, failed (by code) and parked deliveries; the calls in each
//! phase agree within the tolerance docs/simulate.md states.

mod common;
#[path = "support/process.rs"]
mod process;

use common::Folder;
use jadpo_runtime::provider::{Behaviour, TestProvider};
use jadpo_testing::process::Logged;
use process::{jadpo, post, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SCALE: u32 = 60;

const APP: &str = r#"
event Paid { id: string }
connection pay { base_url: env("PAY_URL")  timeout: 2s }
action charge(id: string) { call pay.post("/charge/{id}", body: event) }
subscriber charge { on: Paid  run: charge(event.id) }
"#;

/// Each arrival sits well inside a phase, so what the phase answers does
/// not depend on a few virtual seconds of scheduling either way.
const SCENARIO: &str = r#"
processes = 1
concurrency = 16

[[traffic]]           # while up: delivered
event = "Paid"
count = 40
at = "30s"

[[traffic]]           # while every call gets a 400: failed for good
event = "Paid"
count = 20
at = "90s"

[[traffic]]           # while down with 503: retried, then held by the breaker
event = "Paid"
rate = "60/min"
from = "195s"
for = "90s"

[[traffic]]
event = "Paid"
count = 40
at = "240s"

[[traffic]]           # while calls time out: an outside call may have happened, parked
event = "Paid"
count = 3
at = "510s"

[[connections.pay]]
from = "0s"
state = "up"
latency = "1ms..5ms"

[[connections.pay]]
from = "60s"
state = "down"
answer = "400"

[[connections.pay]]
from = "120s"
state = "up"
latency = "1ms..5ms"

[[connections.pay]]
from = "180s"
state = "down"
answer = "503"

[[connections.pay]]
from = "300s"
state = "up"
latency = "1ms..5ms"

[[connections.pay]]
from = "480s"
state = "down"
answer = "timeout"

[[connections.pay]]
from = "540s"
state = "up"
latency = "1ms..5ms"
"#;

/// One step of the scenario played in real time.
#[derive(Debug)]
enum Step {
    /// The provider starts answering so: phase `usize` of the timeline.
    Phase(usize, Behaviour),
    /// A minute into phase `usize`.
    MinuteInto(usize),
    /// `n` events arrive.
    Emit(u64),
}

fn seconds(text: &str) -> f64 {
    let (n, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic()).unwrap());
    let n: f64 = n.parse().unwrap();
    n * match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        other => panic!("a unit the player does not know: {other}"),
    }
}

/// The scenario's traffic and timeline as steps at virtual seconds, read
/// from the same TOML `jadpo simulate` reads.
fn steps(scenario: &str) -> Vec<(f64, Step)> {
    let doc: toml::Table = scenario.parse().unwrap();
    let mut steps = Vec::new();
    for t in doc["traffic"].as_array().unwrap() {
        if let Some(count) = t.get("count") {
            steps.push((
                seconds(t["at"].as_str().unwrap()),
                Step::Emit(count.as_integer().unwrap() as u64),
            ));
        } else {
            let per_minute: f64 = t["rate"]
                .as_str()
                .unwrap()
                .strip_suffix("/min")
                .unwrap()
                .parse()
                .unwrap();
            let (from, length) = (
                seconds(t["from"].as_str().unwrap()),
                seconds(t["for"].as_str().unwrap()),
            );
            // One arrival a second, as the simulation makes them at 60/min.
            assert_eq!(per_minute, 60.0, "the player plays one event a second");
            for s in 0..length as u64 {
                steps.push((from + s as f64, Step::Emit(1)));
            }
        }
    }
    for (i, phase) in doc["connections"]["pay"].as_array().unwrap().iter().enumerate() {
        let behaviour = match (
            phase["state"].as_str().unwrap(),
            phase.get("answer").and_then(|a| a.as_str()),
        ) {
            ("up", _) => Behaviour::Up,
            ("down", Some("503")) => Behaviour::Down,
            ("down", Some("timeout")) => Behaviour::Slow(Duration::from_secs(30)),
            ("down", Some(status)) => Behaviour::Status(status.parse().unwrap()),
            other => panic!("a phase the player does not play: {other:?}"),
        };
        let from = seconds(phase["from"].as_str().unwrap());
        steps.push((from, Step::Phase(i, behaviour)));
        steps.push((from + 60.0, Step::MinuteInto(i)));
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    steps
}

/// What one run ended with: deliveries by final state and failure code, and
/// the provider's calls in each phase and in the first minute of each.
#[derive(Debug, PartialEq)]
struct Ends {
    outcomes: BTreeMap<String, u64>,
    sends: Vec<u64>,
    sends_first_minute: Vec<u64>,
}

fn simulated(f: &Folder) -> Ends {
    let run = f.run(&["simulate", "app.jadpo", "--scenario", "scenario.toml", "--json"]);
    let report = run.expect(0, None).json();
    let sub = &report["subscribers"][0];
    assert_eq!(sub["unfinished"], 0, "{report:#}");
    let mut outcomes = BTreeMap::new();
    outcomes.insert("succeeded".to_owned(), sub["delivered"].as_u64().unwrap());
    for state in ["failed", "parked"] {
        for (code, n) in sub[state].as_object().unwrap() {
            outcomes.insert(format!("{state} {code}"), n.as_u64().unwrap());
        }
    }
    let phases = report["connections"][0]["phases"].as_array().unwrap();
    let of = |key: &str| phases.iter().map(|p| p[key].as_u64().unwrap()).collect();
    Ends {
        outcomes,
        sends: of("sends"),
        sends_first_minute: of("sends_first_minute"),
    }
}

fn played(f: &Folder, steps: &[(f64, Step)]) -> Ends {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pay = rt.block_on(TestProvider::start());
    let store = f.store_url();
    let mut dev = Logged::spawn(jadpo(f.path()).env("PAY_URL", pay.url()).args([
        "dev",
        "app.jadpo",
        "--store",
        &store,
        "--port",
        "0",
        "--workers",
        "16",
        "--time-scale",
        &SCALE.to_string(),
    ]));
    let port = dev.port("api.listening");
    let phases = steps.iter().filter(|(_, s)| matches!(s, Step::Phase(..))).count();
    let (mut at_phase, mut at_minute) = (vec![0; phases + 1], vec![0; phases]);
    let mut emitted = 0u64;
    let start = Instant::now();
    for (at, step) in steps {
        let when = start + Duration::from_secs_f64(at / f64::from(SCALE));
        std::thread::sleep(when.saturating_duration_since(Instant::now()));
        match step {
            Step::Phase(i, behaviour) => {
                at_phase[*i] = pay.calls();
                pay.set(behaviour.clone());
            }
            Step::MinuteInto(i) => at_minute[*i] = pay.calls(),
            Step::Emit(n) => {
                for _ in 0..*n {
                    let body = format!(r#"{{"id":"id-{emitted}"}}"#);
                    assert_eq!(post(port, "/events/Paid", &body), 202, "{}", dev.text());
                    emitted += 1;
                }
            }
        }
    }
    let deliveries = || -> Vec<Value> {
        let run = f.run(&["deliveries", "--store", &store, "--limit", "10000", "--json"]);
        run.expect(0, None).json().as_array().unwrap().clone()
    };
    wait_until("every delivery finished", || {
        let all = deliveries();
        all.len() as u64 == emitted && all.iter().all(|d| d["finished_at"].is_string())
    });
    at_phase[phases] = pay.calls();
    let (status, logs) = dev.terminate();
    assert!(status.success(), "{logs}");
    let mut outcomes = BTreeMap::new();
    for d in deliveries() {
        let state = d["state"].as_str().unwrap().to_owned();
        let key = match d["last_failure_code"].as_str() {
            Some(code) if state != "succeeded" => format!("{state} {code}"),
            _ => state,
        };
        *outcomes.entry(key).or_default() += 1;
    }
    Ends {
        outcomes,
        sends: at_phase.windows(2).map(|w| w[1] - w[0]).collect(),
        sends_first_minute: (0..phases).map(|i| at_minute[i] - at_phase[i]).collect(),
    }
}

#[test]
fn simulate_and_dev_agree_on_the_same_scenario() {
    let f = Folder::empty();
    f.write("app.jadpo", APP);
    f.write("scenario.toml", SCENARIO);
    let simulated = simulated(&f);
    let played = played(&f, &steps(SCENARIO));
    eprintln!("simulated {simulated:?}\nplayed    {played:?}");
    assert_eq!(simulated.outcomes, played.outcomes);
    assert_eq!(
        simulated.outcomes,
        BTreeMap::from([
            ("succeeded".to_owned(), 170),
            ("failed http.400".to_owned(), 20),
            ("parked http.timeout".to_owned(), 3),
        ])
    );
    let phases = SCENARIO.matches("[[connections.pay]]").count();
    assert_eq!((simulated.sends.len(), played.sends.len()), (phases, phases));
    for i in 0..phases {
        assert!(
            within_tolerance(simulated.sends[i], played.sends[i]),
            "phase {i}: {} sends simulated, {} played",
            simulated.sends[i],
            played.sends[i]
        );
    }
    // The report counts the first minute of a phase that follows a `down`
    // one: how many calls the recovery let through at once.
    for i in [2, 4, 6] {
        assert!(
            within_tolerance(simulated.sends_first_minute[i], played.sends_first_minute[i]),
            "phase {i}'s first minute: {} sends simulated, {} played",
            simulated.sends_first_minute[i],
            played.sends_first_minute[i]
        );
    }
}

/// The tolerance docs/simulate.md states for calls: 3 calls or a tenth,
/// whichever is more. A real process's timing moves a call across a
/// phase's edge, or lets one more through before the breaker opens.
fn within_tolerance(simulated: u64, played: u64) -> bool {
    simulated.abs_diff(played) <= 3.max(simulated / 10)
}
