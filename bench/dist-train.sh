#!/usr/bin/env bash
# The Fashion-MNIST job in dist async mode (1 server, W worker processes on
# this machine) over each transport, against local async training in the
# same run. Each of R rounds runs local, then caf, then ucx; per setting it
# prints the median (min-max) of rank 0's last-epoch test accuracy, of
# its samples/s over the last three epochs (from the CSV rank 0 writes),
# and of the CPU seconds (user + system) all of the setting's processes
# used for the whole job (GNU time), the same work in every setting.
# Usage (after a release build in build/):
#   bash bench/dist-train.sh [R] [W] [-- extra flags for every training run]
# SERVER_FLAGS: extra flags for the server (e.g. "--shard-threads false").
set -euo pipefail
runs=${1:-3}
workers=${2:-4}
shift 2 || shift $# || true
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
read -r -a server_extra <<<"${SERVER_FLAGS:-}"
bin=${BIN:-build/apps} # BIN: another build's apps (paired runs)
out=$(mktemp -d)
pids=()
cleanup() {
  # Each app runs under GNU time: its child goes too.
  for p in "${pids[@]}"; do
    kill -9 $(pgrep -P "$p") "$p" 2>/dev/null || true
  done
  rm -rf "$out"
}
trap cleanup EXIT
# GNU time, appending "user system" seconds of the command to $cpu.
timed=(/usr/bin/time -a -f "%U %S" -o)
# The sum of the seconds in file $1 (time's other lines, such as a non-zero
# exit status, are skipped).
cpu_sum() { awk '/^[0-9.]+ [0-9.]+$/ { s += $1 + $2 } END { printf "%.1f", s }' "$1"; }
cpu_lines() { grep -cE '^[0-9.]+ [0-9.]+$' "$1" || true; }
# Accuracy and mean samples/s of the last three epochs of CSV $1.
last3() { tail -n 3 "$1" | awk -F, '{ s += $4; a = $3 } END { print a, s / NR }'; }
dist_run() { # transport dir
  local port_file="$2/port"
  local cpu="$2/cpu"
  "${timed[@]}" "$cpu" "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token bench \
    --mode dist_async --workers "$workers" --servers 1 --transport "$1" \
    --port-file "$port_file" --log-level error >/dev/null 2>&1 &
  pids+=($!)
  local coord=$!
  for _ in $(seq 100); do [[ -s $port_file ]] && break; sleep 0.1; done
  local addr="127.0.0.1:$(cat "$port_file")"
  "${timed[@]}" "$cpu" "$bin/actorps-server" --coordinator "$addr" --token bench --log-level error \
    "${server_extra[@]}" >/dev/null 2>&1 &
  pids+=($!)
  local ws=()
  for ((w = 0; w < workers; ++w)); do
    "${timed[@]}" "$cpu" "$bin/actorps-worker" --coordinator "$addr" --token bench --job mnist \
      --log-level error --out "$2/w$w" "${extra[@]}" >/dev/null &
    ws+=($!)
  done
  for p in "${ws[@]}"; do wait "$p"; done
  wait "$coord" || true
  cat "$2"/w*/dist_async.csv >/dev/null
  # The server exits once the coordinator told it the job is done.
  for _ in $(seq 100); do
    (($(cpu_lines "$cpu") >= workers + 2)) && break
    sleep 0.1
  done
  echo "$(last3 "$(ls "$2"/w*/dist_async.csv | head -n 1)") $(cpu_sum "$cpu")"
}
for ((r = 1; r <= runs; ++r)); do
  cpu="$out/local-$r.cpu"
  "${timed[@]}" "$cpu" "$bin/actorps-train" --workers "$workers" "${extra[@]}" \
    --out "$out/local-$r" >/dev/null
  echo "$(last3 "$out/local-$r/async.csv") $(cpu_sum "$cpu")" >>"$out/local.txt"
  for t in caf ucx; do
    mkdir -p "$out/$t-$r"
    dist_run "$t" "$out/$t-$r" >>"$out/$t.txt"
  done
  echo "round $r: local $(tail -n1 "$out/local.txt"), caf $(tail -n1 "$out/caf.txt"), ucx $(tail -n1 "$out/ucx.txt") (accuracy, samples/s, CPU s)" >&2
done
stats() { # file column
  cut -d' ' -f"$2" "$1" | sort -g | awk '
    { v[NR] = $1 } END { m = int((NR + 1) / 2); print v[m], v[1], v[NR] }'
}
for s in local caf ucx; do
  read -r am alo ahi < <(stats "$out/$s.txt" 1)
  read -r rm rlo rhi < <(stats "$out/$s.txt" 2)
  read -r cm clo chi < <(stats "$out/$s.txt" 3)
  printf '%-6s accuracy %.4f (%.4f-%.4f)  samples/s %.0f (%.0f-%.0f)  CPU s %.1f (%.1f-%.1f)\n' \
    "$s" "$am" "$alo" "$ahi" "$rm" "$rlo" "$rhi" "$cm" "$clo" "$chi"
done
