#!/usr/bin/env bash
# Paired runs of the issue 25 yardstick, rows against dense in dist mode,
# for two builds side by side (an A/B of a change): per pair, the old
# build's actorps-bench, then the new one's, each timing a split push+pull
# of one 64 KB key and a push_rows + pull_rows round of 1000 distinct random
# rows x 16 floats of a 10M-row table (the same bytes of values) in one run.
# Prints per run the build, both medians (us) and rows / dense, then per
# build the median of those ratios and of the row round, and the median of
# the per-pair row rounds old / new. The build run second in a pair was
# seen to be the slower one whichever it was (docs/benchmarks.md, "Large
# blocks on cache lines"): odd pairs run the old build first, even pairs
# the new one. Both cases of a run take turns round by round (--interleave,
# 502fdca and later: older builds refuse it), so that a busy moment slows
# both alike (docs/benchmarks.md, "Rows against dense, interleaved").
# Usage (release builds; extra flags go to both, after the defaults):
#   bash bench/rows-pairs.sh OLD_BENCH NEW_BENCH [pairs, 5] [rounds, 1500] [-- flags]
set -euo pipefail
old_bin=${1:?usage: rows-pairs.sh OLD_BENCH NEW_BENCH [pairs] [rounds] [-- flags]}
new_bin=${2:?usage: rows-pairs.sh OLD_BENCH NEW_BENCH [pairs] [rounds] [-- flags]}
pairs=${3:-5}
rounds=${4:-1500}
shift $(($# < 4 ? $# : 4))
[[ "${1:-}" == "--" ]] && shift
source "$(dirname "$0")/lib.sh"
one() {
  "$1" --modes dist --transport ucx --shards 1 --sizes 64K --many none \
    --rows 10000000x16x1000 --round split --workers 1 --backlog 0 \
    --compression none --warmup 3 --rounds "$rounds" --no-limits --interleave \
    "${@:2}" 2>&1 |
    awk '/^[a-z]+ +64 KB +split +1 / && NF > 9 && !d { d = $6 }
         /^[a-z]+ +1000 rows x 16/ && NF > 11 && !r { r = $11 }
         END { if (!d || !r) exit 1; printf "%s %s %.3f\n", d, r, r / d }'
}
rows=$out/rows.txt
echo "build dense_us rows_us rows/dense"
run_build() {
  local line
  line=$(one "$3" "${flags[@]}") || { echo "$1: the bench failed" >&2; exit 1; }
  echo "$1 $line" | tee -a "$rows"
}
flags=("$@")
alternating_pairs "$pairs" "$old_bin" "$new_bin"
for b in old new; do
  echo "$b: rows/dense $(awk -v b=$b '$1 == b { print $4 }' "$rows" | median)," \
    "row round $(awk -v b=$b '$1 == b { print $3 }' "$rows" | median) us"
done
echo "row round old/new per pair: $(awk '{ t[$1] = $3 } NR % 2 == 0 { print t["old"] / t["new"] }' "$rows" | median)"
