#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for
# SECONDS (default 20) from its seed corpus in tests/fuzz/corpus/. A crash,
# a leak, a hang (> 10 s), more than 2 GB resident or one allocation over
# 512 MB is a finding: the script fails and names the input it saved.
#   bash .ci/fuzz.sh [SECONDS]        e.g. bash .ci/fuzz.sh 600 for a long run
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-20}"
dir="$root/build-fuzz"
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S "$root" -B "$dir" -DCMAKE_CXX_COMPILER=clang++ -DACTORPS_FUZZ=ON \
  -DACTORPS_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" --target actorps_fuzzers -j "$jobs"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
status=0
for target in messages checkpoint codecs idx config frames link; do
  # frames: only in a build with UCX.
  [ -x "$dir/tests/fuzz/fuzz_$target" ] || continue
  corpus="$work/$target"
  mkdir -p "$corpus" "$dir/findings"
  cp -r "$root/tests/fuzz/corpus/$target/." "$corpus/" 2>/dev/null || true
  extra=()
  # The config target's bad files each print a line on stderr.
  [ "$target" = config ] && extra+=(-close_fd_mask=2)
  echo "== fuzz $target for ${seconds}s"
  if ! "$dir/tests/fuzz/fuzz_$target" "$corpus" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
      -artifact_prefix="$dir/findings/$target-" -print_final_stats=1 \
      "${extra[@]}" >"$work/$target.log" 2>&1; then
    tail -n 60 "$work/$target.log"
    echo "fuzz: $target found a problem; the input is in $dir/findings/"
    status=1
  else
    grep -E "^(stat::number_of_executed_units|Done)" "$work/$target.log" || true
  fi
done
exit $status
