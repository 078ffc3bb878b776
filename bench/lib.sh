# Helpers shared by the bench scripts (sourced): a scratch folder `out`,
# removed at exit with every process whose pid the script put in `pids`.
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT
# Seconds since midnight (UTC) of a log line's timestamp, and of now.
stamp() { sed -E 's/^[0-9-]+T([0-9]+):([0-9]+):([0-9.]+)Z.*/\1 \2 \3/' | awk '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 }'; }
now() { date -u +%H:%M:%S.%N | awk -F: '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 }'; }
# The median of the numbers on stdin, with their range.
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f-%.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
# Waits (at most 2 minutes) until file $1 has a line matching $2.
await() {
  for ((i = 0; i < 6000; ++i)); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.02
  done
  return 1
}
# The last round a worker with --progress logged in $1.
last_round() { grep -oE "round [0-9]+$" "$1" | tail -n 1 | awk '{ print $2 }'; }
