#!/usr/bin/env bash
# graphile-worker against `jadpo bench`, alternating A B A B A B on the
# local PostgreSQL so both see the same machine: N no-op jobs/deliveries,
# C at once, each run in a fresh schema of its own.
#
#   bench/compare.sh                  # N=50000 C=24, three pairs
#   N=20000 C=24 RUNS=3 bench/compare.sh
#
# DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) is the
# server both use. Needs cargo, node and npm (graphile-worker 0.18.0 is
# installed from bench/peers/graphile/package-lock.json on first use).
# Prints one line per run and the medians; nothing is written anywhere.
# Uses psql for a CHECKPOINT before each run (see below).
set -euo pipefail

N="${N:-50000}"
C="${C:-24}"
RUNS="${RUNS:-3}"
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peer="$root/bench/peers/graphile"

if [ ! -d "$peer/node_modules/graphile-worker" ]; then
    (cd "$peer" && npm ci --no-audit --no-fund >&2)
fi
(cd "$root" && nice cargo build --release -p jadpo-cli >&2)
jadpo="$root/target/release/jadpo"

# field NAME from the JSON object on stdin's last line
field() {
    tail -n 1 | node -e '
        let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
            const v = JSON.parse(s)[process.argv[1]];
            console.log(typeof v === "number" ? v.toFixed(0) : String(v));
        });' "$1"
}

median() {
    sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

echo "N=$N C=$C runs=$RUNS on $(echo "$DATABASE_URL" | sed -E 's#//([^:@/]+):[^@/]*@#//\1:***@#')"
printf '%-4s %-16s %14s %14s %10s %10s\n' run system "enqueue/s" "work/s" "p50 ms" "p99 ms"
g_work=()
j_work=()
# Each run starts right after a checkpoint, as pgbench starts after a
# vacuum: otherwise the server's own checkpoints (every few runs, from the
# WAL the runs write) land inside one run or another at random, and the
# full-page images and writes that follow one cost that run up to a fifth
# of its throughput. Needs a role that may run CHECKPOINT; without one the
# runs go on, noisier.
checkpoint() {
    psql "$DATABASE_URL" -qc CHECKPOINT >/dev/null 2>&1 || echo "(CHECKPOINT failed: runs are noisier)" >&2
}

for run in $(seq 1 "$RUNS"); do
    checkpoint
    g="$(cd "$peer" && node graphile_perf.js "$N" "$C")"
    g_enqueue="$(echo "$g" | field enqueue_per_s)"
    g_work+=("$(echo "$g" | field work_per_s)")
    printf '%-4s %-16s %14s %14s %10s %10s\n' "$run" graphile-worker "$g_enqueue" "${g_work[-1]}" - -

    checkpoint
    j="$("$jadpo" bench --store "$DATABASE_URL" --events "$N" --concurrency "$C" --json)"
    j_emit="$(echo "$j" | field emit_per_s)"
    j_work+=("$(echo "$j" | field drain_per_s)")
    j_p50="$(echo "$j" | field p50_ms)"
    j_p99="$(echo "$j" | field p99_ms)"
    printf '%-4s %-16s %14s %14s %10s %10s\n' "$run" "jadpo bench" "$j_emit" "${j_work[-1]}" "$j_p50" "$j_p99"
done
g_median="$(printf '%s\n' "${g_work[@]}" | median)"
j_median="$(printf '%s\n' "${j_work[@]}" | median)"
echo "median work/s: graphile-worker $g_median, jadpo bench $j_median ($(awk -v j="$j_median" -v g="$g_median" 'BEGIN { printf "%.2f", j / g }')x)"
