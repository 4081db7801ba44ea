#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/CMakeLists.txt) with clang-19 + ASan/UBSan in build-fuzz and
# runs each for SECONDS (default 30) from the seed corpus in fuzz/corpus/. Exits non-zero when a
# target finds a crash (the reproducer is left in build-fuzz/crashes/).
#   fuzz/run.sh [SECONDS]        env: BUILD_DIR (default <repo>/build-fuzz), JOBS (default 2)
#   fuzz/run.sh --build-only     builds the targets and runs none (.ci/idle-lane builds ahead)
set -euo pipefail
build_only=0
if [[ ${1:-} == --build-only ]]; then
  build_only=1
  shift
fi
seconds=${1:-30}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build-fuzz}
jobs=${JOBS:-2}
cc=${CC_FUZZ:-clang-19}
cxx=${CXX_FUZZ:-clang++-19}

mkdir -p "$build"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
  -DZERNEL_FUZZ=ON -DZERNEL_BPF=OFF -DZERNEL_BUILD_TESTS=OFF -DZERNEL_BUILD_BENCH=OFF \
  -DZERNEL_WERROR=OFF > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target zernel_fuzz_control_request zernel_fuzz_config \
  zernel_fuzz_runtime_state zernel_fuzz_http_request
((build_only == 0)) || exit 0

mkdir -p "$build/crashes"
status=0
for target in control_request:control config:config runtime_state:runtime_state \
  http_request:http; do
  name=${target%%:*}
  corpus_seed=$repo/fuzz/corpus/${target##*:}
  work=$build/corpus/$name
  mkdir -p "$work"
  echo "== zernel_fuzz_$name for ${seconds}s"
  if ! "$build/bin/zernel_fuzz_$name" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/crashes/$name-" \
      "$work" "$corpus_seed"; then
    echo "zernel_fuzz_$name FAILED: reproducer in $build/crashes/"
    status=1
  fi
done
exit $status
