#!/usr/bin/env bash
# Issue 6's comparison, one command: Baton (single node, priority and Raft
# 3-node clusters), the echo ceiling, Redis (no persistence, then
# appendfsync always), etcd (one node, and three: etcd-cluster) and
# ZooKeeper, all driven by baton-bench with
# the same scenarios and concurrency, every server pinned to CPU 0 and the
# driver to CPU 1. First measures the floor (fsync in the work dir,
# loopback round trip, the durable cycle they allow; issue 14). Installs the peers from the system packages if missing
# (apt-get), lets the bench start each on 127.0.0.1 with data in a temp
# dir, stops everything it started on exit, and writes docs/benchmarks.md
# (tables, goals) and docs/benchmarks.svg (chart). The part of
# docs/benchmarks.md below its "kept" marker is hand-written and survives.
#
# Environment: WARMUP, DURATION (seconds per run), RUNS (median of),
# SERVER_CPU, DRIVER_CPU, TARGETS, LOCKS, WAITERS. Extra arguments go to
# baton-bench.
set -euo pipefail
cd "$(dirname "$0")/.."

warmup=${WARMUP:-1}
duration=${DURATION:-5}
runs=${RUNS:-3}
server_cpu=${SERVER_CPU:-0}
driver_cpu=${DRIVER_CPU:-1}
targets=${TARGETS:-baton,baton-priority,baton-raft,echo,redis,redis-aof,etcd,etcd-cluster,zookeeper}
locks=${LOCKS:-1000000}
waiters=${WAITERS:-10000}
doc=docs/benchmarks.md
chart=docs/benchmarks.svg
marker='<!-- Everything below this line is hand-written and kept by benches/run.sh. -->'

command -v taskset >/dev/null || { echo "run.sh: taskset (util-linux) is needed for pinning" >&2; exit 1; }
if [ "$(nproc --all)" -lt 2 ]; then
  echo "run.sh: needs 2 CPUs to pin server and driver apart" >&2
  exit 1
fi

# Peers and build tools from the system packages, one apt-get update at most.
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v etcd >/dev/null || missing+=(etcd-server)
[ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null || missing+=(default-jre-headless)
command -v protoc >/dev/null || missing+=(protobuf-compiler)
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  echo "run.sh: installing ${missing[*]}" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cargo build --release -p batond -p baton-bench --features baton-bench/etcd,baton-bench/zookeeper

work=$(mktemp -d -t baton-bench.XXXXXX)
pids="$work/pids"
cleanup() {
  # The bench stops its servers itself; this catches a bench that was
  # killed. Only processes that still look like ours are signalled.
  if [ -f "$pids" ]; then
    while read -r pid; do
      if grep -qaE 'batond|redis-server|etcd|zookeeper|baton-bench' "/proc/$pid/cmdline" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
      fi
    done <"$pids"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command_line="WARMUP=$warmup DURATION=$duration RUNS=$runs benches/run.sh${*:+ $*}"
status=0
BATON_BENCH_COMMAND="$command_line" target/release/baton-bench \
  --target "$targets" --spawn target/release/batond \
  --scenario uncontended,contended,pipelined,memory,storm,failover \
  --clients 1,16,64,256 --contended-clients 16,64 --pipelined-clients 16 --depth 16,64 \
  --locks "$locks" --waiters "$waiters" \
  --pin-server "$server_cpu" --pin-driver "$driver_cpu" --floor on \
  --warmup "$warmup" --duration "$duration" --runs "$runs" \
  --work-dir "$work" --pid-file "$pids" \
  --markdown "$work/results.md" --svg "$chart" "$@" || status=$?

if [ -s "$work/results.md" ]; then
  kept=""
  if [ -f "$doc" ] && grep -qF -- "$marker" "$doc"; then
    kept=$(awk -v marker="$marker" 'found { print } $0 == marker { found = 1 }' "$doc")
  fi
  {
    cat <<'HEAD'
# Benchmarks: Baton side by side with Redis, etcd and ZooKeeper

Written by `benches/run.sh` (issues 6 and 14); rerun it to refresh the figures.
One load driver (`baton-bench`) drives every system with the same
scenarios and the same concurrency; each server runs pinned to one core
and the driver to the other. See `benches/README.md` for what each
scenario does and what each column means.

- **value**: the median over the runs (each run a pass over every
  target, so every target's runs come from the same stretches), in the
  row's unit. **spread**:
  (highest - lowest) / median of the runs: a wide spread means noise.
- **vs echo / vs redis / vs etcd**: value over that system's value for the
  same scenario and C. For memory (bytes per lock) and failover
  (milliseconds) lower is better, so a ratio below 1 is the good side.
- Redis has no wait queue: a contended acquire is `SET NX PX` retried at
  once until it takes, so its handoff figures are a race, not a queue.
  `redis-aof` is Redis with `appendfsync always`, the durable counterpart
  of Raft; etcd and ZooKeeper fsync every write as well. `etcd-cluster`
  is etcd as three members on the same core ("etcd x3"), the peer of
  `baton-raft`; `etcd` is the single node.
- **Floor**: what this machine allows a durable 3-node cluster, measured
  at the start of the same run (fsync in the work dir, loopback round
  trip); issue 14's goals compare Raft with it.

![cycles per second, log scale](benchmarks.svg)

## Results

HEAD
    cat "$work/results.md"
    echo
    echo "$marker"
    if [ -n "$kept" ]; then
      printf '%s\n' "$kept"
    fi
  } >"$doc.tmp"
  mv "$doc.tmp" "$doc"
  echo "run.sh: wrote $doc and $chart" >&2
fi
exit "$status"
