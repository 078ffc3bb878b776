#!/usr/bin/env bash
# Runs a command with transparent huge pages off for it and every process
# it starts (Linux prctl PR_SET_THP_DISABLE, kept across fork and exec):
# the same binary with and without the huge pages a shard asks for its
# large tables (core/huge_pages.hpp), for an A/B on one build.
# Usage: bash bench/without-thp.sh COMMAND [ARGS...]
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: without-thp.sh COMMAND [ARGS...]" >&2; exit 2; }
exec python3 -c '
import ctypes, os, sys
PR_SET_THP_DISABLE = 41
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
    sys.exit("without-thp.sh: prctl(PR_SET_THP_DISABLE): "
             + os.strerror(ctypes.get_errno()))
os.execvp(sys.argv[1], sys.argv[1:])
' "$@"
