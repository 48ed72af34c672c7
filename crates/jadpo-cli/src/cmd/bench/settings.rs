//! `jadpo bench`'s flags, and the settings they make once checked: every
//! bound, and the refusal (with its `bench.*` code) of a value outside it.

use crate::cmd::process;
use crate::output::CliError;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Where to bench: postgres://USER@HOST/DB (a fresh schema in it) or
    /// sqlite:PATH (a fresh file in a new folder beside PATH); default:
    /// $JADPO_STORE, else a SQLite file in a temporary folder.
    #[arg(long, env = "JADPO_STORE", hide_env_values = true, value_name = "URL")]
    pub store: Option<String>,
    /// Events to emit, one delivery each: 1 to 1000000.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub events: u64,
    /// Deliveries the engine runs at once (and requests the HTTP baseline
    /// sends at once): 1 to 10000.
    #[arg(long, value_name = "C", default_value_t = 24)]
    pub concurrency: u64,
    /// Emit every event first, then start the engine and time the drain
    /// (the default).
    #[arg(long, conflicts_with = "rate")]
    pub backlog: bool,
    /// Start the engine first, then emit at this rate (such as 500/s) and
    /// time until every delivery finished.
    #[arg(long, value_name = "R/s")]
    pub rate: Option<String>,
    /// With --rate: emit for this long (such as 30m; 10s to 24h) instead of
    /// --events, and report every --report-every: a soak.
    #[arg(long, value_name = "DURATION", requires = "rate", conflicts_with = "events")]
    pub duration: Option<String>,
    /// With --duration: how often to report (1s to 1h; default 1m).
    #[arg(long, value_name = "DURATION", requires = "duration")]
    pub report_every: Option<String>,
    /// Prune finished deliveries older than this while the bench runs, as
    /// `serve --retention` does (such as 5m; 1s to 3650d; 0 keeps them);
    /// default: 7d.
    #[arg(long, value_name = "DURATION")]
    pub retention: Option<String>,
    /// The subscriber calls a local HTTP sink over real HTTP; a plain HTTP
    /// loop is timed against the same sink to compare.
    #[arg(long)]
    pub http: bool,
    /// With --http: the sink answers after this long (such as 50ms; 0s to
    /// 10s; default 0s).
    #[arg(long, value_name = "DURATION", requires = "http")]
    pub latency: Option<String>,
    /// With --http: limit the sink's connection to this rate (such as
    /// 100/s), as `rate:` in an app file does, to see how closely the
    /// engine keeps to it and what the limit costs.
    #[arg(long, value_name = "R/s", requires = "http")]
    pub connection_rate: Option<String>,
    /// The subscriber publishes each delivery to a broker (amqp, nats,
    /// redis or mqtt) with its confirmation; a plain client loop publishing
    /// the same messages is timed against it.
    #[arg(long, value_name = "DRIVER", conflicts_with = "http")]
    pub driver: Option<String>,
    /// With --driver: the broker's URL; default: the machine's own
    /// (amqp://guest:guest@127.0.0.1:5672/%2f, nats://127.0.0.1:4222,
    /// redis://127.0.0.1:6379, mqtt://127.0.0.1:1883).
    #[arg(long, value_name = "URL", requires = "driver")]
    pub broker_url: Option<String>,
    /// The bench's subscriber keys its deliveries (`key: event.k`), event
    /// `i` getting key `i mod N` (1 to 1,000,000): what a key costs.
    #[arg(long, value_name = "N")]
    pub keys: Option<u64>,
    /// With --keys: the subscriber's `order:`, `fifo` or `strict`: what
    /// order per key costs.
    #[arg(
        long,
        value_name = "ORDER",
        requires = "keys",
        conflicts_with = "concurrency_per_key"
    )]
    pub order: Option<String>,
    /// With --keys: the subscriber's `concurrency_per_key:` (1 to 1,000).
    #[arg(long, value_name = "N", requires = "keys")]
    pub concurrency_per_key: Option<i64>,
    /// With --keys N: every event but the last N-1 on one key, then one on
    /// each other key; reports how long until every other key's delivery
    /// started, and does not wait for the rest (a backlog only).
    #[arg(long, requires = "keys")]
    pub hot_key: bool,
    /// Print one JSON object on the last line of stdout instead of the
    /// summary, and no progress bar.
    #[arg(long)]
    pub json: bool,
    /// Keep the bench's store (schema or file) and print where it is.
    #[arg(long)]
    pub keep: bool,
}

