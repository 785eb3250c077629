#!/usr/bin/env bash
# Two builds side by side in one session: BEFORE (a directory holding an
# older batond and baton-bench, e.g. built from an earlier commit) and AFTER
# (default target/release), alternated ROUNDS times so that the machine's
# drift falls on both. Writes OUT/{before,after}-N.md and .log.
#
#   BEFORE=/tmp/before OUT=/tmp/bench-compare benches/compare.sh
#
# TARGETS (default baton,baton-priority,baton-raft), DURATION (s, default 4)
# and RUNS (per case, default 2) pick the cases. Issue 10's cost was
# measured with TARGETS=baton-priority,baton-raft.
set -euo pipefail
before=${BEFORE:?BEFORE must name a directory with an older batond and baton-bench}
after=${AFTER:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
out=${OUT:-/tmp/bench-compare}
mkdir -p "$out"
common=(--target "${TARGETS:-baton,baton-priority,baton-raft}"
  --scenario uncontended,pipelined,contended
  --clients 16,64 --contended-clients 16 --pipelined-clients 16 --depth 16
  --pin-server 0 --pin-driver 1 --warmup 1 --duration "${DURATION:-4}" --runs "${RUNS:-2}")
for round in $(seq 1 "${ROUNDS:-2}"); do
  for side in before after; do
    if [ "$side" = before ]; then bin=$before; else bin=$after; fi
    w=$(mktemp -d)
    "$bin/baton-bench" "${common[@]}" --spawn "$bin/batond" --work-dir "$w" \
      --markdown "$out/$side-$round.md" > "$out/$side-$round.log" 2>&1 || echo "$side $round failed"
    rm -rf "$w"
  done
done
