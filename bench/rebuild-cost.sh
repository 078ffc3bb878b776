#!/usr/bin/env bash
# Rebuilding a replica (--replicas 2): R runs per transport of a dist_async
# job of 2 servers (1 shard each) and 2 workers over K keys of S floats
# (default 16 x 1M floats: a 64 MB model, 32 MB per shard). At worker 0's
# round 5 one server is killed; once its backup took over, a new server is
# started, which rebuilds the copies of both shards (each primary sends its
# whole state); 5 rounds later the other server is killed too, and the job
# (N rounds, default 60) must end with every sum exact. Prints per run: the seconds from the new server's
# start to the coordinator's "rejoined" line (the rebuild), worker 0's
# longest gap between two rounds from that start to 1 s after "rejoined"
# (the pause the copy causes), and its median gap between rounds before
# the first kill (a normal round); then the medians.
# Usage (after a release build in build/; ACTORPS_BIN: another folder of
# the apps):
#   bash bench/rebuild-cost.sh [R] [transports, default "caf ucx"] [K] [S] [N]
set -euo pipefail
runs=${1:-3}
transports=${2:-caf ucx}
keys=${3:-16}
size=${4:-1000000}
rounds_total=${5:-60}
bin=${ACTORPS_BIN:-build/apps}
failed=0
source "$(dirname "$0")/lib.sh"
# Worker 0's round times (seconds) from its log $1.
rounds() { grep -E "round [0-9]+$" "$1" | stamp; }
for t in $transports; do
  : >"$out/rebuild" && : >"$out/pause" && : >"$out/normal"
  passed=0
  for ((r = 1; r <= runs; ++r)); do
    dir="$out/$t-$r"
    mkdir -p "$dir"
    "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token rebuild --mode dist_async \
      --workers 2 --servers 2 --transport "$t" --replicas 2 --port-file "$dir/port" \
      >"$dir/coord.log" 2>&1 &
    pids+=($!)
    coord=$!
    await "$dir/port" "." || { echo "no coordinator" >&2; exit 1; }
    port=$(cat "$dir/port")
    servers=()
    for s in 0 1; do
      "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token rebuild --shards 1 \
        >"$dir/s$s.log" 2>&1 &
      pids+=($!)
      servers+=($!)
    done
    workers=()
    for w in 0 1; do
      extra=()
      [[ $w == 0 ]] && extra=(--progress)
      "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token rebuild --mode dist_async \
        --keys "$keys" --size "$size" --rounds "$rounds_total" --timeout-ms 60000 "${extra[@]}" \
        >"$dir/w$w.log" 2>&1 &
      pids+=($!)
      workers+=($!)
    done
    ok=1
    await "$dir/w0.log" "round 5$" || ok=0
    kill -9 "${servers[0]}"
    await "$dir/coord.log" "took over" || ok=0
    started=$(now)
    "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token rebuild --shards 1 \
      >"$dir/s2.log" 2>&1 &
    pids+=($!)
    rebuilder=$!
    await "$dir/coord.log" "rejoined" || ok=0
    rejoined=$(grep "rejoined" "$dir/coord.log" | stamp || true)
    # Five more rounds, then the other server dies too.
    last=$(last_round "$dir/w0.log")
    await "$dir/w0.log" "round $((last + 5))$" || ok=0
    kill -9 "${servers[1]}"
    for w in 0 1; do
      if ! wait "${workers[$w]}" || ! grep -q "values exact" "$dir/w$w.log"; then ok=0; fi
    done
    wait "$coord" || ok=0
    wait "$rebuilder" || ok=0
    [[ $(grep -c "took over" "$dir/coord.log") -ge 2 ]] || ok=0
    if [[ $ok == 1 && -n $rejoined ]]; then
      passed=$((passed + 1))
      awk -v a="$started" -v b="$rejoined" 'BEGIN { printf "%.3f\n", b - a }' >>"$out/rebuild"
      rounds "$dir/w0.log" | awk -v a="$started" -v b="$rejoined" \
        'NR > 1 && $1 >= a && prev <= b + 1 { g = $1 - prev; if (g > m) m = g } { prev = $1 } END { printf "%.3f\n", m }' >>"$out/pause"
      rounds "$dir/w0.log" | awk 'NR > 1 && NR <= 6 { print $1 - prev } { prev = $1 }' | sort -n |
        awk '{ v[NR] = $1 } END { printf "%.3f\n", v[int((NR + 1) / 2)] }' >>"$out/normal"
      echo "run $r ($t): rebuilt in $(tail -n 1 "$out/rebuild") s, longest gap $(tail -n 1 "$out/pause") s, normal round $(tail -n 1 "$out/normal") s" >&2
    else
      failed=1
      echo "run $r ($t): FAILED; its logs:" >&2
      tail -n 20 "$dir"/*.log >&2
    fi
  done
  echo "$t, $keys x $size floats: $passed of $runs runs; rebuild $(median <"$out/rebuild") s, longest gap between worker 0's rounds during it $(median <"$out/pause") s, normal round $(median <"$out/normal") s"
done
exit "$failed"
