#!/usr/bin/env bash
# Issue 10's cost: priority and Raft clusters before (plaintext peers, built from
# commit 8353c47 into /tmp/before) and after (authenticated, encrypted peers,
# target/release), alternated in one session. Writes OUT/{before,after}-{1,2}.md.
set -euo pipefail
out=${OUT:-/tmp/bench-compare}
mkdir -p "$out"
common=(--target baton-priority,baton-raft --scenario uncontended,pipelined,contended
  --clients 16,64 --contended-clients 16 --pipelined-clients 16 --depth 16
  --pin-server 0 --pin-driver 1 --warmup 1 --duration ${DURATION:-4} --runs ${RUNS:-2})
for round in 1 2; do
  for side in before after; do
    if [ $side = before ]; then bin=/tmp/before; else bin=/work/main/target/release; fi
    w=$(mktemp -d)
    "$bin/baton-bench" "${common[@]}" --spawn "$bin/batond" --work-dir "$w" \
      --markdown "$out/$side-$round.md" > "$out/$side-$round.log" 2>&1 || echo "$side $round failed"
    rm -rf "$w"
  done
done
