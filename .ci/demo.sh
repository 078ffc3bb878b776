#!/usr/bin/env bash
# Sets everything up, builds actorps and runs the main job: data-parallel
# training of a Fashion-MNIST MLP through a local actorps store. Extra
# arguments go to the job; try --help.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/.ci/setup.sh"
bash "$root/.ci/build.sh" "$root/build" -DCMAKE_BUILD_TYPE=Release \
  -DACTORPS_BUILD_TESTS=OFF >/dev/null
exec "$root/build/apps/actorps-train" "$@"
