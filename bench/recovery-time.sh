#!/usr/bin/env bash
# How long a job stands still when a server is killed and a new one is
# started at once: R runs of a job (mode M, default dist_async) of 2 servers
# (2 shards each) and W workers (default 1) pushing and pulling K keys of S
# floats (sliced over both servers),
# checkpointing at every barrier; once the worker passed round 20, server 1
# is killed and a replacement started. Prints per run the seconds from the
# kill to the coordinator's "was replaced" line (the new process's start,
# its join, the restore of its half of the newest checkpoint, the new
# routing) and from that line to the first worker's next round (in
# dist_sync and dist_ssp the replacement first waits for every worker's
# clocks), then the medians; a run whose worker fails stops the script.
# Usage (after a release build in build/):
#   bash bench/recovery-time.sh [R] [K] [S] [transport] [M] [W]
set -euo pipefail
runs=${1:-5}
keys=${2:-4}
size=${3:-4000000}
transport=${4:-ucx}
mode=${5:-dist_async}
workers=${6:-1}
bin=build/apps
source "$(dirname "$0")/lib.sh"
now() { date +%s.%N; }
: >"$out/times"
: >"$out/resumed"
for ((r = 1; r <= runs; ++r)); do
  dir="$out/run-$r"
  mkdir -p "$dir"
  "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token bench --mode "$mode" \
    --workers "$workers" --servers 2 --transport "$transport" --port-file "$dir/port" \
    --checkpoint-dir "$dir/ckpt" --checkpoint-every 0 --recovery-timeout 120 \
    >"$dir/coord.log" 2>&1 &
  pids+=($!)
  coord=$!
  for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
  port=$(cat "$dir/port")
  "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token bench --shards 2 \
    >"$dir/s0.log" 2>&1 &
  pids+=($!)
  "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token bench --shards 2 \
    >"$dir/s1.log" 2>&1 &
  pids+=($!)
  victim=$!
  # Progress lines from the first worker only (nobody reads the others').
  others=()
  for ((w = 1; w < workers; ++w)); do
    "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token bench \
      --keys "$keys" --size "$size" --rounds 60 --tolerate-deaths \
      >"$dir/worker-$w.log" 2>&1 &
    pids+=($!)
    others+=($!)
  done
  "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token bench \
    --keys "$keys" --size "$size" --rounds 60 --progress --tolerate-deaths \
    >"$dir/worker.log" 2>&1 &
  pids+=($!)
  worker=$!
  until grep -q "round 20$" "$dir/worker.log"; do sleep 0.05; done
  kill -9 "$victim"
  # The kill's time in the logs' clock (UTC seconds since midnight).
  killed=$(date -u +%H:%M:%S.%N | awk -F: '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 }')
  "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token bench --shards 2 \
    >"$dir/s2.log" 2>&1 &
  pids+=($!)
  wait "$worker"
  for p in "${others[@]}"; do wait "$p"; done
  wait "$coord"
  replaced=$(grep "was replaced" "$dir/coord.log" | stamp)
  awk -v a="$killed" -v b="$replaced" 'BEGIN { printf "%.3f\n", b - a }' >>"$out/times"
  grep -E "round [0-9]+$" "$dir/worker.log" | stamp |
    awk -v r="$replaced" '$1 > r { printf "%.3f\n", $1 - r; exit }' >>"$out/resumed"
  echo "run $r: $(tail -n 1 "$out/times") s from the kill to the replacement," \
    "$(tail -n 1 "$out/resumed") s from there to the next round ($transport, $mode)" >&2
done
echo "$transport, $mode, $workers workers, $keys keys x $size floats:" \
  "kill to replaced $(median <"$out/times") s," \
  "replaced to next round $(median <"$out/resumed") s (medians of $runs)"
