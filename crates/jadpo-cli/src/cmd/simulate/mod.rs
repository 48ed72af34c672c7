//! `jadpo simulate APP --scenario FILE [--seed N] [--json] [--compare APP2]`
//! (docs/simulate.md): the app's real subscribers, actions, connections,
//! budgets, breakers, limits and schedules against a scripted day, in
//! virtual time.
//!
//! The simulation (`jadpo-sim`) runs the real rules in the real in-memory
//! store with the worker's own step around each run; the app's actions run
//! in the real interpreter ([`runner`], [`lane`]; on two threads where
//! there are two cores, [`helper`]), their sends answered by the
//! scenario's timelines ([`provider`]). Nothing is sent anywhere and no
//! real time passes: a week of traffic takes seconds.
//!
//! Exit codes: 0 the report printed; 1 the app file or the scenario has
//! errors (all printed); 2 a file cannot be read, or the simulation broke
//! one of Jadpo's own invariants (a bug: the message says how to report
//! it).

mod events;
mod helper;
mod lane;
mod provider;
mod report;
mod runner;
mod scenario;
mod timeline;

use jadpo_core::{BreakerPolicy, Timestamp};
use jadpo_lang::App;
use jadpo_sim::{Crash, Faults, Sim, SimConfig, SimSchedule, SimSubscriber};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The app file.
    #[arg(default_value = "app.jadpo")]
    app: PathBuf,
    /// The scenario: how events arrive and how each connection behaves over
    /// time (docs/simulate.md).
    #[arg(long)]
    scenario: PathBuf,
    /// The random seed: the same seed, scenario and app give the same report,
    /// byte for byte. Default: the scenario's `seed`, or 1.
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// A second app file (say, with another `retry:`) run on the same
    /// scenario and seed, printed beside the first.
    #[arg(long, value_name = "APP")]
    compare: Option<PathBuf>,
}

/// The longest a simulation runs when the scenario sets no `until`: a
/// delivery still unfinished then is reported as such.
const DEFAULT_HORIZON: Duration = Duration::from_secs(60 * 86_400);

pub(crate) fn run(args: Args) -> ExitCode {
    let Some(first) = load_app(&args.app) else {
        return ExitCode::from(exit_of_load(&args.app));
    };
    let second = match &args.compare {
        None => None,
        Some(path) => match load_app(path) {
            Some(app) => Some(app),
            None => return ExitCode::from(exit_of_load(path)),
        },
    };
    let scenario_file = args.scenario.display().to_string();
    let source = match std::fs::read_to_string(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error[scenario.unreadable]: cannot read `{scenario_file}`: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = args.scenario.parent().unwrap_or(Path::new("."));
    let mut reports = Vec::new();
    for app in std::iter::once(&first).chain(second.as_ref()) {
        let scenario = match scenario::parse(&source, app, dir) {
            Ok(s) => s,
            Err(problems) => {
                eprint!("{}", render(&scenario_file, &source, &problems));
                return ExitCode::from(1);
            }
        };
        let seed = args.seed.or(scenario.seed).unwrap_or(1);
        match simulate(app.clone(), &scenario, seed, a_core_to_spare()) {
            Ok(report) => reports.push(report),
            Err(why) => {
                eprintln!(
                    "error[simulate.invariant_broken]: {why}\nThis is a bug in Jadpo, not in the app: please report it with the app file, the scenario and the seed."
                );
                return ExitCode::from(2);
            }
        }
    }
    print(&args, &reports);
    ExitCode::SUCCESS
}

fn print(args: &Args, reports: &[report::Report]) {
    let names: Vec<String> = std::iter::once(&args.app)
        .chain(args.compare.as_ref())
        .map(|p| p.display().to_string())
        .collect();
    if args.json {
        let value = match reports {
            [one] => one.json(),
            _ => serde_json::Value::Array(
                reports
                    .iter()
                    .zip(&names)
                    .map(|(r, n)| {
                        let mut v = r.json();
                        v["app"] = serde_json::Value::String(n.clone());
                        v
                    })
                    .collect(),
            ),
        };
        crate::output::print_json(&value);
        return;
    }
    for (r, n) in reports.iter().zip(&names) {
        if reports.len() > 1 {
            println!("== {n}");
        }
        print!("{}", r.text());
        if reports.len() > 1 {
            println!();
        }
    }
}

fn exit_of_load(path: &Path) -> u8 {
    if std::fs::metadata(path).is_ok() {
        1
    } else {
        2
    }
}

/// The checked app, or `None` with its errors printed.
fn load_app(path: &Path) -> Option<Arc<App>> {
    let file = path.display().to_string();
    let source = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error[app.unreadable]: cannot read `{file}`: {e}");
            return None;
        }
    };
    let checked = jadpo_lang::check(&file, &source);
    match checked.app {
        Some(app) => Some(Arc::new(app)),
        None => {
            eprint!("{}", checked.render(&source));
            None
        }
    }
}

fn render(file: &str, source: &str, problems: &[scenario::Problem]) -> String {
    let index = jadpo_lang::LineIndex::new(source);
    let mut text: Vec<String> = problems
        .iter()
        .map(|p| jadpo_lang::render_coded(file, &index, p.code, p.span, &p.message))
        .collect();
    let n = problems.len();
    text.push(format!("{file}: {n} error{}\n", if n == 1 { "" } else { "s" }));
    text.join("\n")
}

