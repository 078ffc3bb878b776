#!/usr/bin/env bash
# What waiting for replacement servers costs a job that never loses one:
# with --recovery-timeout, a worker keeps a copy of every request until its
# shard answered (to send it again to a replacement). Runs the synthetic
# dist_async job (1 server with 2 shards, 1 worker process, push + pull of
# every key each round) R times over each transport, with and without
# --recovery-timeout, alternating, and prints per setting the median
# (min-max) of the worker's rounds per second. Two shapes: 4 keys of 1000
# floats (4 KB pushes) and 1 key of 1M floats (4 MB).
# Usage (after a release build in build/):
#   bash bench/recovery-cost.sh [R] [transports, default "caf ucx"]
set -euo pipefail
runs=${1:-5}
transports=${2:-caf ucx}
bin=build/apps
source "$(dirname "$0")/lib.sh"
# One job: transport, keys, size, rounds, recovery seconds (0: none).
# Prints rounds per second between the worker's first barrier and its end.
job() {
  local dir="$out/job"
  rm -rf "$dir" && mkdir -p "$dir"
  local extra=()
  if [[ $5 != 0 ]]; then
    extra=(--checkpoint-dir "$dir/ckpt" --checkpoint-every 1000000 --recovery-timeout "$5")
  fi
  "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token bench --mode dist_async \
    --workers 1 --servers 1 --transport "$1" --port-file "$dir/port" "${extra[@]}" \
    >"$dir/coord.log" 2>&1 &
  pids+=($!)
  local coord=$!
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  local port
  port=$(cat "$dir/port")
  "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token bench --shards 2 \
    >"$dir/server.log" 2>&1 &
  pids+=($!)
  "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token bench --mode dist_async \
    --keys "$2" --size "$3" --rounds "$4" >"$dir/worker.log" 2>&1
  wait "$coord"
  local t0 t1
  t0=$(grep "barrier held" "$dir/worker.log" | stamp)
  t1=$(grep "all values exact" "$dir/worker.log" | stamp)
  awk -v a="$t0" -v b="$t1" -v r="$4" 'BEGIN { printf "%.1f\n", r / (b - a) }'
}
summary() { sort -n | awk '{ v[NR] = $1 } END { printf "%.1f (%.1f-%.1f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
for t in $transports; do
  for shape in "4 1000 5000" "1 1000000 300"; do
    read -r keys size rounds <<<"$shape"
    : >"$out/off" && : >"$out/on"
    for ((r = 1; r <= runs; ++r)); do
      job "$t" "$keys" "$size" "$rounds" 0 >>"$out/off"
      job "$t" "$keys" "$size" "$rounds" 600 >>"$out/on"
    done
    echo "$t, $keys keys x $size floats: rounds/s without $(summary <"$out/off"), with --recovery-timeout $(summary <"$out/on")"
  done
done
