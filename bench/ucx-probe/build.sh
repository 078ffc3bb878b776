#!/usr/bin/env bash
# Builds the UCX probe (bench/ucx-probe/probe.c) next to this script as
# `ucxt`: two processes over UCP endpoints in NONE or PEER error mode, for
# throughput (tput.sh) and peer kills (kill.sh). Needs libucx-dev and gcc.
#   bash bench/ucx-probe/build.sh
#   bash bench/ucx-probe/tput.sh sysv peer 4194304 200 UCX_TLS=self,posix,sysv,tcp UCX_MM_ERROR_HANDLING=y
#   bash bench/ucx-probe/kill.sh send 1 peer UCX_TLS=self,posix,sysv,tcp UCX_MM_ERROR_HANDLING=y
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
gcc -O2 -Wall -o "$here/ucxt" "$here/probe.c" -lucp -lucs
