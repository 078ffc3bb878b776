#!/usr/bin/env bash
# Runs actorps-train R times per configuration and prints, per configuration,
# the median (and min-max) of the last epoch's test accuracy and of the
# samples/s over the last three epochs (mean per run), from the CSVs the app
# writes. Usage (from the top folder, after a release build in build/):
#   bash bench/train-medians.sh [R] [-- extra flags for every run]
# Configurations: local async (defaults), local sync, baseline at the
# per-worker batch, baseline at sync's global batch (4 x 16 = 64); with
# CONFIGS="async ssp1 ssp2 ssp4 sync" or "async every10 every-epoch" (names
# below) those instead. Also
# prints the median wall time of the run (sum of the epochs' seconds).
set -euo pipefail
runs=${1:-3}
shift || true
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
app=build/apps/actorps-train
[[ -x $app ]] || { echo "missing $app: build first (bash .ci/build.sh build)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
all=("async|" "sync|--mode sync" "baseline|--baseline"
     "baseline-b64|--baseline --batch 64"
     "ssp0|--mode ssp --staleness 0" "ssp1|--mode ssp --staleness 1"
     "ssp2|--mode ssp --staleness 2" "ssp4|--mode ssp --staleness 4"
     "every10|--push-every 10" "every100|--push-every 100"
     "every-epoch|--push-every 1000000" "sync-every10|--mode sync --push-every 10")
configs=()
for c in "${all[@]}"; do
  if [[ -z "${CONFIGS:-}" && "$c" != ssp* && "$c" != *every* ]] \
      || [[ " ${CONFIGS:-} " == *" ${c%%|*} "* ]]; then
    configs+=("$c")
  fi
done
# Median, min and max of column $2 of file $1 (plain awk: no asort).
stats() {
  cut -d' ' -f"$2" "$1" | sort -g | awk '
    { v[NR] = $1 }
    END { m = int((NR + 1) / 2); print v[m], v[1], v[NR], NR }'
}
summary() { # name file-with-"accuracy rate seconds"-lines
  read -r am alo ahi n < <(stats "$2" 1)
  read -r rm rlo rhi _ < <(stats "$2" 2)
  read -r tm tlo thi _ < <(stats "$2" 3)
  printf '%-13s accuracy %.4f (%.4f-%.4f)  samples/s %.0f (%.0f-%.0f)  wall %.1f s (%.1f-%.1f)  runs %d\n' \
    "$1" "$am" "$alo" "$ahi" "$rm" "$rlo" "$rhi" "$tm" "$tlo" "$thi" "$n"
}
for c in "${configs[@]}"; do
  name=${c%%|*}; flags=${c#*|}
  : >"$out/$name.txt"
  for ((r = 1; r <= runs; ++r)); do
    # shellcheck disable=SC2086
    $app $flags "${extra[@]}" --out "$out/$name-$r" >/dev/null
    csv=$(ls "$out/$name-$r"/*.csv | grep -v -- '-steps\.csv$')
    wall=$(awk -F, 'NR > 1 { t += $5 } END { print t }' "$csv")
    tail -n 3 "$csv" | awk -F, -v wall="$wall" \
      '{ s += $4; a = $3 } END { print a, s / NR, wall }' >>"$out/$name.txt"
  done
done
git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /' || true
for c in "${configs[@]}"; do
  name=${c%%|*}
  summary "$name" "$out/$name.txt"
done
