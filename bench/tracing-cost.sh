#!/usr/bin/env bash
# What tracing costs the engine: `jadpo bench` with every delivery's spans
# exported to a local OTLP receiver (examples/otlp_sink, which answers at
# once and decodes nothing) and without, alternating off on off on, PAIRS
# pairs on each store (SQLite, then PostgreSQL), N no-op deliveries, C at
# once, each run in a fresh file or schema of its own.
#
#   bench/tracing-cost.sh                     # N=50000 C=24, five pairs
#   N=20000 PAIRS=3 STORES=sqlite bench/tracing-cost.sh
#   ARGS=--http N=20000 bench/tracing-cost.sh  # each delivery one real call
#
# DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) is the
# PostgreSQL server; psql runs a CHECKPOINT before each of its runs.
# Prints one line per run and the medians; nothing is written anywhere.
set -euo pipefail

N="${N:-50000}"
C="${C:-24}"
PAIRS="${PAIRS:-5}"
STORES="${STORES:-sqlite postgres}"
ARGS="${ARGS:-}"
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(cd "$root" && nice cargo build --release -p jadpo-cli --bin jadpo --example otlp_sink >&2)
jadpo="$root/target/release/jadpo"
tmp="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
"$root/target/release/examples/otlp_sink" "127.0.0.1:$port" 2>"$tmp/sink.log" &
sink=$!
trap 'kill $sink 2>/dev/null; rm -rf "$tmp"' EXIT

run() { # store tracing
    local url
    case "$1" in
        sqlite) url="sqlite:$tmp/bench.db" ;;
        postgres) url="$DATABASE_URL"; psql -q "$DATABASE_URL" -c CHECKPOINT ;;
    esac
    if [ "$2" = on ]; then
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$port" \
            "$jadpo" bench --store "$url" --events "$N" --concurrency "$C" --json $ARGS
    else
        env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT \
            "$jadpo" bench --store "$url" --events "$N" --concurrency "$C" --json $ARGS
    fi | python3 -c "
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
print('$1', '$2', r['drain_per_s'], r['emit_per_s'], r.get('spans_exported'), r.get('spans_dropped'))"
}

for store in $STORES; do
    for _ in $(seq "$PAIRS"); do
        run "$store" off
        run "$store" on
    done
done | tee "$tmp/runs"
python3 - "$tmp/runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for store in dict.fromkeys(r[0] for r in rows):
    med = {}
    for t in ("off", "on"):
        rs = [r for r in rows if r[0] == store and r[1] == t]
        med[t] = (statistics.median(float(r[2]) for r in rs), statistics.median(float(r[3]) for r in rs))
    print(f"{store}: drain off {med['off'][0]:.0f}/s on {med['on'][0]:.0f}/s ({med['on'][0] / med['off'][0] - 1:+.1%}); "
          f"emit off {med['off'][1]:.0f}/s on {med['on'][1]:.0f}/s ({med['on'][1] / med['off'][1] - 1:+.1%})")
PY