/// Whether this machine has more than one core, so a second thread can
/// share the runs.
fn a_core_to_spare() -> bool {
    std::env::var_os("JADPO_NOHELP").is_none() && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Runs `app` on `scenario` with `seed`; `helper`: whether runs may go
/// on a second thread (the report is the same either way).
fn simulate(app: Arc<App>, scenario: &scenario::Scenario, seed: u64, helper: bool) -> Result<report::Report, String> {
    let catalog = jadpo_runtime::Catalog::from_app(&app);
    let connections: Vec<String> = app.connections.keys().cloned().collect();
    let timelines = Arc::new(provider::Timelines::new(connections, &scenario.connections));
    let tally = Arc::new(provider::Tally::new(&timelines));
    let (emissions, plan) = events::emissions(scenario);
    let events = events::EventMaker::new(app.clone(), scenario.traffic.clone(), &emissions, plan);
    let runner = runner::Runner::new(app.clone(), timelines.clone(), tally.clone(), seed, events, helper)?;
    let subscribers = app
        .subscribers
        .values()
        .map(|s| SimSubscriber {
            name: s.name.clone(),
            budget: s.budget,
            connections: catalog
                .routes
                .get(&s.name)
                .map(|r| r.connections.clone())
                .unwrap_or_default(),
            skip_calls: 0,
            defect: 0,
            timeout: s.timeout,
        })
        .collect();
    let limits: BTreeMap<String, jadpo_core::limit::Limits> = app
        .connections
        .iter()
        .map(|(name, c)| (name.clone(), c.limits()))
        .filter(|(_, l)| !l.is_none())
        .collect();
    let longest_retry_after = scenario
        .connections
        .values()
        .flatten()
        .filter_map(|p| p.retry_after)
        .max()
        .unwrap_or_default();
    let cfg = SimConfig {
        seed,
        operator_retries: Vec::new(),
        subscribers,
        providers: BTreeMap::new(),
        emissions,
        workers: scenario.processes,
        slots: scenario.concurrency,
        policy: BreakerPolicy::DEFAULT,
        faults: Faults::NONE,
        tick: Duration::from_secs(1),
        horizon: scenario.until.unwrap_or(DEFAULT_HORIZON),
        check_every_step: false,
        limits,
        keyed: BTreeMap::new(),
        operator_skips: Vec::new(),
        skip_all_from: Timestamp::MAX,
        crashes: scenario
            .crashes
            .iter()
            .map(|c| Crash {
                at: Timestamp::EPOCH.plus(c.at),
                worker: c.process - 1,
                back_after: c.back_after,
            })
            .collect(),
        longest_retry_after,
        schedules: catalog
            .schedules
            .iter()
            .map(|s| SimSchedule {
                name: s.name.clone(),
                trigger: s.trigger.clone(),
                timeout: s.timeout,
            })
            .collect(),
        // With an `until`, schedules run to it; without, the run ends when
        // every delivery has finished.
        schedules_to_horizon: scenario.until.is_some(),
    };
    let sim = Sim::with_app(cfg, Box::new(runner)).run().map_err(|v| v.to_string())?;
    Ok(report::build(&sim, seed, tally.counted(&timelines)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked examples' app: payments recorded with `payments`, a
    /// receipt emailed with `mailer`.
    const APP: &str = include_str!("../../../../../examples/simulate/app.jadpo");

    /// 2,000 payments a minute for half an hour, the provider down one minute
    /// in four (refusing at once) and failing now and then when up:
    /// breakers that open many times, each time within a claimed batch's
    /// starts, so the rest of the batch is held at its start.
    const FLAPPING: &str = r#"
processes = 2
concurrency = 50

[[traffic]]
event = "PaymentReceived"
rate = "2000/min"
for = "30m"

[[connections.payments]]
from = "0s"
state = "up"
latency = "50ms..150ms"
fail = { "503" = 0.02, timeout = 0.01 }
"#;

    fn flapping() -> String {
        let mut scenario = FLAPPING.to_owned();
        for minute in (4..30).step_by(4) {
            scenario.push_str(&format!(
                "\n[[connections.payments]]\nfrom = \"{minute}m\"\nstate = \"down\"\nanswer = \"503\"\nlatency = \"1ms..3ms\"\n\n[[connections.payments]]\nfrom = \"{}m\"\nstate = \"up\"\nlatency = \"50ms..150ms\"\nfail = {{ \"503\" = 0.02, timeout = 0.01 }}\n",
                minute + 1
            ));
        }
        scenario
    }

    fn run(helper: bool) -> serde_json::Value {
        let checked = jadpo_lang::check("app.jadpo", APP);
        let app = Arc::new(checked.app.expect("the app checks"));
        let scenario = scenario::parse(&flapping(), &app, Path::new(".")).expect("the scenario parses");
        simulate(app, &scenario, 7, helper)
            .expect("the simulation holds")
            .json()
    }

    /// Runs made on the helper's thread, ahead of their starts, are the
    /// runs the simulation's own thread would make at them.
    #[test]
    fn the_helper_thread_changes_nothing_in_the_report() {
        assert_eq!(run(true), run(false));
    }

    /// A run made ahead and thrown away (its start found the breaker open)
    /// sent nothing: a provider's sends are exactly the attempts that ran,
    /// as `record_payment_webhook`'s action calls `payments` once a run.
    #[test]
    fn only_the_runs_used_count_their_sends() {
        let report = run(true);
        let named = |list: &str, name: &str| {
            report[list]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == name)
                .cloned()
                .unwrap()
        };
        let sends: u64 = named("connections", "payments")["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["sends"].as_u64().unwrap())
            .sum();
        let subscriber = named("subscribers", "record_payment_webhook");
        let attempts: u64 = subscriber["attempts"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(n, count)| n.parse::<u64>().unwrap() * count.as_u64().unwrap())
            .sum();
        assert!(subscriber["held"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(sends, attempts, "{report}");
    }
}
