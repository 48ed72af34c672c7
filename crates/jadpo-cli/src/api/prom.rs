//! Prometheus text helpers for `/metrics`: label escaping and the histogram
//! series, apart from `metrics.rs` so it stays a list of what is shown.

use jadpo_runtime::metrics::{Histogram, BUCKETS};
use std::fmt::Write as _;

/// Escapes a label value.
pub(crate) fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One histogram's HELP and TYPE lines.
pub(crate) fn histogram_header(w: &mut String, name: &str, help: &str) {
    let _ = writeln!(w, "# HELP {name} {help}");
    let _ = writeln!(w, "# TYPE {name} histogram");
}

/// One histogram's series: a `_bucket` per bound and `+Inf`, `_sum` and
/// `_count`, under `labels` (`connection="x"`, or empty).
pub(crate) fn histogram(w: &mut String, name: &str, labels: &str, h: &Histogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, n) in BUCKETS.iter().zip(h.buckets) {
        let _ = writeln!(w, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(w, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(w, "{name}_sum{braces} {:.6}", h.sum.as_secs_f64());
    let _ = writeln!(w, "{name}_count{braces} {}", h.count);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_histogram_is_written_as_prometheus_reads_it() {
        let mut h = Histogram {
            count: 2,
            sum: Duration::from_millis(1500),
            ..Histogram::default()
        };
        h.buckets[BUCKETS.len() - 1] = 2;
        let mut out = String::new();
        histogram(&mut out, "x_seconds", "connection=\"c\"", &h);
        assert!(out.contains("x_seconds_bucket{connection=\"c\",le=\"0.001\"} 0\n"));
        assert!(out.contains("x_seconds_bucket{connection=\"c\",le=\"3600\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{connection=\"c\",le=\"+Inf\"} 2\n"));
        assert!(out.contains("x_seconds_sum{connection=\"c\"} 1.500000\n"));
        let mut bare = String::new();
        histogram(&mut bare, "y_seconds", "", &h);
        assert!(bare.contains("y_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(bare.contains("y_seconds_count 2\n"));
    }
}
