#!/usr/bin/env bash
# Runs actorps-bench R times with --modes dist --transport caf,ucx (each run
# measures both transports back to back, so the two see the same machine)
# and prints, per case and worker count, the median over the runs of each
# transport's median round and of the ratio caf/ucx taken within each run
# (> 1: ucx is faster). Usage (from the top folder, after a release build
# in build/):
#   bash bench/transport-pairs.sh [R] [-- extra actorps-bench flags]
# Defaults: 5 runs of --sizes 4K,256K,4M,64M --many 1000x1024,10000x1
# --round split --workers 1,2 --backlog 0 --compression none --warmup 3
# --rounds 20; flags given after -- replace all of these.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
defaults=(--sizes 4K,256K,4M,64M --many 1000x1024,10000x1 --round split
          --workers 1,2 --backlog 0 --compression none --warmup 3 --rounds 20)
pair_args "$@"
for ((r = 1; r <= runs; ++r)); do
  $app --modes dist --transport caf,ucx --no-limits "${extra[@]}" \
    2>/dev/null >"$out/run-$r.txt"
  echo "run $r of $runs done" >&2
done
# Per case: the median (over runs) of each transport's median round and of
# the per-run ratio caf/ucx, with the ratio's min and max (the caf rows say
# "dist" in their mode column).
for ((r = 1; r <= runs; ++r)); do
  bench_rows "$out/run-$r.txt" "$r"
done | pair_table dist ucx caf ucx
