#!/usr/bin/env bash
# Chaos runs of --replicas 2 with rebuilt replicas: R runs per transport of
# a dist_async job of 3 servers (2 shards each) and 4 workers, each pushing
# and pulling 1000 keys of 100 floats per round, 150 rounds (synthetic job:
# the workers check the exact sums at the end). C times per run (default
# 3): 10 rounds after the job started or the last rebuild, a random live
# server is killed with SIGKILL and a new server is started, which (once
# the coordinator saw the death and the dead one's backups took over, if it
# held primaries) rebuilds the missing copies. A run passes when every
# worker exits 0 with its values exact, every rebuild completed, and the
# coordinator exits 0. Prints per run the seconds from each kill (and new
# server's start) to the coordinator's "rejoined" line, then the count of passed runs
# and the median; exits 1 if a run failed.
# Usage (after a release build in build/; ACTORPS_BIN: another folder of
# the apps):
#   bash bench/chaos-rebuild.sh [R] [transports, default "caf ucx"] [C] [mode]
set -euo pipefail
runs=${1:-5}
transports=${2:-caf ucx}
cycles=${3:-3}
mode=${4:-dist_async}
bin=${ACTORPS_BIN:-build/apps}
failed=0
source "$(dirname "$0")/lib.sh"
for t in $transports; do
  passed=0
  : >"$out/rebuild"
  for ((r = 1; r <= runs; ++r)); do
    dir="$out/$t-$r"
    mkdir -p "$dir"
    "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token chaos --mode "$mode" \
      --workers 4 --servers 3 --transport "$t" --replicas 2 --port-file "$dir/port" \
      >"$dir/coord.log" 2>&1 &
    pids+=($!)
    coord=$!
    await "$dir/port" "." || { echo "no coordinator" >&2; exit 1; }
    port=$(cat "$dir/port")
    # Live servers: their pids (a killed one leaves the list).
    live=()
    start_server() {
      "$bin/actorps-server" --coordinator "127.0.0.1:$port" --token chaos --shards 2 \
        >"$dir/s$1.log" 2>&1 &
      pids+=($!)
      live+=($!)
    }
    for s in 0 1 2; do start_server "$s"; done
    workers=()
    for w in 0 1 2 3; do
      extra=()
      [[ $w == 0 ]] && extra=(--progress)
      "$bin/actorps-worker" --coordinator "127.0.0.1:$port" --token chaos --mode "$mode" \
        --keys 1000 --size 100 --rounds 150 --timeout-ms 20000 "${extra[@]}" \
        >"$dir/w$w.log" 2>&1 &
      pids+=($!)
      workers+=($!)
    done
    ok=1
    next=10
    for ((c = 1; c <= cycles && ok == 1; ++c)); do
      await "$dir/w0.log" "round $next$" || { ok=0; break; }
      i=$((RANDOM % ${#live[@]}))
      kill -9 "${live[$i]}"
      live=("${live[@]:0:$i}" "${live[@]:$((i + 1))}")
      # The new server starts at once: it tries to join again until the
      # coordinator saw the death and (if the dead server held primaries)
      # their backups took over.
      started=$(now)
      start_server "$((2 + c))"
      for ((k = 0; k < 6000; ++k)); do
        [[ $(grep -c "rejoined" "$dir/coord.log" || true) -ge $c ]] && break
        sleep 0.02
      done
      if [[ $(grep -c "rejoined" "$dir/coord.log" || true) -lt $c ]]; then
        ok=0
        break
      fi
      rejoined=$(grep "rejoined" "$dir/coord.log" | tail -n 1 | stamp)
      awk -v a="$started" -v b="$rejoined" 'BEGIN { printf "%.3f\n", b - a }' >>"$out/rebuild"
      next=$(($(last_round "$dir/w0.log") + 10))
    done
    for w in 0 1 2 3; do
      if ! wait "${workers[$w]}" || ! grep -q "values exact" "$dir/w$w.log"; then ok=0; fi
    done
    wait "$coord" || ok=0
    for s in "${live[@]}"; do wait "$s" || ok=0; done
    if [[ $ok == 1 ]]; then
      passed=$((passed + 1))
      echo "run $r ($t): $cycles kills and rebuilds, sums exact" >&2
    else
      failed=1
      echo "run $r ($t): FAILED; its logs (kept in ${ACTORPS_KEEP:-nowhere}):" >&2
      tail -n 20 "$dir"/*.log >&2
      [[ -z ${ACTORPS_KEEP:-} ]] || cp -r "$dir" "$ACTORPS_KEEP/"
    fi
  done
  echo "$t, $mode: $passed of $runs runs with $cycles kills and rebuilds kept every sum exact; kill to rejoined $(median <"$out/rebuild") s"
done
exit "$failed"