/// An explicit bound on the run's length (the bench's own memory does not
/// grow with it: see `finishes.rs`).
const MAX_EVENTS: u64 = 1_000_000;
const MAX_RATE: u64 = 1_000_000;
/// The most deliveries one process runs at once (the runtime's bound).
const MAX_CONCURRENCY: u64 = 10_000;
const MAX_LATENCY: Duration = Duration::from_secs(10);
/// A soak's bounds: its length, its report interval, and the events it
/// may emit in all.
const SOAK_MIN: Duration = Duration::from_secs(10);
const SOAK_MAX: Duration = Duration::from_secs(24 * 3600);
const REPORT_MIN: Duration = Duration::from_secs(1);
const REPORT_MAX: Duration = Duration::from_secs(3600);
const SOAK_MAX_EVENTS: u64 = 1_000_000_000;
const MAX_KEYS: u64 = 1_000_000;

/// What the flags ask for, checked.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub events: u64,
    pub concurrency: usize,
    pub rate: Option<u64>,
    /// `Some` with `--http`.
    pub latency: Option<Duration>,
    /// The sink connection's `rate:`, calls a second.
    pub connection_rate: Option<u64>,
    /// `--driver` and the broker's URL.
    pub broker: Option<(jadpo_core::publish::Broker, String)>,
    /// `--keys N`: deliveries keyed over N keys.
    pub keys: Option<u64>,
    /// `--order` or `--concurrency-per-key`: the keys' rule.
    pub key_rule: Option<jadpo_core::key_rule::KeyRule>,
    /// `--hot-key`: one key holds the backlog, each other key one event.
    pub hot_key: bool,
    /// `--duration`: a soak of this length (`events` is rate × it).
    pub duration: Option<Duration>,
    pub report_every: Duration,
    pub retention: Option<Duration>,
    pub json: bool,
    pub keep: bool,
    /// Where the engine's spans go: the OTLP export when the `OTEL_*`
    /// variables ask for one, as `serve` does; off otherwise.
    pub spans: jadpo::Spans,
}

fn usage(code: &'static str, message: String) -> CliError {
    CliError::environment(code, message)
}

/// `500/s` or `500`: events per second, a whole number from 1.
fn parse_rate(text: &str) -> Result<u64, CliError> {
    let digits = text.trim().strip_suffix("/s").unwrap_or(text.trim());
    match digits.parse::<u64>() {
        Ok(r) if (1..=MAX_RATE).contains(&r) => Ok(r),
        _ => Err(usage(
            "bench.rate_invalid",
            format!("--rate {text:?}: events per second from 1 to {MAX_RATE}, such as 500/s"),
        )),
    }
}

/// `100/s` or `100`: the sink connection's calls per second, 1 to 10,000
/// (what `rate:` takes).
fn parse_connection_rate(text: &str) -> Result<u64, CliError> {
    let digits = text.trim().strip_suffix("/s").unwrap_or(text.trim());
    match digits.parse::<u64>() {
        Ok(r) if (1..=jadpo_core::limit::Rate::MAX_PER_SECOND).contains(&r) => Ok(r),
        _ => Err(usage(
            "bench.connection_rate_invalid",
            format!(
                "--connection-rate {text:?}: calls per second from 1 to {}, such as 100/s",
                jadpo_core::limit::Rate::MAX_PER_SECOND
            ),
        )),
    }
}

