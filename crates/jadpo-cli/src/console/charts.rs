//! The console's charts, drawn on the server as SVG from the per-minute
//! summary (`Store::minutes`): no script, no library, and each bar carries
//! its numbers in a `<title>` (a tooltip, and what a screen reader says).

use crate::output::time_short;
use jadpo_core::Timestamp;
use jadpo_store::{minute_of, MinuteCount};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Minutes a chart shows, the current one last.
pub(super) const MINUTES: usize = 60;

const MINUTE: Duration = Duration::from_secs(60);
const WIDTH: usize = 720;
const BAR: usize = WIDTH / MINUTES;

/// The outcomes the overview stacks, bottom up, with their colours.
pub(super) const OUTCOMES: [(&str, &str); 5] = [
    ("succeeded", "#12b76a"),
    ("retried", "#f79009"),
    ("failed", "#d92d20"),
    ("parked", "#7a5af8"),
    ("held", "#98a2b3"),
];

/// The first minute a chart ending at `now` shows.
pub(super) fn since(now: Timestamp) -> Timestamp {
    minute_of(now).minus(MINUTE * (MINUTES as u32 - 1))
}

/// Counts by (minute index, series), for the minutes a chart shows.
fn by_slot(minutes: &[MinuteCount], now: Timestamp) -> BTreeMap<(usize, &str), u64> {
    let first = since(now);
    let mut out = BTreeMap::new();
    for m in minutes {
        let Ok(slot) = usize::try_from((m.minute.as_millis() - first.as_millis()) / 60_000) else {
            continue;
        };
        if m.minute >= first && slot < MINUTES {
            *out.entry((slot, m.series.as_str())).or_default() += m.n;
        }
    }
    out
}

fn minute_label(now: Timestamp, slot: usize) -> String {
    time_short(since(now).plus(MINUTE * slot as u32))
}

