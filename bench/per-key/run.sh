#!/usr/bin/env bash
# Per-key order (docs/decisions.md, "Per-key order: only the head of each
# key is claimable") against no keys, in SQL on a schema of the store's own
# migrations, before any of it is built: 50,000 deliveries emitted in
# batches of 1,000 and drained in claims of 1,000 and their finishes,
# unkeyed and over 10,000 keys `fifo`, alternated, three times each.
#
#   bench/per-key/run.sh postgres://postgres@127.0.0.1:5432/test
#
# Makes the schema `jadpo_per_key` (dropped first if there, and after),
# migrates it with `jadpo migrate`. Prints the server's time for the emit
# and the drain of each run. Needs psql.
set -euo pipefail

URL="${1:?usage: bench/per-key/run.sh POSTGRES_URL}"
EVENTS="${EVENTS:-50000}"
KEYS="${KEYS:-10000}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
(cd "$root" && nice cargo build --release -p jadpo-cli --bin jadpo >&2)
schema=jadpo_per_key
sql() { PGOPTIONS="-c search_path=$schema -c client_min_messages=warning" psql -q -X -v ON_ERROR_STOP=1 "$URL" "$@"; }
PGOPTIONS="-c client_min_messages=warning" psql -q -X "$URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema"
sep='?'; [[ "$URL" == *\?* ]] && sep='&'
"$root/target/release/jadpo" migrate --store "${URL}${sep}options=-c%20search_path%3D$schema" >&2
sql -f "$here/designs.sql"
for rep in 1 2 3; do
  for keys in 0 "$KEYS"; do
    sql -c "CHECKPOINT" -c "CALL exp_run($keys, $EVENTS)"
  done
done
sql -c "SELECT design, round(emit_ms) AS emit_ms, round(drain_ms) AS drain_ms, rounds FROM exp_result ORDER BY at"
PGOPTIONS="-c client_min_messages=warning" psql -q -X "$URL" -c "DROP SCHEMA $schema CASCADE"