/// `50ms`, `1s`, `0`: at most [`MAX_LATENCY`].
fn parse_latency(text: &str) -> Result<Duration, CliError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let d = match (digits.parse::<u64>(), unit) {
        (Ok(n), "ms") => Some(Duration::from_millis(n)),
        (Ok(n), "s") => Some(Duration::from_secs(n)),
        (Ok(0), "") => Some(Duration::ZERO),
        _ => None,
    };
    d.filter(|d| *d <= MAX_LATENCY).ok_or_else(|| {
        usage(
            "bench.latency_invalid",
            format!("--latency {text:?}: a duration from 0s to 10s, such as 50ms or 1s"),
        )
    })
}

/// A `--duration` or `--report-every` within `min..=max`.
fn parse_span(flag: &str, text: &str, min: Duration, max: Duration) -> Result<Duration, CliError> {
    let code = if flag == "--duration" {
        "bench.duration_invalid"
    } else {
        "bench.report_every_invalid"
    };
    match crate::cmd::parse_duration(text) {
        Ok(d) if (min..=max).contains(&d) => Ok(d),
        _ => Err(usage(
            code,
            format!(
                "{flag} {text:?}: a duration from {} to {}, such as 30m",
                crate::output::duration_short(min),
                crate::output::duration_short(max)
            ),
        )),
    }
}

/// `--retention`: as `serve` takes it, and, the bench being short, down to
/// a second; `0` keeps everything (`None`).
fn parse_retention(text: &str) -> Result<Option<Duration>, CliError> {
    let seconds = crate::cmd::parse_duration(text)
        .ok()
        .filter(|d| d.subsec_nanos() == 0 && (d.is_zero() || d.as_secs() < 60));
    match seconds.map(Ok).unwrap_or_else(|| process::parse_retention(text)) {
        Ok(d) => Ok(Some(d).filter(|d| !d.is_zero())),
        Err(_) => Err(usage(
            "bench.retention_invalid",
            format!("--retention {text:?}: 0 (keep everything) or a duration from 1s to 3650d, such as 5m"),
        )),
    }
}

impl Settings {
    /// The key of event `i`: `i mod N` over `--keys N`, or with
    /// `--hot-key` the hot key for all but the last N-1 events.
    pub(super) fn key_of(&self, i: u64) -> Option<u64> {
        let n = self.keys?;
        Some(if self.hot_key {
            super::hot::key_of(i, self.events, n)
        } else {
            i % n
        })
    }
}

