#!/usr/bin/env bash
# Retention on its own and beside a drain, on one store.
#
#   bench/prune.sh postgres://postgres@127.0.0.1:5432/test
#   bench/prune.sh sqlite:/tmp/prune/bench.db
#   DRAIN=1 N=200000 bench/prune.sh postgres://...
#
# `jadpo bench --keep` makes N finished deliveries (2N with DRAIN=1) in a
# schema or file of its own; the first N, with their events, are moved 31
# days back; with DRAIN=1 the other N are made due again. Then one
# `jadpo serve --retention 7d` runs on it: it prunes the old ones (and
# drains the due ones), and the rows left are counted every second until
# none is. Prints one line a second and the totals; the store is removed
# at the end. Needs psql for PostgreSQL and python3 for SQLite.
set -euo pipefail

URL="${1:?usage: bench/prune.sh STORE_URL}"
N="${N:-200000}"
DRAIN="${DRAIN:-0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(cd "$root" && nice cargo build --release -p jadpo-cli >&2)
jadpo="$root/target/release/jadpo"
work="$(mktemp -d)"
serve=""
store=""
schema=""
# The bench's store goes at the end, whatever happened.
cleanup() {
    [ -n "$serve" ] && kill "$serve" 2>/dev/null && wait "$serve" 2>/dev/null
    case "$store" in
    postgres*) [ -n "$schema" ] && PGOPTIONS='-c client_min_messages=warning' psql "$URL" -qc "DROP SCHEMA $schema CASCADE" ;;
    sqlite:*) rm -rf "$(dirname "${store#sqlite:}")" ;;
    esac
    rm -rf "$work"
}
trap cleanup EXIT

made=$N
[ "$DRAIN" = 1 ] && made=$((2 * N))
json="$("$jadpo" bench --store "$URL" --events "$made" --keep --json | tail -n 1)"
store="$(echo "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["store_url"])')"
schema="$(echo "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["schema"] or "")')"
echo "made $made finished deliveries in $store" >&2

month=$((31 * 86400000))
now_ms=$(($(date +%s) * 1000))
age="UPDATE jadpo_deliveries SET finished_at = finished_at - $month WHERE id <= $N;
UPDATE jadpo_events SET emitted_at = emitted_at - $month
  WHERE id IN (SELECT event_id FROM jadpo_deliveries WHERE id <= $N);"
due="UPDATE jadpo_deliveries SET state = 'due', attempts = 0, due_at = $now_ms, finished_at = NULL,
  handled_at = NULL WHERE id > $N;"
case "$store" in postgres*) due="$due UPDATE jadpo_deliveries SET success_started_at = NULL WHERE id > $N;" ;; esac
[ "$DRAIN" = 1 ] || due=""
# Old finished rows left, and due or running rows left.
count="SELECT (SELECT count(*) FROM jadpo_deliveries WHERE id <= $N),
  (SELECT count(*) FROM jadpo_deliveries WHERE state IN ('due', 'running'))"

case "$store" in
postgres*)
    sql() { psql "$store" -qAtF ' ' -c "$1"; }
    sql "$age $due"
    sql "VACUUM ANALYZE"
    ;;
sqlite:*)
    db="${store#sqlite:}"
    sql() { python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
rows = []
for stmt in [s for s in sys.argv[2].split(";") if s.strip()]:
    rows = c.execute(stmt).fetchall()
c.commit()
for r in rows: print(*r)' "$db" "$1"; }
    sql "$age $due"
    ;;
*) echo "not a store URL: $store" >&2; exit 2 ;;
esac

cat >"$work/app.jadpo" <<'EOF'
event BenchEvent { n: int }
action noop(n: int) { }
subscriber bench { on: BenchEvent  run: noop(event.n) }
EOF
(cd "$work" && JADPO_API_TOKEN=prune-bench-token-prune-bench-token exec "$jadpo" serve --store "$store" --port 0 --retention 7d \
    >"$work/serve.log" 2>&1) &
serve=$!
start=$(date +%s.%N)
pruned_at=""
drained_at=""
echo "seconds old_left due_left"
while :; do
    read -r old due_left < <(sql "$count")
    t=$(echo "$(date +%s.%N) - $start" | bc)
    printf '%7.1f %8s %8s\n' "$t" "$old" "$due_left"
    [ -z "$pruned_at" ] && [ "$old" = 0 ] && pruned_at=$t
    [ -z "$drained_at" ] && [ "$due_left" = 0 ] && drained_at=$t
    [ -n "$pruned_at" ] && [ -n "$drained_at" ] && break
    kill -0 "$serve" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 1
done
echo "pruned $N in ${pruned_at}s ($(echo "$N / $pruned_at" | bc)/s)"
if [ "$DRAIN" = 1 ]; then
    echo "drained $N in ${drained_at}s ($(echo "$N / $drained_at" | bc)/s)"
fi
