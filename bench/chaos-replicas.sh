#!/usr/bin/env bash
# Chaos runs of --replicas 2: R runs per transport of a dist_async job of 2
# servers (2 shards each) and 4 workers, each pushing and pulling 1000 keys
# of 100 floats per round, 50 rounds (synthetic job: the workers check the exact sums
# at the end, so a lost or doubled push fails them). At a random round
# between 5 and 35 of worker 0, one of the two servers (at random) is
# killed with SIGKILL. With --replicas 3 (4th argument): 3 servers, the
# first kill by round 25, and a second server (at random among the two
# left) is killed 5-14 rounds after the first. A run passes when every worker exits 0 with its
# values exact and the coordinator exits 0. Prints per run the seconds from
# the (first) kill to the coordinator's "took over" line and to worker 0's
# next round, then the count of passed runs and the medians; exits 1 if a
# run failed (ctest runs it once per transport).
# Usage (after a release build in build/; ACTORPS_BIN: another folder of
# the apps):
#   bash bench/chaos-replicas.sh [R] [transports, default "caf ucx"] [mode] [replicas, 2 or 3]
set -euo pipefail
runs=${1:-20}
transports=${2:-caf ucx}
mode=${3:-dist_async}
replicas=${4:-2}
nservers=$replicas
bin=${ACTORPS_BIN:-build/apps}
# (ctest's short run: fewer keys, ACTORPS_CHAOS_KEYS.)
keys=${ACTORPS_CHAOS_KEYS:-1000}
failed=0
source "$(dirname "$0")/lib.sh"
for t in $transports; do
  passed=0
  : >"$out/takeover" && : >"$out/next"
  for ((r = 1; r <= runs; ++r)); do
    dir="$out/$t-$r"
    mkdir -p "$dir"
    "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token chaos --mode "$mode" \
      --workers 4 --servers "$nservers" --transport "$t" --replicas "$replicas" --port-file "$dir/port" \
      >"$dir/coord.log" 2>&1 &
    pids+=($!)
    coord=$!
    for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.1; done
    port=$(cat "$dir/port")
    servers=()
    for ((s = 0; s < nservers; ++s)); do
      "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token chaos --shards 2 \
        >"$dir/s$s.log" 2>&1 &
      pids+=($!)
      servers+=($!)
    done
    workers=()
    for w in 0 1 2 3; do
      extra=()
      [[ $w == 0 ]] && extra=(--progress)
      "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token chaos --mode "$mode" \
        --keys "$keys" --size 100 --rounds 50 --timeout-ms 20000 "${extra[@]}" \
        >"$dir/w$w.log" 2>&1 &
      pids+=($!)
      workers+=($!)
    done
    # (With a second kill, the first comes by round 25, the second by 39.)
    at=$((5 + RANDOM % (replicas == 3 ? 21 : 31)))
    victim=${servers[$((RANDOM % nservers))]}
    # (Waits for worker 0's progress line, at most a minute.)
    reach() {
      for ((i = 0; i < 3000; ++i)); do
        grep -q "round $1$" "$dir/w0.log" 2>/dev/null && break
        sleep 0.02
      done
    }
    reach "$at"
    kill -9 "$victim"
    killed=$(now)
    victims=("$victim")
    if ((replicas == 3)); then
      left=()
      for s in "${servers[@]}"; do [[ $s == "$victim" ]] || left+=("$s"); done
      second=${left[$((RANDOM % 2))]}
      reach $((at + 5 + RANDOM % 10))
      kill -9 "$second"
      victims+=("$second")
    fi
    ok=1
    for w in 0 1 2 3; do
      if ! wait "${workers[$w]}" || ! grep -q "values exact" "$dir/w$w.log"; then ok=0; fi
    done
    wait "$coord" || ok=0
    for s in "${servers[@]}"; do
      [[ " ${victims[*]} " == *" $s "* ]] || wait "$s" || ok=0
    done
    took=$(grep -m 1 "took over" "$dir/coord.log" | stamp || true)
    next=$(grep -E "round $((at + 1))$" "$dir/w0.log" | stamp || true)
    if [[ $ok == 1 && -n $took ]]; then
      passed=$((passed + 1))
      awk -v a="$killed" -v b="$took" 'BEGIN { printf "%.3f\n", b - a }' >>"$out/takeover"
      awk -v a="$killed" -v b="$next" 'BEGIN { printf "%.3f\n", b - a }' >>"$out/next"
      echo "run $r ($t): killed ${#victims[@]} (first at round $at), took over after $(tail -n 1 "$out/takeover") s, next round after $(tail -n 1 "$out/next") s" >&2
    else
      failed=1
      echo "run $r ($t): FAILED; its logs:" >&2
      tail -n 20 "$dir"/*.log >&2
    fi
  done
  echo "$t, $mode, $replicas copies: $passed of $runs runs kept every sum exact; kill to takeover $(median <"$out/takeover") s, kill to worker 0's next round $(median <"$out/next") s"
done
exit "$failed"
