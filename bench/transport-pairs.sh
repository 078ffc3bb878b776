#!/usr/bin/env bash
# Runs actorps-bench R times with --modes dist --transport caf,ucx (each run
# measures both transports back to back, so the two see the same machine)
# and prints, per case and worker count, the median over the runs of each
# transport's median round and of the ratio caf/ucx taken within each run
# (> 1: ucx is faster). Usage (from the top folder, after a release build
# in build/):
#   bash bench/transport-pairs.sh [R] [-- extra actorps-bench flags]
# Defaults: 5 runs of --sizes 4K,256K,4M,64M --many 1000x1024,10000x1
# --round split --workers 1,2 --backlog 0 --compression none --warmup 3
# --rounds 20; flags given after -- replace all of these.
set -euo pipefail
runs=${1:-5}
shift || true
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
if ((${#extra[@]} == 0)); then
  extra=(--sizes 4K,256K,4M,64M --many 1000x1024,10000x1 --round split
         --workers 1,2 --backlog 0 --compression none --warmup 3 --rounds 20)
fi
app=build/bench/actorps-bench
[[ -x $app ]] || { echo "missing $app: build first (bash .ci/build.sh build)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= runs; ++r)); do
  $app --modes dist --transport caf,ucx --no-limits "${extra[@]}" \
    2>/dev/null >"$out/run-$r.txt"
  echo "run $r of $runs done" >&2
done
# The results table of each run (from its "mode" header to the first blank
# line), as "run|case|round|workers mode median_us" lines.
for f in "$out"/run-*.txt; do
  awk -v run="$f" '
    /^mode / { on = 1; next }
    on && NF == 0 { exit }
    on {
      # The round column ("rows" may also stand in the name of a row case):
      # the one followed by the worker count.
      for (i = 2; i <= NF; ++i)
        if (($i == "split" || $i == "fused" || $i == "rows") && $(i + 1) ~ /^[0-9]+$/)
          break
      name = $2; for (j = 3; j < i; ++j) name = name " " $j
      print run "|" name "|" $i "|" $(i + 1) "\t" $1 "\t" $(i + 2)
    }' "$f"
done >"$out/rows.txt"
# Per case: the median (over runs) of each transport's median round and of
# the per-run ratio caf/ucx, with the ratio's min and max.
printf '%-26s %-6s %7s %14s %14s %20s\n' case round workers "caf median us" \
  "ucx median us" "caf/ucx (min-max)"
awk -F'\t' '
  function med(list,    n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j)
      if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    lo = v[1]; hi = v[n]
    return v[int((n + 1) / 2)]
  }
  {
    split($1, p, "|"); run = p[1]; key = p[2] "|" p[3] "|" p[4]
    if (!(key in seen)) { seen[key] = 1; order[++k] = key }
    t[run, key, $2] = $3; runs[run] = 1
  }
  END {
    for (q = 1; q <= k; ++q) {
      key = order[q]; c = ""; u = ""; r = ""
      for (run in runs)
        if ((run, key, "dist") in t && (run, key, "ucx") in t) {
          c = c " " t[run, key, "dist"]; u = u " " t[run, key, "ucx"]
          r = r " " t[run, key, "dist"] / t[run, key, "ucx"]
        }
      if (c == "") continue
      split(key, p, "|")
      cm = med(c); um = med(u); rm = med(r)
      printf "%-26s %-6s %7s %14.1f %14.1f %8.2f (%.2f-%.2f)\n", p[1], p[2], p[3], cm, um, rm, lo, hi
    }
  }' "$out/rows.txt"
