#!/usr/bin/env bash
# Interleaved pairs of actorps-bench over UCX with the server's shards on
# threads of their own (--shard-threads true, the default: the plane's
# thread hands each request to the shard's thread) and on CAF's scheduler
# (false: the plane's thread runs a shard for the requests it receives),
# the same binary in the same minutes. Prints, per case, round and worker
# count, the median over the runs of each setting's median round and of
# the per-pair ratio own/plane (> 1: faster with the plane's thread), with
# the ratio's min and max; then each run's server peak RSS lines.
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
  local flag=false
  [[ $1 == own ]] && flag=true
  $app --modes dist --transport ucx --no-limits --shard-threads "$flag" \
    "${extra[@]}" 2>/dev/null >"$2"
  grep -E '^ucx server, [0-9]+ workers: peak RSS' "$2" | sed "s/^/$1: /" \
    >>"$out/rss.txt" || true
}
run_pairs own plane
echo
cat "$out/rss.txt"
