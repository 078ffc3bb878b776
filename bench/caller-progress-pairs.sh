#!/usr/bin/env bash
# Interleaved pairs of actorps-bench over UCX with the waiting caller's own
# receiving off (ACTORPS_UCX_CALLER_PROGRESS=0: the plane's thread receives
# every reply and wakes the caller) and on (the default), the same binary
# in the same minutes. Prints, per case, round and worker count, the median
# over the runs of each setting's median round and of the per-pair ratio
# off/on (> 1: faster with it on), with the ratio's min and max.
# Usage (from the top folder, after a release build in build/):
#   bash bench/caller-progress-pairs.sh [R] [-- extra actorps-bench flags]
# Defaults: 5 pairs of --sizes 4K,256K,4M --many none --round split,fused
# --workers 1,2 --backlog 0 --compression none --warmup 3 --rounds 100;
# flags given after -- replace all of these (UCX_TLS=tcp in the
# environment puts the plane on TCP, as between hosts).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
defaults=("${pair_defaults[@]}")
pair_args "$@"
run_setting() {
  local flag=1
  [[ $1 == off ]] && flag=0
  ACTORPS_UCX_CALLER_PROGRESS=$flag $app --modes dist --transport ucx \
    --no-limits "${extra[@]}" 2>/dev/null >"$2"
}
run_pairs off on