/// Deliveries finished per minute by outcome, and those held, stacked.
pub(super) fn outcomes(minutes: &[MinuteCount], now: Timestamp) -> String {
    let counts = by_slot(minutes, now);
    let height = 120usize;
    let tallest = (0..MINUTES)
        .map(|slot| {
            OUTCOMES
                .iter()
                .map(|(s, _)| counts.get(&(slot, *s)).copied().unwrap_or(0))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let mut svg = format!(
        r#"<svg id="outcomes-chart" class="chart" viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img" aria-label="Deliveries per minute by outcome, last hour">"#,
        h = height + 16
    );
    for slot in 0..MINUTES {
        let mut y = height;
        let mut title = minute_label(now, slot);
        for (series, colour) in OUTCOMES {
            let n = counts.get(&(slot, series)).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let _ = write!(title, ", {n} {series}");
            let h = ((n as f64 / tallest as f64) * height as f64).ceil() as usize;
            y = y.saturating_sub(h);
            let _ = write!(
                svg,
                r#"<rect data-minute="{slot}" data-series="{series}" data-n="{n}" x="{x}" y="{y}" width="{w}" height="{h}" fill="{colour}"><title>{title}</title></rect>"#,
                x = slot * BAR,
                w = BAR - 2,
            );
        }
    }
    let _ = write!(
        svg,
        r##"<line x1="0" y1="{height}" x2="{WIDTH}" y2="{height}" stroke="#d0d5dd"/><text x="0" y="{t}" font-size="10" fill="#667085">{from}</text><text x="{WIDTH}" y="{t}" font-size="10" fill="#667085" text-anchor="end">now</text></svg>"##,
        t = height + 12,
        from = minute_label(now, 0),
    );
    svg
}

/// One connection's hour: calls per minute (the unavailable ones in red)
/// and, above them, when its breaker opened, probed and closed.
pub(super) fn timeline(minutes: &[MinuteCount], connection: &str, now: Timestamp) -> String {
    let counts = by_slot(minutes, now);
    let series = |what: &str| format!("{what}:{connection}");
    let (calls, unavailable) = (series("calls"), series("unavailable"));
    let marks = [
        (series("opened"), "opened", "#d92d20"),
        (series("probe"), "probe", "#f79009"),
        (series("closed"), "closed", "#12b76a"),
    ];
    let height = 48usize;
    let tallest = (0..MINUTES)
        .map(|slot| counts.get(&(slot, calls.as_str())).copied().unwrap_or(0))
        .max()
        .unwrap_or(0)
        .max(1);
    let mut svg = format!(
        r#"<svg class="chart timeline" data-connection="{connection}" viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img" aria-label="Calls per minute and breaker changes, last hour">"#,
        h = height + 14
    );
    for slot in 0..MINUTES {
        let x = slot * BAR;
        let n = counts.get(&(slot, calls.as_str())).copied().unwrap_or(0);
        let bad = counts.get(&(slot, unavailable.as_str())).copied().unwrap_or(0);
        if n > 0 {
            let h = ((n as f64 / tallest as f64) * height as f64).ceil() as usize;
            let bad_h = ((bad.min(n) as f64 / tallest as f64) * height as f64).ceil() as usize;
            let title = format!("{}: {n} calls, {bad} unavailable", minute_label(now, slot));
            let _ = write!(
                svg,
                r##"<g data-minute="{slot}" data-calls="{n}" data-unavailable="{bad}"><title>{title}</title><rect x="{x}" y="{y}" width="{w}" height="{h}" fill="#b2ddff"/><rect x="{x}" y="{by}" width="{w}" height="{bad_h}" fill="#f97066"/></g>"##,
                y = 14 + height - h,
                by = 14 + height - bad_h,
                w = BAR - 2,
            );
        }
        for (i, (key, what, colour)) in marks.iter().enumerate() {
            let n = counts.get(&(slot, key.as_str())).copied().unwrap_or(0);
            if n > 0 {
                let _ = write!(
                    svg,
                    r#"<circle data-minute="{slot}" data-mark="{what}" cx="{cx}" cy="{cy}" r="4" fill="{colour}"><title>{label}: {what} ×{n}</title></circle>"#,
                    cx = x + BAR / 2,
                    cy = 4 + i * 3,
                    label = minute_label(now, slot),
                );
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_700_003_610_000);

    fn count(minutes_ago: u32, series: &str, n: u64) -> MinuteCount {
        MinuteCount {
            minute: minute_of(NOW).minus(MINUTE * minutes_ago),
            series: series.into(),
            n,
        }
    }

    #[test]
    fn the_outcomes_chart_stacks_each_minute_and_leaves_out_older_ones() {
        let svg = outcomes(
            &[
                count(0, "succeeded", 30),
                count(0, "failed", 10),
                count(59, "held", 5),
                count(60, "succeeded", 1000),
                count(3, "calls:pay", 7),
            ],
            NOW,
        );
        assert!(
            svg.contains(r#"data-minute="59" data-series="succeeded" data-n="30""#),
            "{svg}"
        );
        assert!(svg.contains(r#"data-minute="59" data-series="failed" data-n="10""#));
        assert!(svg.contains(r#"data-minute="0" data-series="held" data-n="5""#));
        assert!(!svg.contains("1000"), "an hour ago is off the chart");
        assert!(!svg.contains("calls"), "only outcomes");
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains(", 30 succeeded, 10 failed</title>"));
    }

    #[test]
    fn a_timeline_shows_calls_and_the_breakers_changes() {
        let svg = timeline(
            &[
                count(10, "calls:pay", 20),
                count(10, "unavailable:pay", 20),
                count(10, "opened:pay", 1),
                count(8, "probe:pay", 1),
                count(8, "closed:pay", 1),
                count(8, "calls:pay", 4),
                count(8, "calls:mail", 9),
            ],
            "pay",
            NOW,
        );
        assert!(
            svg.contains(r#"data-minute="49" data-calls="20" data-unavailable="20""#),
            "{svg}"
        );
        assert!(svg.contains(r#"data-minute="51" data-calls="4" data-unavailable="0""#));
        assert!(svg.contains(r#"data-minute="49" data-mark="opened""#));
        assert!(svg.contains(r#"data-minute="51" data-mark="probe""#));
        assert!(svg.contains(r#"data-minute="51" data-mark="closed""#));
        assert!(!svg.contains(r#"data-calls="9""#), "another connection's calls");
    }
}
