#!/usr/bin/env bash
# Interleaved pairs of actorps-bench over UCX with the server's shards on
# threads of their own (--shard-threads true: the plane's thread hands each
# request to the shard's thread) and where the transport puts them by
# default (auto: over ucx on CAF's scheduler, run by the plane's thread for
# the requests it receives), the same binary in the same minutes. Prints,
# per case, round and worker count, the median over the runs of each
# setting's median round and of the per-pair ratio own/auto (> 1: faster
# with auto), with the ratio's min and max; then each run's server peak
# RSS lines.
# Usage (from the top folder, after a release build in build/):
#   bash bench/shard-threads-pairs.sh [R] [-- extra actorps-bench flags]
# Defaults: as bench/caller-progress-pairs.sh; flags given after -- replace
# them (UCX_TLS=tcp in the environment puts the plane on TCP, as between
# hosts).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
defaults=("${pair_defaults[@]}")
pair_args "$@"
run_setting() {
  local flag=auto
  [[ $1 == own ]] && flag=true
  $app --modes dist --transport ucx --no-limits --shard-threads "$flag" \
    "${extra[@]}" 2>/dev/null >"$2"
  grep -E '^ucx server, [0-9]+ workers: peak RSS' "$2" | sed "s/^/$1: /" \
    >>"$out/rss.txt" || true
}
run_pairs own auto
echo
cat "$out/rss.txt"
