#!/usr/bin/env bash
# bench/vm/scale.sh [--cpus '2 4 8'] [--reps N] [--no-sharing] [--no-bench]: how the sched_ext
# scheduler's costs and splits grow with the CPU count (issue 24, "Measure the growth"), one VM boot
# per size and part, under QEMU -icount (the guest's clock counts instructions, so that the host's
# two cores and its load do not set the figures; N vCPUs then run round-robin on one host thread).
# For each vCPU count:
#   1. bench/vm/run.sh with SCX_BENCH_BPFSTATS=1: the pipe and messaging micro-benchmark under
#      EEVDF, zernel and scx_simple, each BPF callback's ns per call during the pipe runs and during
#      the messaging runs (which keep every CPU busy), and the per-round-trip totals;
#   2. tests/vm/scx_sharing_test.sh --cpus N (N = 4, 8: -icount; N = 2: as ctest runs it, on the
#      wall clock): the sharing cases, each ratio against the ideal for N CPUs.
# Prints each part's wall time (what a size costs on this host) and keeps the logs in
# build/bench-vm/scale-N-{bench,sharing}.log. docs/benchmarks.md ("Growth with the CPU count") has
# the figures. Env: ZERNEL_BUILD_DIR, SCX_BENCH_REPS (via --reps, 3), SCX_SHARE_CASES (all).
set -euo pipefail
here=$(dirname "$(realpath "$0")")
repo=$(realpath "$here/../..")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$repo/build}")
cpus='2 4 8' reps=3 sharing=1 bench=1
while [ $# -gt 0 ]; do
  case $1 in
    --cpus) cpus=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --no-sharing) sharing=0; shift ;;
    --no-bench) bench=0; shift ;;
    *) echo "usage: bench/vm/scale.sh [--cpus '2 4 8'] [--reps N] [--no-sharing] [--no-bench]" >&2
       exit 2 ;;
  esac
done
for n in $cpus; do
  case $n in 2 | 4 | 8) ;; *) echo "bench/vm/scale.sh: --cpus takes 2, 4 and 8, not '$n'" >&2; exit 2 ;; esac
done
out=$build/bench-vm
mkdir -p "$out"
rc=0
for n in $cpus; do
  if [ $bench = 1 ]; then
    t0=$(date +%s)
    ZERNEL_VM_SMP=$n SCX_BENCH_BPFSTATS=1 SCX_BENCH_REPS=$reps \
      ZERNEL_VM_TIMEOUT=$((600 + n * reps * 120)) "$here/run.sh" > "$out/scale-$n-bench.log" 2>&1 || rc=1
    echo "== $n vCPUs, micro-benchmark: $(($(date +%s) - t0)) s wall (log $out/scale-$n-bench.log)"
    sed -n '/^| scheduler | pipe us\/round trip/,/^(/p; /^| scheduler | callback/,/^$/p; /^| scheduler | BPF ns/,/^$/p' \
      "$out/scale-$n-bench.log"
  fi
  if [ $sharing = 1 ]; then
    t0=$(date +%s)
    ZERNEL_VM_TIMEOUT=$((660 * n)) "$repo/tests/vm/scx_sharing_test.sh" --cpus "$n" \
      > "$out/scale-$n-sharing.log" 2>&1 || rc=1
    echo "== $n vCPUs, sharing cases: $(($(date +%s) - t0)) s wall (log $out/scale-$n-sharing.log)"
    grep -E '^@@ (PASS|FAIL)' "$out/scale-$n-sharing.log" | sed 's/ (windows x100:[^)]*)//' || true
  fi
done
exit $rc
