#!/usr/bin/env bash
# The client libraries' cycle rates against one single node, side by side:
# the Go client (clients/go/internal/cyclerate), the Rust client
# (crates/client/examples/cycle_rate.rs) and a raw socket (baton-bench's
# baton target: requests written straight on the socket, no client
# library). One release batond on a free loopback port serves all three,
# rounds alternating so that each sees the same machine; the figures are
# the medians of the rounds.
#
#   benches/client_rates.sh                 # 3 rounds of 5 s per load
#   ROUNDS=5 DURATION=3 benches/client_rates.sh
#
# Loads: c1 (one caller: acquire then release, one request in flight),
# c16 (16 callers on their own keys) and pipelined (256 callers, so up to
# 128 requests in flight on each of a client's two connections; the raw
# socket: 2 connections x depth 128). The raw socket's c1 and c16 use one
# connection per caller, as baton-bench does; the clients use their two.
# PIN=1 runs the node on CPU 0 and the drivers on CPU 1 (taskset).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}

export CARGO_INCREMENTAL=0
cargo build --release -q -p batond -p baton-bench
cargo build --release -q -p baton-client --example cycle_rate
(cd clients/go && go build -o ../../target/release/go-cyclerate ./internal/cyclerate)

server=() driver=()
if [ "${PIN:-0}" = 1 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server=(taskset -c 0) driver=(taskset -c 1)
fi
out=$(mktemp)
trap 'kill "$node" 2>/dev/null; rm -f "$out" "$out".*' EXIT
RUST_LOG=warn "${server[@]}" target/release/batond --listen 127.0.0.1:0 >"$out" 2>/dev/null &
node=$!
for _ in $(seq 100); do [ -s "$out" ] && break; sleep 0.1; done
addr=$(head -1 "$out" | cut -d' ' -f2)
echo "# batond at $addr, $ROUNDS rounds of ${DURATION} s per load" >&2

# raw: baton-bench's console table, as "<load> <cycles/s>" lines (its
# pipelined figure is requests/s: two per cycle).
raw() {
  "${driver[@]}" target/release/baton-bench --addr "$addr" --scenario uncontended,pipelined \
    --clients 1,16 --pipelined-clients 2 --depth 128 --duration "$DURATION" --warmup 1 --runs 1 2>/dev/null |
    awk '$1 == "baton" && $2 == "uncontended" && $3 == 1 { print "c1", $5 }
         $1 == "baton" && $2 == "uncontended" && $3 == 16 { print "c16", $5 }
         $1 == "baton" && $2 == "pipelined" { print "pipelined", $5 / 2 }'
}
for round in $(seq "$ROUNDS"); do
  echo "# round $round" >&2
  raw | sed 's/^/raw /' >>"$out.rates"
  "${driver[@]}" target/release/examples/cycle_rate "$addr" "$DURATION" | sed 's/^/rust /' >>"$out.rates"
  "${driver[@]}" target/release/go-cyclerate "$addr" "$DURATION" | sed 's/^/go /' >>"$out.rates"
done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "| load | raw socket | Rust client | Go client | Go / Rust |"
echo "|---|---:|---:|---:|---:|"
for load in c1 c16 pipelined; do
  r=$(awk -v l="$load" '$1 == "raw" && $2 == l { print $3 }' "$out.rates" | median)
  u=$(awk -v l="$load" '$1 == "rust" && $2 == l { print $3 }' "$out.rates" | median)
  g=$(awk -v l="$load" '$1 == "go" && $2 == l { print $3 }' "$out.rates" | median)
  awk -v l="$load" -v r="$r" -v u="$u" -v g="$g" 'BEGIN { printf "| %s | %d | %d | %d | %.2f |\n", l, r, u, g, g / u }'
done
