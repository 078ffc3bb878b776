#!/usr/bin/env bash
# Configures and builds actorps. Usage: build.sh BUILD_DIR [cmake args...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"
shift
jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S "$root" -B "$dir" "$@" >"$dir.configure.log" 2>&1 \
  || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j "$jobs"
