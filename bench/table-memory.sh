#!/usr/bin/env bash
# A server's memory for one row table: a dist job (1 coordinator, 1 server
# with 1 shard, 1 Python worker) that makes a ROWS x DIM table, sets an
# optimizer, pushes and pulls 1000 random rows (so every structure the
# optimizer needs exists), then reads the server's resident and peak
# resident memory from /proc, against the table's weights and the
# optimizer's state (sgd: none, adagrad: 1 float a value, adam: 2).
# Debian's python3 (with numpy) runs the worker.
# Usage (after a release build in build/):
#   bash bench/table-memory.sh [ROWS] [DIM] [optimizers, comma-separated]
set -euo pipefail
rows=${1:-10000000}
dim=${2:-16}
optimizers=${3:-sgd,adagrad,adam}
bin=build/apps
source "$(dirname "$0")/lib.sh"
printf '%-8s %10s %10s %10s %10s %8s\n' optimizer "weights MB" "state MB" \
  "RSS MB" "peak MB" "peak/(w+s)"
for opt in ${optimizers//,/ }; do
  rm -f "$out/port"
  "$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token mem \
    --mode dist_async --workers 1 --servers 1 --port-file "$out/port" \
    --log-level error >/dev/null 2>&1 &
  pids+=($!)
  coord=$!
  for _ in $(seq 100); do [[ -s $out/port ]] && break; sleep 0.1; done
  addr="127.0.0.1:$(cat "$out/port")"
  "$bin/actorps-server" --coordinator "$addr" --token mem --shards 1 \
    --log-level error >/dev/null 2>&1 &
  pids+=($!)
  server=$!
  ACTORPS_TOKEN=mem PYTHONPATH=build/python /usr/bin/python3 - "$addr" "$rows" "$dim" \
    "$opt" "$server" <<'PY'
import sys
import numpy as np
import actorps
addr, rows, dim, opt, server = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
with actorps.KVStore.create("dist_async", coordinator=addr) as kv:
    kv.set_optimizer(opt)
    kv.init_table("t", rows, dim)
    rng = np.random.default_rng(1)
    ids = rng.choice(rows, size=1000, replace=False).astype(np.uint64)
    kv.push_rows("t", ids, np.ones((1000, dim), dtype=np.float32))
    out = np.zeros((1000, dim), dtype=np.float32)
    kv.wait(kv.pull_rows("t", ids, out))
    status = open(f"/proc/{server}/status").read().splitlines()
    kb = {l.split(':')[0]: int(l.split()[1]) for l in status if l.startswith(("VmRSS", "VmHWM"))}
    blocks = {"sgd": 0, "adagrad": 1, "adam": 2}.get(opt, 0)
    weights = rows * dim * 4 / 2**20
    state = blocks * weights
    print(f"{opt:<8} {weights:10.1f} {state:10.1f} {kb['VmRSS'] / 1024:10.1f} "
          f"{kb['VmHWM'] / 1024:10.1f} {kb['VmHWM'] / 1024 / (weights + state):8.2f}")
PY
  wait "$coord" || true
  { kill -9 "$server" && wait "$server"; } 2>/dev/null || true
done
