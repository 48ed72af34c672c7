#!/usr/bin/env bash
# A claim that writes each row's lease (today) against one lease row per
# claimed batch whose rows stay due, its claim skipping rows in flight or
# starting after a shared cursor (docs/decisions.md, "The next 1.5x on
# PostgreSQL"), in SQL on a schema of the store's own migrations.
#
#   bench/batch-lease/run.sh postgres://postgres@127.0.0.1:5432/test
#
# Makes the schema `jadpo_batch_lease` (dropped first if there), migrates it
# with `jadpo migrate`, then for 4 and 16 thousand deliveries in flight runs
# each design three times, alternated, each over a fresh load of 200,000 due
# deliveries: 150 claims of 1,000 and their finishes. Prints the server's
# time for all of it, for the claims alone, and WAL bytes per delivery.
# Needs psql.
set -euo pipefail

URL="${1:?usage: bench/batch-lease/run.sh POSTGRES_URL}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
(cd "$root" && nice cargo build --release -p jadpo-cli >&2)
schema=jadpo_batch_lease
sql() { PGOPTIONS="-c search_path=$schema -c client_min_messages=warning" psql -q -X -v ON_ERROR_STOP=1 "$URL" "$@"; }
PGOPTIONS="-c client_min_messages=warning" psql -q -X "$URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema"
sep='?'; [[ "$URL" == *\?* ]] && sep='&'
"$root/target/release/jadpo" migrate --store "${URL}${sep}options=-c%20search_path%3D$schema" >&2
sql -f "$here/designs.sql"
for depth in 4 16; do
  for rep in 1 2 3; do
    for design in now batch cursor; do
      sql -f "$here/load.sql" >/dev/null
      sql -c "CALL exp_$design(150, $depth)"
    done
  done
done
sql -c "SELECT design, round(ms) AS ms, round(claim_ms) AS claim_ms,
               round(wal_bytes / (cycles * 1000.0)) AS wal_bytes_per_delivery
        FROM exp_result ORDER BY at"
PGOPTIONS="-c client_min_messages=warning" psql -q -X "$URL" -c "DROP SCHEMA $schema CASCADE"
