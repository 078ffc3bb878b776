#!/usr/bin/env bash
# Sets everything up, builds actorps and runs the main job: data-parallel
# training of a Fashion-MNIST MLP through a local actorps store. Extra
# arguments go to the job; try --help. Afterwards it draws the curves of
# every run in the output folder (out/curves.png and .svg) with matplotlib.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/.ci/setup.sh"
# A first build leaves the tests out (the job needs none of them); a build
# folder configured before keeps its choice, so that the test command's
# binaries never go stale behind a developer's back.
tests=(-DACTORPS_BUILD_TESTS=OFF)
[ -f "$root/build/CMakeCache.txt" ] && tests=()
bash "$root/.ci/build.sh" "$root/build" -DCMAKE_BUILD_TYPE=Release \
  "${tests[@]}" >/dev/null
out=out
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -h | --help) exec "$root/build/apps/actorps-train" "$@" ;;
    --out) out="${args[i + 1]:-out}" ;;
    --out=*) out="${args[i]#--out=}" ;;
  esac
done
"$root/build/apps/actorps-train" "$@"
# The runs so far (async, sync, ssp, baseline), overlaid.
csvs=()
for run in async sync ssp baseline; do
  [ -f "$out/$run.csv" ] && csvs+=("$out/$run.csv")
done
if ((${#csvs[@]} > 0)) && /usr/bin/python3 -c "import matplotlib" 2>/dev/null
then
  /usr/bin/python3 "$root/python/actorps/plot.py" "${csvs[@]}" \
    --out "$out/curves" --title "actorps-train: Fashion-MNIST MLP"
fi
