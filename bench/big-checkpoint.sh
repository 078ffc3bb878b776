#!/usr/bin/env bash
# Saving and loading a large row table in a dist job (1 coordinator, 1
# server with SHARDS shards, 1 Python worker): makes a ROWS x DIM table
# with Adam, pushes 1000 random rows, saves the store to a file, pushes
# again, loads the file and checks that the rows are back as saved. Prints
# the save and load times, the file's size, and the peak resident memory
# of the server, the coordinator and the worker against the table's state
# (weights + Adam's two blocks).
# TIMEOUT_S (default 60) bounds every request and connection silence, as
# --timeout-ms and --connection-timeout-ms on the apps and `timeout` in
# Python (a build that moves a save as one message needs more than the
# defaults for a table of gigabytes).
# Usage (after a release build in build/):
#   [TIMEOUT_S=600] bash bench/big-checkpoint.sh [ROWS] [DIM] [SHARDS] [DIR]
set -euo pipefail
rows=${1:-10000000}
dim=${2:-16}
shards=${3:-1}
dir=${4:-/tmp}
timeout_ms=$(( ${TIMEOUT_S:-60} * 1000 ))
bin=build/apps
out=$(mktemp -d)
ckpt="$dir/actorps-big-checkpoint-$$.ckpt"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$out" "$ckpt" "$ckpt.tmp"
}
trap cleanup EXIT
"$bin/actorps-coordinator" --host 127.0.0.1 --port 0 --token big \
  --mode dist_async --workers 1 --servers 1 --port-file "$out/port" \
  --timeout-ms "$timeout_ms" --connection-timeout-ms "$timeout_ms" \
  --log-level error >"$out/coordinator.log" 2>&1 &
pids+=($!)
coord=$!
for _ in $(seq 100); do [[ -s $out/port ]] && break; sleep 0.1; done
addr="127.0.0.1:$(cat "$out/port")"
"$bin/actorps-server" --coordinator "$addr" --token big --shards "$shards" \
  --timeout-ms "$timeout_ms" --connection-timeout-ms "$timeout_ms" \
  --log-level error >"$out/server.log" 2>&1 &
pids+=($!)
server=$!
ACTORPS_TOKEN=big PYTHONPATH=build/python /usr/bin/python3 - "$addr" "$rows" \
  "$dim" "$server" "$coord" "$ckpt" "$timeout_ms" <<'PY'
import os, resource, sys, time
import numpy as np
import actorps
addr, rows, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
server, coord, path = sys.argv[4], sys.argv[5], sys.argv[6]
timeout = int(sys.argv[7]) / 1000
def peak_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
with actorps.KVStore.create("dist_async", coordinator=addr, timeout=timeout,
                            connection_timeout=timeout) as kv:
    kv.set_optimizer("adam")
    kv.init_table("t", rows, dim)
    rng = np.random.default_rng(1)
    ids = rng.choice(rows, size=1000, replace=False).astype(np.uint64)
    grad = np.ones((1000, dim), dtype=np.float32)
    kv.push_rows("t", ids, grad)
    saved = np.zeros((1000, dim), dtype=np.float32)
    kv.wait(kv.pull_rows("t", ids, saved))
    t0 = time.monotonic()
    kv.save_optimizer_states(path)
    t1 = time.monotonic()
    kv.push_rows("t", ids, grad)
    kv.wait_all()
    t2 = time.monotonic()
    kv.load_checkpoint(path)
    t3 = time.monotonic()
    back = np.zeros((1000, dim), dtype=np.float32)
    kv.wait(kv.pull_rows("t", ids, back))
    dead = kv.num_dead_node(1 | 2)
    state_mb = rows * dim * 4 * 3 / 2**20
    print(f"table {rows} x {dim}, adam, state {state_mb:.0f} MB; "
          f"file {os.path.getsize(path) / 2**20:.0f} MB")
    print(f"save {t1 - t0:.1f} s, load {t3 - t2:.1f} s, rows back as saved: "
          f"{np.array_equal(back, saved)}, dead nodes after: {dead}")
    w = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    s, c = peak_mb(server), peak_mb(coord)
    print(f"peak MB: server {s:.0f} ({s / state_mb:.2f}x state), "
          f"coordinator {c:.0f}, worker {w:.0f}")
PY
wait "$coord" || true
