#!/usr/bin/env bash
# CPU time a round costs, all processes of a bench run together (user and
# system, from the rusage of the bench and every process it started and
# waited for): each build runs the same flags with FEW and with MANY
# measured rounds, and (cpu(MANY) - cpu(FEW)) / (MANY - FEW) is its CPU per
# round, set-up and tear-down cancelled. On a shared machine CPU time moves
# far less than wall time, so a change of per-key work that a busy day
# hides in the rounds' medians shows here. Runs alternate between the
# builds; prints each estimate and the medians.
# Usage: bash bench/cpu-per-round.sh OLD_BENCH NEW_BENCH [repeats, 3]
#          [FEW, 100] [MANY, 1100] [-- flags]
# Flags: one case, e.g. --modes dist --transport ucx --sizes none
# --many 10000x1 --round split --workers 1 --backlog 0 --compression none
# --no-limits (the default); --warmup and --rounds are set here.
set -euo pipefail
usage="usage: cpu-per-round.sh OLD_BENCH NEW_BENCH [repeats] [few] [many] [-- flags]"
old_bin=${1:?$usage}
new_bin=${2:?$usage}
repeats=${3:-3}
few=${4:-100}
many=${5:-1100}
shift $(($# < 5 ? $# : 5))
[[ "${1:-}" == "--" ]] && shift
flags=("$@")
((${#flags[@]} > 0)) || flags=(--modes dist --transport ucx --sizes none
  --many 10000x1 --round split --workers 1 --backlog 0 --compression none
  --no-limits)
((many > few)) || { echo "MANY must be above FEW" >&2; exit 2; }
source "$(dirname "$0")/lib.sh"
# CPU seconds (user + system) of one run of $1 with $2 measured rounds.
cpu_of() {
  /usr/bin/time -f "%U %S" -o "$out/time" "$1" "${flags[@]}" --warmup 3 \
    --rounds "$2" >"$out/run.txt" 2>&1 ||
    { echo "$1 failed:" >&2; tail -5 "$out/run.txt" >&2; exit 1; }
  awk '{ print $1 + $2 }' "$out/time"
}
# Microseconds of CPU a round of $1.
per_round() {
  local a b
  a=$(cpu_of "$1" "$few")
  b=$(cpu_of "$1" "$many")
  awk -v a="$a" -v b="$b" -v n=$((many - few)) 'BEGIN { printf "%.1f\n", (b - a) / n * 1e6 }'
}
: >"$out/old"
: >"$out/new"
for ((r = 1; r <= repeats; ++r)); do
  if ((r % 2 == 1)); then order=(old new); else order=(new old); fi
  for b in "${order[@]}"; do
    bin=$old_bin
    [[ $b == new ]] && bin=$new_bin
    us=$(per_round "$bin")
    echo "$us" >>"$out/$b"
    echo "repeat $r, $b build: $us us of CPU a round" >&2
  done
done
echo "old build: $(median <"$out/old") us of CPU a round, median (min-max)"
echo "new build: $(median <"$out/new") us of CPU a round, median (min-max)"
