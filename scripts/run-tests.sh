#!/usr/bin/env bash
# Builds zernel-sched in ./build (configuring it if needed) and runs every test through ctest.
# Extra arguments go to ctest, e.g. `scripts/run-tests.sh -L unit`; `--build-only` (first) builds
# and runs no test. Warnings are errors here (ZERNEL_WERROR=ON), as in CI and the presets; a plain
# `cmake -S . -B build` leaves them warnings.
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=0
if [[ ${1:-} == --build-only ]]; then
  build_only=1
  shift
fi
jobs=$(nproc 2>/dev/null || echo 2)
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -DZERNEL_WERROR=ON
fi
cmake --build build -j "$jobs"
((build_only == 0)) || exit 0
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
