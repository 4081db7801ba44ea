#!/usr/bin/env bash
# bench/vm/run.sh: the scheduler micro-benchmark in one VM boot (docs/benchmarks.md, "sched_ext
# micro-benchmark"): pipe ping-pong round trips and hackbench-like messaging
# (zernel-schedbench) under the default scheduler (EEVDF), under zernel (zernel-scx-driver, no
# decisions: every task at weight 1024) and under the kernel's example scx_simple.
#
# scx_simple is built here from the test kernel's own source (build/_deps/bpf/src, unpacked by
# the bpf-deps target) with the project's BPF toolchain, into build/bench-vm/; nothing of it is
# committed. Needs a build with -DZERNEL_BPF=ON (zernel-scx-driver, zernel-schedbench).
# Env: ZERNEL_BUILD_DIR (<repo>/build), SCX_BENCH_REPS (3), ZERNEL_VM_TIMEOUT (600).
set -euo pipefail
here=$(dirname "$(realpath "$0")")
repo=$(realpath "$here/../..")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$repo/build}")
deps=$build/_deps
out=$build/bench-vm
for b in zernel-scx-driver zernel-schedbench; do
  [ -x "$build/bin/$b" ] || { echo "bench/vm: no $build/bin/$b (-DZERNEL_BPF=ON)" >&2; exit 1; }
done

# 1. scx_simple from tools/sched_ext of the test kernel's source.
src=$(find "$deps/bpf/src" -maxdepth 3 -path '*/tools/sched_ext' 2> /dev/null | head -1)
[ -n "$src" ] || { echo "bench/vm: no kernel source in $deps/bpf/src (bpf-deps)" >&2; exit 1; }
mkdir -p "$out"
if [ ! -x "$out/scx_simple" ] || [ "$src/scx_simple.bpf.c" -nt "$out/scx_simple" ]; then
  clang=${ZERNEL_CLANG:-clang-19}
  sys=()
  while read -r d; do sys+=(-idirafter "$d"); done < <(
    "$clang" -v -E -x c - < /dev/null 2>&1 |
      sed -n '/<...> search starts here/,/End of search/p' | sed -n 's/^ \(\/.*\)/\1/p')
  "$clang" -g -O2 -target bpf -mcpu=v3 -mlittle-endian -D__TARGET_ARCH_x86 \
    -Wno-compare-distinct-pointer-types -fms-extensions -Wno-microsoft-anon-tag \
    -I"$deps/bpf" -I"$deps/bpf/include" -I"$deps/bpf/include/bpf-compat" "${sys[@]}" \
    -c "$src/scx_simple.bpf.c" -o "$out/scx_simple.bpf.o"
  "$deps/bpf/bin/bpftool" gen object "$out/scx_simple.linked.o" "$out/scx_simple.bpf.o"
  "$deps/bpf/bin/bpftool" gen skeleton "$out/scx_simple.linked.o" name scx_simple \
    > "$out/scx_simple.bpf.skel.h"
  cc -O2 -I"$out" -I"$deps/bpf/include" -o "$out/scx_simple" "$src/scx_simple.c" \
    "$deps/bpf/lib/libbpf.a" -lelf -lz -lzstd
fi

# 2. One boot: EEVDF, zernel, scx_simple, SCX_BENCH_REPS rounds each.
log=$out/bench.log
ZERNEL_VM_TIMEOUT=${ZERNEL_VM_TIMEOUT:-600} "$repo/tests/vm/run-in-vm.sh" \
  --add "$out/scx_simple" --add "$repo/tests/vm/scx_guest.sh" -- \
  sh -c "PATH=\$PATH:$out SCX_BENCH_REPS=${SCX_BENCH_REPS:-3} \
    sh $repo/tests/vm/scx_guest.sh bench" |
  tee "$log"

# 3. Medians per scheduler.
echo
echo "| scheduler | pipe us/round trip (median) | pipe p99 us (median) | msg 4x200 s (median) |"
echo "| --- | --- | --- | --- |"
for s in eevdf zernel scx_simple; do
  med() {
    sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
  }
  pu=$(sed -n "s/^@@ bench $s pipe .* s, \([0-9.]*\) us\/op.*/\1/p" "$log" | med)
  pp=$(sed -n "s/^@@ bench $s pipe .* p99 \([0-9.]*\) us.*/\1/p" "$log" | med)
  ms=$(sed -n "s/^@@ bench $s msg .*: \([0-9.]*\) s.*/\1/p" "$log" | med)
  echo "| $s | $pu | $pp | $ms |"
done
