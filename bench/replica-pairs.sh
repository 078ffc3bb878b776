#!/usr/bin/env bash
# Paired runs of what --replicas 2 costs against --replicas 1, for two builds
# side by side (an A/B of a change): per pair, the old build's job with 1
# and 2 copies, then the new build's. A job is the synthetic dist_async job
# of bench/replica-cost.sh (2 servers of 1 shard, 1 worker, one key pushed
# and pulled per round, ucx). Prints per job the build, the copies, the
# worker's rounds per second between its first barrier and its end, and
# (with GNU time installed, Debian's "time") the CPU seconds (user +
# system) of the job's servers and worker, start-up included.
# Usage (release builds):
#   bash bench/replica-pairs.sh OLD_APPS NEW_APPS [pairs, 5] [floats, 1000000] [rounds, 1000]
set -euo pipefail
old_apps=${1:?usage: replica-pairs.sh OLD_APPS NEW_APPS}
new_apps=${2:?usage: replica-pairs.sh OLD_APPS NEW_APPS}
pairs=${3:-5}
floats=${4:-1000000}
rounds=${5:-1000}
source "$(dirname "$0")/lib.sh"
timed=()
[[ -x /usr/bin/time ]] && timed=(/usr/bin/time -f "%U %S")
job() {
  local bin=$1 copies=$2 dir="$out/job"
  rm -rf "$dir" && mkdir -p "$dir"
  "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token bench --mode dist_async \
    --workers 1 --servers 2 --transport ucx --replicas "$copies" --port-file "$dir/port" \
    >"$dir/coord.log" 2>&1 &
  pids+=($!)
  local coord=$!
  await "$dir/port" . || { echo "no coordinator" >&2; exit 1; }
  local port
  port=$(cat "$dir/port")
  for s in 1 2; do
    ${timed[@]+"${timed[@]}" -o "$dir/cpu$s"} "$bin/actorps-server" \
      --coordinator "127.0.0.1:$port" --token bench --shards 1 >"$dir/server$s.log" 2>&1 &
    pids+=($!)
  done
  ${timed[@]+"${timed[@]}" -o "$dir/cpuw"} "$bin/actorps-worker" \
    --coordinator "127.0.0.1:$port" --token bench --mode dist_async \
    --keys 1 --size "$floats" --rounds "$rounds" >"$dir/worker.log" 2>&1
  wait "$coord"
  wait # the servers, so that their CPU is written
  local t0 t1 cpu=-
  t0=$(grep "barrier held" "$dir/worker.log" | stamp)
  t1=$(grep "all values exact" "$dir/worker.log" | stamp)
  [[ ${#timed[@]} -gt 0 ]] && cpu=$(cat "$dir"/cpu* | awk '{ c += $1 + $2 } END { printf "%.2f", c }')
  awk -v a="$t0" -v b="$t1" -v r="$rounds" -v c="$cpu" 'BEGIN { printf "%.1f %s\n", r / (b - a), c }'
}
echo "build copies rounds/s cpu_s"
for ((i = 1; i <= pairs; ++i)); do
  for b in old new; do
    bin=$old_apps
    [[ $b == new ]] && bin=$new_apps
    # (Odd pairs run 1 copy first, even pairs 2: a job run right after
    # another can be the slower one, docs/benchmarks.md.)
    order="1 2"
    ((i % 2 == 0)) && order="2 1"
    for c in $order; do
      echo "$b $c $(job "$bin" "$c")"
    done
  done
done
