#!/usr/bin/env bash
# What --replicas 2 costs a job that loses no server: every push is applied
# by its primary and by the backup on the other server before it is
# acknowledged. Runs the synthetic dist_async job (2 servers with 1 shard
# each, 1 worker process, push + pull of every key each round) R times over
# each transport with --replicas 1 and 2, alternating, and prints per shape
# the median (min-max) of the worker's rounds per second and the ratio of
# the medians. Shapes: 1 key of 1000 floats (4 KB), 1 key of 1M floats
# (4 MB, one slice: one primary and its backup), 1 key of 16M floats
# (64 MB, 16 slices over both servers).
# With a third argument "1 2 3": --replicas 3 too, and every job (also
# those with 1 and 2 copies) has 3 servers; 64 MB then spreads over all 3.
# Usage (after a release build in build/):
#   bash bench/replica-cost.sh [R] [transports, default "caf ucx"] [copies, default "1 2"]
set -euo pipefail
runs=${1:-5}
transports=${2:-caf ucx}
copies=${3:-1 2}
nservers=2
[[ " $copies " == *" 3 "* ]] && nservers=3
bin=build/apps
source "$(dirname "$0")/lib.sh"
# One job: transport, keys, size, rounds, replicas. Prints rounds per second
# between the worker's first barrier and its end.
job() {
  local dir="$out/job"
  rm -rf "$dir" && mkdir -p "$dir"
  "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token bench --mode dist_async \
    --workers 1 --servers "$nservers" --transport "$1" --replicas "$5" --port-file "$dir/port" \
    >"$dir/coord.log" 2>&1 &
  pids+=($!)
  local coord=$!
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  local port
  port=$(cat "$dir/port")
  for ((s = 1; s <= nservers; ++s)); do
    "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token bench --shards 1 \
      >"$dir/server$s.log" 2>&1 &
    pids+=($!)
  done
  "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token bench --mode dist_async \
    --keys "$2" --size "$3" --rounds "$4" >"$dir/worker.log" 2>&1
  wait "$coord"
  local t0 t1
  t0=$(grep "barrier held" "$dir/worker.log" | stamp)
  t1=$(grep "all values exact" "$dir/worker.log" | stamp)
  awk -v a="$t0" -v b="$t1" -v r="$4" 'BEGIN { printf "%.2f\n", r / (b - a) }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
summary() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
for t in $transports; do
  for shape in "1 1000 5000" "1 1000000 300" "1 16000000 20"; do
    read -r keys size rounds <<<"$shape"
    for c in $copies; do : >"$out/c$c"; done
    for ((r = 1; r <= runs; ++r)); do
      for c in $copies; do
        job "$t" "$keys" "$size" "$rounds" "$c" >>"$out/c$c"
      done
    done
    line="$t, $keys x $size floats, $nservers servers: rounds/s"
    base=$(median <"$out/c1")
    for c in $copies; do
      ratio=$(awk -v a="$base" -v b="$(median <"$out/c$c")" 'BEGIN { printf "%.2f", a / b }')
      line+=" --replicas $c $(summary <"$out/c$c") (x$ratio)"
    done
    echo "$line; (xN: time per round against --replicas 1)"
  done
done
