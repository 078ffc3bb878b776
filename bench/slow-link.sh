#!/usr/bin/env bash
# Runs a command in a network namespace of its own whose loopback carries at
# most RATE (tc's token bucket: e.g. 1gbit, 10gbit): every process of a dist
# job on 127.0.0.1 then talks as over a link of that speed, which plain
# loopback (several GB/s) hides. Needs root (unshare -n) and tc (iproute2).
# The bucket holds 70 KB: just over one packet of the loopback's 64 KB MTU,
# so that bursts cannot pass at memory speed.
# Usage: bash bench/slow-link.sh RATE COMMAND [ARGS...]
# e.g.   UCX_TLS=tcp ACTORPS_UCX_SEGMENT_MB=0 bash bench/slow-link.sh 1gbit \
#          build/bench/actorps-bench --modes dist --transport ucx ...
set -euo pipefail
rate=${1:?usage: slow-link.sh RATE COMMAND [ARGS...]}
shift
(($# > 0)) || { echo "usage: slow-link.sh RATE COMMAND [ARGS...]" >&2; exit 2; }
# shellcheck disable=SC2016 # expanded by the inner shell
exec unshare -n bash -c '
  set -euo pipefail
  ip link set lo up
  tc qdisc add dev lo root tbf rate "$0" burst 70kb latency 5ms
  exec "$@"' "$rate" "$@"
