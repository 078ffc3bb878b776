# Helpers shared by the bench scripts (sourced): a scratch folder `out`,
# removed at exit with every process whose pid the script put in `pids`.
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT
# Seconds since midnight (UTC) of a log line's timestamp, and of now.
stamp() { sed -E 's/^[0-9-]+T([0-9]+):([0-9]+):([0-9.]+)Z.*/\1 \2 \3/' | awk '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 }'; }
now() { date -u +%H:%M:%S.%N | awk -F: '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 }'; }
# The median of the numbers on stdin, with their range.
median() { sort -n | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f-%.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
# Waits (at most 2 minutes) until file $1 has a line matching $2.
await() {
  for ((i = 0; i < 6000; ++i)); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.02
  done
  return 1
}
# The last round a worker with --progress logged in $1.
last_round() { grep -oE "round [0-9]+$" "$1" | tail -n 1 | awk '{ print $2 }'; }
# The results table of one actorps-bench output $1 (from its "mode" header to
# the first blank line) as "$2|case|round|workers<TAB>setting<TAB>median_us"
# lines; the setting is $3, or the row's mode column when $3 is empty.
bench_rows() {
  awk -v run="$2" -v setting="${3:-}" '
    /^mode / { on = 1; next }
    on && NF == 0 { exit }
    on {
      # The round column ("rows" may also stand in the name of a row case):
      # the one followed by the worker count.
      for (i = 2; i <= NF; ++i)
        if (($i == "split" || $i == "fused" || $i == "rows") && $(i + 1) ~ /^[0-9]+$/)
          break
      name = $2; for (j = 3; j < i; ++j) name = name " " $j
      print run "|" name "|" $i "|" $(i + 1) "\t" (setting == "" ? $1 : setting) "\t" $(i + 2)
    }' "$1"
}
# Reads bench_rows lines on stdin and prints, per case, round and worker
# count, the median over the runs of settings $1's and $2's median rounds and
# of the per-run ratio $1/$2 (> 1: $2 is faster), with the ratio's min and
# max; $3 and $4 name the two settings in the header.
pair_table() {
  printf '%-26s %-6s %7s %14s %14s %20s\n' case round workers "$3 median us" \
    "$4 median us" "$3/$4 (min-max)"
  awk -F'\t' -v a_name="$1" -v b_name="$2" '
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
        key = order[q]; a = ""; b = ""; r = ""
        for (run in runs)
          if ((run, key, a_name) in t && (run, key, b_name) in t) {
            a = a " " t[run, key, a_name]; b = b " " t[run, key, b_name]
            r = r " " t[run, key, a_name] / t[run, key, b_name]
          }
        if (a == "") continue
        split(key, p, "|")
        am = med(a); bm = med(b); rm = med(r)
        printf "%-26s %-6s %7s %14.1f %14.1f %8.2f (%.2f-%.2f)\n", p[1], p[2], p[3], am, bm, rm, lo, hi
      }
    }'
}
# The cases a pairs script runs unless given others.
pair_defaults=(--sizes 4K,256K,4M --many none --round split,fused --workers 1,2
               --backlog 0 --compression none --warmup 3 --rounds 100)
# Runs `runs` interleaved pairs of the settings $1 and $2: per pair and
# setting, the caller's `run_setting SETTING FILE` writes one actorps-bench
# output to FILE; then prints pair_table of the two (ratios $1/$2).
run_pairs() {
  local r setting
  for ((r = 1; r <= runs; ++r)); do
    for setting in "$1" "$2"; do
      run_setting "$setting" "$out/$setting-$r.txt"
      bench_rows "$out/$setting-$r.txt" "$r" "$setting" >>"$out/rows.txt"
    done
    echo "pair $r of $runs done" >&2
  done
  pair_table "$1" "$2" "$1" "$2" <"$out/rows.txt"
}
# The arguments of a pairs script ([R] [-- flags]): sets `runs` (default 5)
# and `extra` (the flags given, or else the array `defaults`), and `app`, the
# release build's actorps-bench, which must exist.
pair_args() {
  runs=${1:-5}
  shift || true
  [[ "${1:-}" == "--" ]] && shift
  extra=("$@")
  ((${#extra[@]} > 0)) || extra=("${defaults[@]}")
  app=build/bench/actorps-bench
  [[ -x $app ]] || { echo "missing $app: build first (bash .ci/build.sh build)" >&2; exit 1; }
}
# An A/B of two builds: for each of $1 pairs, calls `run_build BUILD PAIR
# BIN` for the old build ($2) and the new one ($3), the old one first in odd
# pairs and the new one first in even pairs (the build run second in a pair
# was seen to be the slower one, whichever it was: docs/benchmarks.md,
# "Large blocks on cache lines").
alternating_pairs() {
  local i b order
  for ((i = 1; i <= $1; ++i)); do
    order="old new"
    ((i % 2 == 0)) && order="new old"
    for b in $order; do
      if [[ $b == old ]]; then run_build old "$i" "$2"; else run_build new "$i" "$3"; fi
    done
  done
}
