#!/usr/bin/env bash
# Interleaved pairs of two builds' actorps-bench (an A/B of a change), with
# the server's memory: per pair the old build runs, then the new one (odd
# pairs) or the other way round (even pairs), each with the same flags and
# --json. Prints, per mode, case, round and worker count, the median over
# the pairs of each build's median round, the median (min-max) of the
# per-pair ratio old/new (> 1: the new build is faster) and the medians of
# the server's peak RSS while the case ran (dist cases), then of the
# server's peak over the whole run per mode and worker count.
# Usage (release builds; the environment goes to both, e.g. UCX_TLS=tcp):
#   bash bench/build-pairs.sh OLD_BENCH NEW_BENCH [pairs, 5] [-- flags]
# Defaults: --modes dist --transport ucx --sizes 4K,4M --many none
# --round split,fused --workers 1,2 --backlog 0 --compression none
# --rounds 30 --no-limits; flags given after -- replace all of these.
set -euo pipefail
old_bin=${1:?usage: build-pairs.sh OLD_BENCH NEW_BENCH [pairs] [-- flags]}
new_bin=${2:?usage: build-pairs.sh OLD_BENCH NEW_BENCH [pairs] [-- flags]}
pairs=${3:-5}
shift $(($# < 3 ? $# : 3))
[[ "${1:-}" == "--" ]] && shift
flags=("$@")
((${#flags[@]} > 0)) || flags=(--modes dist --transport ucx --sizes 4K,4M
  --many none --round split,fused --workers 1,2 --backlog 0
  --compression none --rounds 30 --no-limits)
source "$(dirname "$0")/lib.sh"
run_build() {
  "$3" "${flags[@]}" --json "$out/$1-$2.json" >"$out/$1-$2.txt" 2>&1 ||
    { echo "$1 build, pair $2: the bench failed:" >&2; tail -5 "$out/$1-$2.txt" >&2; exit 1; }
  echo "$1 build, pair $2 done" >&2
}
alternating_pairs "$pairs" "$old_bin" "$new_bin"
python3 - "$out" "$pairs" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
rows, order, whole = {}, [], {}
for i in range(1, pairs + 1):
    for b in ("old", "new"):
        j = json.load(open(f"{out}/{b}-{i}.json"))
        for m in j.get("server_memory", []):
            whole.setdefault((m["mode"], m["workers"]), {"old": [], "new": [], "bound": m["bound_mb"]})[b].append(m["peak_rss_mb"])
        for r in j["results"]:
            k = (r["mode"], r["case"], r["round"], r["workers"])
            if k not in rows:
                rows[k] = {"old": {}, "new": {}}
                order.append(k)
            rows[k][b][i] = (r["round_us"]["median"], r.get("server_peak_rss_mb"))
def med(xs):
    return statistics.median(xs) if xs else float("nan")
print(f"{'mode':6} {'case':26} {'round':6} {'workers':>7} {'old us':>11} {'new us':>11} "
      f"{'old/new (min-max)':>20} {'peak MB old':>12} {'new':>7}")
for k in order:
    v = rows[k]
    both = sorted(set(v["old"]) & set(v["new"]))
    if not both:
        continue
    ratio = [v["old"][i][0] / v["new"][i][0] for i in both]
    mem = lambda b: [v[b][i][1] for i in both if v[b][i][1] is not None]
    mo, mn = mem("old"), mem("new")
    print(f"{k[0]:6} {k[1]:26} {k[2]:6} {k[3]:>7} {med([v['old'][i][0] for i in both]):11.1f} "
          f"{med([v['new'][i][0] for i in both]):11.1f} "
          f"{med(ratio):8.2f} ({min(ratio):.2f}-{max(ratio):.2f})"
          + (f" {med(mo):12.1f} {med(mn):7.1f}" if mo and mn else ""))
if whole:
    print("\nserver peak RSS over the whole run, MB (medians): mode, workers, old, new, bound")
    for (mode, w), v in sorted(whole.items()):
        print(f"{mode:6} {w:>3} {med(v['old']):8.1f} {med(v['new']):8.1f} {v['bound']:8.1f}")
PY
