#!/usr/bin/env bash
# Sets everything up, builds actorps twice (release, and debug with
# AddressSanitizer + UndefinedBehaviorSanitizer) and runs the whole test
# suite on both builds, then runs each fuzz target for 20 s.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/.ci/setup.sh"
jobs="$(nproc 2>/dev/null || echo 2)"

if command -v clang-format >/dev/null 2>&1; then
  echo "== clang-format check"
  (cd "$root" && git ls-files '*.cpp' '*.hpp' 2>/dev/null \
    | xargs -r clang-format --dry-run -Werror)
else
  echo "== clang-format not installed: format check skipped"
fi

echo "== release build"
bash "$root/.ci/build.sh" "$root/build" -DCMAKE_BUILD_TYPE=Release \
  -DACTORPS_BUILD_TESTS=ON
echo "== release tests"
(cd "$root/build" && ctest --output-on-failure -j "$jobs")

echo "== sanitizer build (ASan + UBSan)"
bash "$root/.ci/build.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug \
  -DACTORPS_SANITIZE=ON -DACTORPS_BUILD_TESTS=ON
echo "== sanitizer tests"
(cd "$root/build-asan" && ctest --output-on-failure -j "$jobs")

echo "== fuzz targets (ASan + UBSan, 20 s each)"
bash "$root/.ci/fuzz.sh" 20
