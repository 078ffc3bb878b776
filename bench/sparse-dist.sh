#!/usr/bin/env bash
# The sparse job (actorps-worker --job sparse) in a dist job on this
# machine: 1 coordinator, 1 server, W worker processes, over each transport,
# R rounds (caf then ucx in each). Prints every run's rank 0 line (held-out
# loss against the planted weights', its rows/s and bytes moved) and the
# sum of the workers' rows/s.
# Usage (after a release build in build/):
#   bash bench/sparse-dist.sh [R] [W] [-- extra flags for every worker]
set -euo pipefail
runs=${1:-3}
workers=${2:-2}
shift 2 || shift $# || true
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
bin=build/apps
source "$(dirname "$0")/lib.sh"
run() { # transport
  rm -f "$out/port" "$out"/w*.log
  "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token sparse \
    --mode dist_async --workers "$workers" --servers 1 --transport "$1" \
    --port-file "$out/port" --log-level error >/dev/null 2>&1 &
  pids+=($!)
  local coord=$!
  for _ in $(seq 100); do [[ -s $out/port ]] && break; sleep 0.1; done
  local addr="127.0.0.1:$(cat "$out/port")"
  "$bin/actorps-server" --coordinator "$addr" --token sparse --log-level error \
    >/dev/null 2>&1 &
  pids+=($!)
  local ws=()
  for ((w = 0; w < workers; ++w)); do
    "$bin/actorps-worker" --coordinator "$addr" --token sparse --job sparse \
      "${extra[@]}" >"$out/w$w.log" 2>&1 &
    ws+=($!)
  done
  for p in "${ws[@]}"; do wait "$p"; done
  wait "$coord" || true
  grep -h "held-out loss" "$out"/w*.log | sed 's/^.*rank 0: /  rank 0: /'
  grep -h "rows/s" "$out"/w*.log | sed 's/.* \([0-9]*\) rows\/s.*/\1/' \
    | awk -v t="$1" '{ s += $1 } END { printf "  %s: all workers %.0f rows/s\n", t, s }'
}
for ((r = 1; r <= runs; ++r)); do
  for t in caf ucx; do
    echo "run $r, $t:"
    run "$t"
  done
done
