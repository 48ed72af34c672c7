#!/usr/bin/env python3
"""Draws a soak's intervals as one SVG: drain rate, emit-to-finish latency,
finished rows and the store's size over time, one panel each.

    jadpo bench --rate 5000/s --duration 30m --retention 5m --json > soak.jsonl
    bench/soak-chart.py soak.jsonl docs/soak.svg "PostgreSQL, 5,000/s, retention 5 min"

Reads the interval lines (`{"interval": ...}`) `jadpo bench --json` prints
as a soak goes; needs nothing beyond Python 3's standard library.
"""

import json
import sys
from html import escape

WIDTH, PANEL_H, PAD_L, PAD_R, PAD_T, GAP = 760, 150, 70, 20, 40, 45


def intervals(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "interval" in row:
                out.append(row)
    return out


def size_mib(row):
    """The store's size: its tables on PostgreSQL, file and WAL on SQLite."""
    if row.get("table_bytes") is not None:
        return row["table_bytes"] / 2**20
    return ((row.get("file_bytes") or 0) + (row.get("wal_bytes") or 0)) / 2**20


def dead_rows(row):
    dead = [t.get("dead_rows") for t in row.get("tables", {}).values()]
    return sum(dead) if dead and all(d is not None for d in dead) else None


def nice_max(v):
    if v <= 0:
        return 1
    mag = 10 ** (len(str(int(v))) - 1)
    for step in (1, 2, 2.5, 5, 10):
        if step * mag >= v:
            return step * mag
    return 10 * mag


def panel(top, title, xs, series, unit, xmax):
    """One panel: `series` is [(label, colour, values)], values may hold None."""
    plot_w = WIDTH - PAD_L - PAD_R
    ys = [v for _, _, vals in series for v in vals if v is not None]
    ymax = nice_max(max(ys) if ys else 1)
    parts = [
        f'<text x="{PAD_L}" y="{top - 8}" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{PAD_L}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#999"/>',
    ]
    for k in range(5):
        v = ymax * k / 4
        y = top + PANEL_H - PANEL_H * k / 4
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        label = f"{v:,.0f}" if ymax >= 10 else f"{v:.1f}"
        parts.append(f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    parts.append(
        f'<text x="{PAD_L - 55}" y="{top + PANEL_H / 2:.0f}" '
        f'transform="rotate(-90 {PAD_L - 55} {top + PANEL_H / 2:.0f})" text-anchor="middle">{escape(unit)}</text>'
    )
    for n, (label, colour, vals) in enumerate(series):
        pts = [
            f"{PAD_L + plot_w * x / xmax:.1f},{top + PANEL_H - PANEL_H * v / ymax:.1f}"
            for x, v in zip(xs, vals)
            if v is not None
        ]
        if pts:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(pts)}"/>')
        lx = PAD_L + plot_w - 150 * (len(series) - n)
        parts.append(f'<rect x="{lx}" y="{top + 6}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{lx + 14}" y="{top + 15}">{escape(label)}</text>')
    return parts


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = intervals(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no interval lines")
    title = sys.argv[3] if len(sys.argv) > 3 else "jadpo bench soak"
    xs = [r["seconds"] / 60 for r in rows]
    xmax = max(xs) or 1
    sqlite = rows[-1].get("file_bytes") is not None
    panels = [
        ("Drained per second", [("drained/s", "#1f77b4", [r["drain_per_s"] for r in rows])], "per second"),
        (
            "Emit to finish",
            [("p50", "#2ca02c", [r.get("p50_ms") for r in rows]), ("p99", "#d62728", [r.get("p99_ms") for r in rows])],
            "ms",
        ),
        ("Finished rows in the store", [("finished rows", "#9467bd", [r["finished_rows"] for r in rows])], "rows"),
        (
            "Store size" + (" (file and WAL)" if sqlite else " (tables with indexes)"),
            [("MiB", "#8c564b", [size_mib(r) for r in rows])],
            "MiB",
        ),
    ]
    if not sqlite:
        panels.append(("Dead row versions", [("dead rows", "#7f7f7f", [dead_rows(r) for r in rows])], "rows"))
    height = PAD_T + len(panels) * (PANEL_H + GAP) + 20
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for k, (name, series, unit) in enumerate(panels):
        top = PAD_T + 12 + k * (PANEL_H + GAP)
        out += panel(top, name, xs, series, unit, xmax)
        for m in range(0, int(xmax) + 1, max(1, int(xmax) // 10 or 1)):
            x = PAD_L + (WIDTH - PAD_L - PAD_R) * m / xmax
            out.append(f'<text x="{x:.1f}" y="{top + PANEL_H + 14}" text-anchor="middle">{m}</text>')
    out.append(f'<text x="{WIDTH / 2}" y="{height - 6}" text-anchor="middle">minutes</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
