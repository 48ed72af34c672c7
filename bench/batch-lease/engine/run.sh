#!/usr/bin/env bash
# The batch lease in the engine, against today's engine and graphile-worker,
# alternating on the local PostgreSQL (docs/decisions.md, "The next 1.5x on
# PostgreSQL"). Two throwaway variants of the PostgreSQL driver, built from
# this checkout's HEAD in a detached worktree of their own:
#
#   lease   the claim writes one lease row per batch (a token from a
#           sequence) and leaves its rows `due`, after a shared cursor; a
#           finish writes each row once, fenced on that lease row existing.
#           No claim from the front, no bookkeeping of finished ids, no
#           reads that show a leased row as running: the most a batch lease
#           can give.
#   forget  `lease`, and a plain end deletes its row: nothing of a success
#           is kept (as graphile-worker does). No read of a finished
#           delivery works; `jadpo bench` reports 0 succeeded and exits 1.
#
#   bench/batch-lease/engine/run.sh            # 3 rounds, N=50000 C=24
#   ROUNDS=6 bench/batch-lease/engine/run.sh
#
# Neither is a design to ship; they bound what one would gain.
set -euo pipefail

ROUNDS="${ROUNDS:-3}"
N="${N:-50000}"
C="${C:-24}"
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
peer="$root/bench/peers/graphile"
work="${TMPDIR:-/tmp}/jadpo-batch-lease"

if [ ! -d "$peer/node_modules/graphile-worker" ]; then
    (cd "$peer" && npm ci --no-audit --no-fund >&2)
fi
(cd "$root" && nice cargo build --release -p jadpo-cli >&2)
mkdir -p "$work/bin"
cp "$root/target/release/jadpo" "$work/bin/today"
for variant in lease forget; do
    git -C "$root" worktree remove --force "$work/src" 2>/dev/null || true
    rm -rf "$work/src"
    git -C "$root" worktree prune
    git -C "$root" worktree add --detach "$work/src" HEAD >&2
    git -C "$work/src" apply "$here/lease.patch"
    [ "$variant" = forget ] && git -C "$work/src" apply "$here/forget.patch"
    (cd "$work/src" && CARGO_TARGET_DIR="$work/target" nice cargo build --release -p jadpo-cli >&2)
    cp "$work/target/release/jadpo" "$work/bin/$variant"
    git -C "$root" worktree remove --force "$work/src"
done

checkpoint() { psql "$DATABASE_URL" -qc CHECKPOINT >/dev/null 2>&1 || echo "(CHECKPOINT failed)" >&2; }
drain() { grep -o '"drain_per_s":[0-9.]*' | cut -d: -f2; }
for round in $(seq 1 "$ROUNDS"); do
    checkpoint
    g="$(cd "$peer" && node graphile_perf.js "$N" "$C" | tail -n 1 | grep -o '"work_per_s":[0-9.]*' | cut -d: -f2)"
    echo "$round graphile-worker $g"
    for variant in today lease forget; do
        checkpoint
        echo "$round $variant $("$work/bin/$variant" bench --store "$DATABASE_URL" --events "$N" --concurrency "$C" --json 2>/dev/null | tail -n 1 | drain)"
    done
done
