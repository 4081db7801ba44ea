#!/usr/bin/env bash
# scripts/asan-loader.sh: the sched_ext loader's C and C++ (src/enforce/scx: skel_shim.c, the
# backend, the decision map; and the test driver tools/scx_driver) under ASan + UBSan, in the VM:
# builds zernel-scx-driver and zernel-scx-probe with -DZERNEL_SANITIZE=address and BPF on in
# build-asan-bpf/ (reusing build/_deps: run after the main build), then runs the attach,
# decision-scope (a decision rewritten every 10 ms), ejection and kill -9 checks of
# tests/vm/scx_guest.sh with them. A sanitizer report ends the driver with a status the checks do
# not accept (they want 0 after a detach, 2 after an ejection), and a leak is reported by
# LeakSanitizer at the driver's exit. The ASan and TSan presets build
# without BPF, so this is where the loader meets the sanitizers. About 3 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/build/_deps
[[ -d $deps/kernel && -d $deps/bpf ]] ||
  { echo "asan-loader: no $deps (build with -DZERNEL_BPF=ON first)" >&2; exit 1; }
out=build-asan-bpf
mkdir -p "$out"
ln -sfn "$deps" "$out/_deps"
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=Debug -DZERNEL_SANITIZE=address -DZERNEL_BPF=ON \
  -DZERNEL_BUILD_BENCH=OFF -DZERNEL_WERROR=ON > /dev/null
cmake --build "$out" -j "$(nproc)" --target zernel-scx-driver zernel-scx-probe
ZERNEL_BUILD_DIR=$PWD/$out tests/vm/run-in-vm.sh --add "$PWD/tests/vm/scx_guest.sh" -- \
  sh "$PWD/tests/vm/scx_guest.sh" attach decision_scope eject_fail kill9
