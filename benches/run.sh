#!/usr/bin/env bash
# Issue 2's benchmark figures, with the echo ceiling side by side:
# uncontended at C=1 and C=64, contended with 16 clients on one key, and
# pipelined at depth 16 (16 connections). batond is pinned to CPU 0, the
# driver (and nothing else) to CPU 1; the echo server gets CPU 0 as well.
#
# Environment: WARMUP, DURATION (seconds per run), RUNS (median of),
# SERVER_CPU, DRIVER_CPU. Extra arguments go to every baton-bench call.
set -euo pipefail
cd "$(dirname "$0")/.."

warmup=${WARMUP:-1}
duration=${DURATION:-5}
runs=${RUNS:-3}
server_cpu=${SERVER_CPU:-0}
driver_cpu=${DRIVER_CPU:-1}

command -v taskset >/dev/null || { echo "run.sh: taskset (util-linux) is needed for pinning" >&2; exit 1; }
if [ "$(nproc --all)" -lt 2 ]; then
  echo "run.sh: needs 2 CPUs to pin server and driver apart" >&2
  exit 1
fi

cargo build --release -p batond -p baton-bench

bench=(target/release/baton-bench
  --target baton,echo --spawn target/release/batond
  --pin-server "$server_cpu" --pin-driver "$driver_cpu"
  --warmup "$warmup" --duration "$duration" --runs "$runs")

"${bench[@]}" --scenario uncontended --clients 1,64 "$@"
echo
"${bench[@]}" --scenario contended --clients 16 "$@"
echo
"${bench[@]}" --scenario pipelined --clients 16 --depth 16 "$@"