/// The flags as settings, or the first one out of bounds, refused with its
/// `bench.*` code.
pub(super) fn check(args: &Args) -> Result<Settings, CliError> {
    let rate = args.rate.as_deref().map(parse_rate).transpose()?;
    let duration = args
        .duration
        .as_deref()
        .map(|d| parse_span("--duration", d, SOAK_MIN, SOAK_MAX))
        .transpose()?;
    let events = match (duration, rate) {
        (Some(d), Some(r)) => {
            let n = r.saturating_mul(d.as_secs());
            if n > SOAK_MAX_EVENTS {
                return Err(usage(
                    "bench.duration_invalid",
                    format!(
                        "--rate {r}/s for --duration {}s is {n} events: at most {SOAK_MAX_EVENTS}",
                        d.as_secs()
                    ),
                ));
            }
            n
        }
        _ => args.events,
    };
    let retention = args.retention.as_deref().map(parse_retention).transpose()?.flatten();
    if duration.is_none() && !(1..=MAX_EVENTS).contains(&args.events) {
        return Err(usage(
            "bench.events_invalid",
            format!("--events {}: from 1 to {MAX_EVENTS}", args.events),
        ));
    }
    if !(1..=MAX_CONCURRENCY).contains(&args.concurrency) {
        return Err(usage(
            "bench.concurrency_invalid",
            format!("--concurrency {}: from 1 to {MAX_CONCURRENCY}", args.concurrency),
        ));
    }
    if let Some(k) = args.keys.filter(|k| !(1..=MAX_KEYS).contains(k)) {
        return Err(usage("bench.keys_invalid", format!("--keys {k}: from 1 to {MAX_KEYS}")));
    }
    let key_rule = match (args.order.as_deref(), args.concurrency_per_key) {
        (Some("fifo"), _) => Some(jadpo_core::key_rule::KeyRule::Fifo),
        (Some("strict"), _) => Some(jadpo_core::key_rule::KeyRule::Strict),
        (Some(other), _) => {
            return Err(usage(
                "bench.order_invalid",
                format!("--order {other}: `fifo` or `strict`"),
            ))
        }
        (None, Some(n)) => Some(
            jadpo_core::key_rule::KeyRule::cap(i128::from(n))
                .map_err(|e| usage("bench.order_invalid", format!("--concurrency-per-key {n}: {e}")))?,
        ),
        (None, None) => None,
    };
    if args.hot_key {
        let keys = args.keys.unwrap_or(0);
        if keys < 2 || keys > events || rate.is_some() || args.http || args.driver.is_some() {
            return Err(usage(
                "bench.hot_key_invalid",
                format!(
                    "--hot-key needs --keys from 2 to --events ({events}), without --rate, --http or --driver; \
                     given --keys {keys}"
                ),
            ));
        }
    }
    let latency = match (&args.latency, args.http) {
        (Some(l), _) => Some(parse_latency(l)?),
        (None, true) => Some(Duration::ZERO),
        (None, false) => None,
    };
    Ok(Settings {
        events,
        concurrency: args.concurrency as usize,
        rate,
        latency,
        connection_rate: args.connection_rate.as_deref().map(parse_connection_rate).transpose()?,
        broker: match &args.driver {
            Some(d) => {
                let broker = super::broker::parse(d)?;
                let url = args
                    .broker_url
                    .clone()
                    .unwrap_or_else(|| super::broker::default_url(broker).to_owned());
                Some((broker, url))
            }
            None => None,
        },
        keys: args.keys,
        key_rule,
        hot_key: args.hot_key,
        duration,
        report_every: args
            .report_every
            .as_deref()
            .map(|d| parse_span("--report-every", d, REPORT_MIN, REPORT_MAX))
            .transpose()?
            .unwrap_or(Duration::from_secs(60)),
        retention,
        json: args.json,
        keep: args.keep,
        spans: jadpo::Spans::off(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_latencies_are_read_or_refused_with_a_code() {
        assert_eq!(parse_rate("500/s").unwrap(), 500);
        assert_eq!(parse_rate("7").unwrap(), 7);
        for bad in ["0/s", "0", "-1/s", "fast", "1.5/s", "10/m"] {
            assert_eq!(parse_rate(bad).unwrap_err().code, "bench.rate_invalid", "{bad}");
        }
        assert_eq!(parse_connection_rate("100/s").unwrap(), 100);
        for bad in ["0/s", "10001/s", "x"] {
            assert_eq!(
                parse_connection_rate(bad).unwrap_err().code,
                "bench.connection_rate_invalid",
                "{bad}"
            );
        }
        assert_eq!(parse_latency("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_latency("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_latency("0").unwrap(), Duration::ZERO);
        for bad in ["11s", "50", "soon", "1m"] {
            assert_eq!(parse_latency(bad).unwrap_err().code, "bench.latency_invalid", "{bad}");
        }
        let secs = |n: u64| Some(Duration::from_secs(n));
        for (text, keep) in [
            ("2s", secs(2)),
            ("5m", secs(300)),
            ("7d", secs(7 * 86_400)),
            ("0", None),
        ] {
            assert_eq!(parse_retention(text).unwrap(), keep, "{text}");
        }
        for bad in ["500ms", "soon", "-1s", "3651d"] {
            assert_eq!(
                parse_retention(bad).unwrap_err().code,
                "bench.retention_invalid",
                "{bad}"
            );
        }
        let minute = Duration::from_secs(60);
        assert_eq!(
            parse_span("--duration", "30m", SOAK_MIN, SOAK_MAX).unwrap(),
            minute * 30
        );
        for bad in ["5s", "25h", "x"] {
            assert_eq!(
                parse_span("--duration", bad, SOAK_MIN, SOAK_MAX).unwrap_err().code,
                "bench.duration_invalid",
                "{bad}"
            );
        }
        assert_eq!(
            parse_span("--report-every", "2h", REPORT_MIN, REPORT_MAX)
                .unwrap_err()
                .code,
            "bench.report_every_invalid"
        );
    }
}
