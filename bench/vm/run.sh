#!/usr/bin/env bash
# bench/vm/run.sh: the scheduler micro-benchmark in one VM boot (docs/benchmarks.md, "sched_ext
# micro-benchmark"): pipe ping-pong round trips and hackbench-like messaging
# (zernel-schedbench) under the default scheduler (EEVDF), under zernel (zernel-scx-driver, no
# decisions: every task at weight 1024) and under the kernel's example scx_simple.
#
# scx_simple is built here from the test kernel's own source (build/_deps/bpf/src, unpacked by
# the bpf-deps target) with the project's BPF toolchain, into build/bench-vm/; nothing of it is
# committed. Needs a build with -DZERNEL_BPF=ON (zernel-scx-driver, zernel-schedbench).
# Rounds: every round runs each scheduler once, in an order rotated from round to round
# (ABC, BCA, CAB), so that the shared host's drift does not favour one scheduler; the table gives
# medians over the rounds and the median of the per-round ratios to scx_simple.
# Env: ZERNEL_BUILD_DIR (<repo>/build), SCX_BENCH_REPS (3), ZERNEL_VM_TIMEOUT (120 + 60 a round, 120 + 110 with
# SCX_BENCH_PRODUCT: its daemon's start and the job beside every arm),
# SCX_BENCH_BASE (path of another zernel-scx-driver, e.g. a copy of the previous build's: run as
# "zernel_base" in the same rounds, to measure a change within one boot), SCX_BENCH_PIPE (round
# trips per pipe run, 20000), SCX_BENCH_SCHEDS (a subset, e.g. "zernel zernel_base scx_simple"),
# SCX_BENCH_ICOUNT (1: QEMU's -icount shift=0,sleep=off, so that guest time counts executed
# instructions, 1 ns each, and idle time is skipped: the figures measure the work each scheduler
# makes the guest do, independent of the host's load; 0: wall-clock time of a TCG guest, which
# on this shared host swings by 2x from one minute to the next),
# SCX_BENCH_BPFSTATS=1 (turn on the kernel's BPF run-time statistics and report the time spent in
# the scheduler's BPF callbacks per pipe round trip, and callbacks per round trip, and in the
# log ("@@ bench NAME round N prog ...") each callback's ns per call and calls per 100 round
# trips; the statistics add two clock reads to every callback, so leave them off for the
# headline figures), SCX_BENCH_CGROUP=1 (run the benchmark's processes in a cgroup two levels
# below the root, /bench/pair, as a service of a systemd machine runs, instead of the root cgroup:
# zernel counts a cgroup's threads in that cgroup's node, which the root cgroup's skip),
# SCX_BENCH_PRODUCT=1 (the whole product against scx_simple, issue 21: a small training job on the
# emulated GPU runs beside every arm, and an arm zernel_product runs zernel-scheduler --backend
# sched_ext --emulated-gpu, probes and all, following it; with SCX_BENCH_BPFSTATS its probes' BPF
# time per round trip is printed too; every arm reports the job's CPU during each load, and the
# product arm its daemon's CPU and the scheduler's preemption and cut counters), ZERNEL_VM_SMP
# (vCPUs, 2; 4 and 8 for the growth with the CPU count, issue 24: bench/vm/scale.sh).
# Placement: each pipe run also reports where the pair ran (same-CPU share of round trips,
# migrations, involuntary switches; the guest adds IPIs per round trip). A run with both on one
# CPU is about 20 % faster than one on two, and which a run gets is chance, for scx_simple as for
# zernel; so besides the plain medians the script prints every round, medians over one-CPU and
# two-CPU rounds apart, and each scheduler's pipe figure fitted at one same-CPU share (its
# ratio to scx_simple compares cost at equal placement).
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

# 2. One boot: SCX_BENCH_REPS rounds of EEVDF, zernel, [zernel_base,] scx_simple.
log=$out/bench.log
base=()
if [ -n "${SCX_BENCH_BASE:-}" ]; then
  SCX_BENCH_BASE=$(realpath "$SCX_BENCH_BASE")
  [ -x "$SCX_BENCH_BASE" ] || { echo "bench/vm: SCX_BENCH_BASE is not executable" >&2; exit 1; }
  base=(--add "$SCX_BENCH_BASE")
fi
[ -z "${SCX_BENCH_BPFSTATS:-}" ] || base+=(--add "$deps/bpf/bin/bpftool")
per_round_s=60
[ -z "${SCX_BENCH_PRODUCT:-}" ] || { base+=(--add "$build/lib"); per_round_s=110; }
reps=${SCX_BENCH_REPS:-3}
qemu_args=
[ "${SCX_BENCH_ICOUNT:-1}" = 0 ] || qemu_args="-icount shift=0,sleep=off"
echo "bench/vm: $reps rounds, ${ZERNEL_VM_SMP:-2} vCPUs, ${qemu_args:-wall-clock time}"
ZERNEL_VM_QEMU_ARGS=$qemu_args ZERNEL_VM_TIMEOUT=${ZERNEL_VM_TIMEOUT:-$((120 + reps * per_round_s))} "$repo/tests/vm/run-in-vm.sh" \
  --add "$out/scx_simple" --add "$repo/tests/vm/scx_guest.sh" "${base[@]}" -- \
  sh -c "PATH=\$PATH:$out:$deps/bpf/bin SCX_BENCH_REPS=$reps SCX_BENCH_BASE='${SCX_BENCH_BASE:-}' \
    SCX_BENCH_PIPE=${SCX_BENCH_PIPE:-20000} SCX_BENCH_SCHEDS='${SCX_BENCH_SCHEDS:-}' \
    SCX_BENCH_BPFSTATS=${SCX_BENCH_BPFSTATS:-} SCX_BENCH_CGROUP=${SCX_BENCH_CGROUP:-} \
    SCX_BENCH_PRODUCT=${SCX_BENCH_PRODUCT:-} \
    sh $repo/tests/vm/scx_guest.sh bench" |
  tee "$log"

# 3. Medians per scheduler, and the median over rounds of each round's ratio to scx_simple.
# med(a, n): the median of a[1..n] (sorts a), "-" for none; prepended to the awk programs below.
awk_med='
    function med(a, n,   i, j, t) {
      if (!n) return "-"
      for (i = 2; i <= n; i++)
        for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }'
scheds=$(sed -n 's/^@@ bench \([a-z_]*\) round .*/\1/p' "$log" | awk '!seen[$1]++')
echo
echo "| scheduler | pipe us/round trip | pipe p99 us | msg 4x200 s | pipe / scx_simple | msg / scx_simple |"
echo "| --- | --- | --- | --- | --- | --- |"
for s in $scheds; do
  awk -v s="$s" "$awk_med"'
    $1 != "@@" || $2 != "bench" || $4 != "round" { next }
    $6 == "pipe" { for (i = 1; i <= NF; i++) { if ($i == "us/op,") pu[$3, $5] = $(i - 1)
                                               if ($i == "p99") pp[$3, $5] = $(i + 1) } }
    $6 == "msg" { for (i = 1; i <= NF; i++) if ($i == "s" || $i == "s,") ms[$3, $5] = $(i - 1)
                  rounds[$5] = 1 }
    END {
      for (r in rounds) {
        if ((s, r) in pu) { a[++na] = pu[s, r]; b[++nb] = pp[s, r] }
        if ((s, r) in ms) c[++nc] = ms[s, r]
        if ((s, r) in pu && ("scx_simple", r) in pu) d[++nd] = pu[s, r] / pu["scx_simple", r]
        if ((s, r) in ms && ("scx_simple", r) in ms) e[++ne] = ms[s, r] / ms["scx_simple", r]
      }
      printf "| %s | %s | %s | %s | %s | %s |\n", s, med(a, na), med(b, nb), med(c, nc),
        nd ? sprintf("%.3f", med(d, nd)) : "-", ne ? sprintf("%.3f", med(e, ne)) : "-"
    }' "$log"
done
echo "($(grep -c '^@@ bench round' "$log") rounds; every figure a median over them)"
# With SCX_BENCH_PRODUCT: the CPU the job beside every arm took during each load (medians), which
# the arms' figures pay for: a job the product follows is served before the benchmark's tasks.
if grep -q '^@@ bench [a-z_]* round [0-9]* job cpu during' "$log"; then
  echo
  echo "| scheduler | the job's CPU during the pipe run, ms | the job's CPU during the msg run, ms |"
  echo "| --- | --- | --- |"
  for s in $scheds; do
    awk -v s="$s" "$awk_med"'
      $1 == "@@" && $2 == "bench" && $3 == s && $6 == "job" && $7 == "cpu" {
        if ($9 == "pipe") p[++np] = $10; else if ($9 == "msg") m[++nm] = $10 }
      END { printf "| %s | %s | %s |\n", s, med(p, np), med(m, nm) }' "$log"
  done
fi
# Every round's pipe figure, and where the pair ran: the share of round trips with both processes
# on one CPU, round by round; the median pipe figure over the rounds in which the pair ran mostly
# on one CPU (same CPU >= 50 %) and over those on two (the two placements differ by about 20 %,
# and which one a run falls into is chance, for scx_simple as for zernel: compare like with
# like); medians of their migrations and involuntary switches per 1000 round trips (both
# processes together), and of rescheduling and function-call IPIs per 100 round trips.
echo
echo "| scheduler | pipe us, round by round | same CPU %, round by round | pipe us, one CPU (rounds) | pipe us, two CPUs (rounds) | migrations /1000 | involuntary /1000 | RES IPIs /100 | CAL IPIs /100 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for s in $scheds; do
  awk -v s="$s" "$awk_med"'
    $1 != "@@" || $2 != "bench" || $3 != s || $4 != "round" { next }
    $6 == "pipe" { n = $7; us = ""; same = ""
                   for (i = 1; i <= NF; i++) {
                     if ($i == "us/op,") us = $(i - 1)
                     if ($i == "same-cpu") same = $(i + 1)
                     if ($i == "migrations" || $i == "involuntary") {
                       split($(i + 1), ab, "+"); v = (ab[1] + ab[2]) * 1000 / n
                       if ($i == "migrations") mg[++nm] = v; else iv[++ni] = v } }
                   rounds = rounds " " us
                   if (same != "") { sames = sames " " same
                     if (same >= 50) one[++n1] = us; else two[++n2] = us } }
    $6 == "ipi" { res[++nr] = $8; cal[++nc] = $10 }
    END { printf "| %s |%s |%s | %s (%d) | %s (%d) | %s | %s | %s | %s |\n", s, rounds, sames,
            med(one, n1), n1, med(two, n2), n2, med(mg, nm), med(iv, ni), med(res, nr),
            med(cal, nc) }' "$log"
done
# Placement-adjusted: per scheduler, the least-squares line of pipe us against the same-CPU share
# of its rounds, read at one share for all (the median over every round of every scheduler), and
# its ratio to scx_simple's. Within a boot the rounds of one scheduler lie close to such a line
# (about 0.5 us per 10 points of same-CPU share), so this compares the schedulers' cost at equal
# placement, where the plain ratio also measures which placements chance gave each.
awk '$1 == "@@" && $2 == "bench" && $4 == "round" && $6 == "pipe" {
    u = s = ""
    for (i = 1; i <= NF; i++) { if ($i == "us/op,") u = $(i - 1); if ($i == "same-cpu") s = $(i + 1) }
    if (s == "") next
    k = $3; if (!(k in n)) order[++ns] = k
    n[k]++; X[k] += s; Y[k] += u; XX[k] += s * s; XY[k] += s * u; all[++na] = s }
  END {
    if (!na) exit
    for (i = 2; i <= na; i++)
      for (j = i; j > 1 && all[j - 1] > all[j]; j--) { t = all[j]; all[j] = all[j - 1]; all[j - 1] = t }
    at = na % 2 ? all[(na + 1) / 2] : (all[na / 2] + all[na / 2 + 1]) / 2
    for (i = 1; i <= ns; i++) {
      k = order[i]; m = n[k]; d = m * XX[k] - X[k] * X[k]
      b = d > 0 ? (m * XY[k] - X[k] * Y[k]) / d : 0
      f[k] = (Y[k] - b * X[k]) / m + b * at; sl[k] = 10 * b
    }
    printf "\n| scheduler | pipe us at %.1f %% same CPU (fit over its rounds) | us per 10 points | / scx_simple |\n", at
    print "| --- | --- | --- | --- |"
    for (i = 1; i <= ns; i++) {
      k = order[i]
      printf "| %s | %.2f | %.2f | %s |\n", k, f[k], sl[k],
        ("scx_simple" in f) ? sprintf("%.3f", f[k] / f["scx_simple"]) : "-"
    }
  }' "$log"
if grep -q '^@@ bench [a-z_]* round [0-9]* bpf ' "$log"; then
  echo
  echo "| scheduler | BPF ns per pipe round trip (median) | min | max | callbacks per round trip |"
  echo "| --- | --- | --- | --- | --- |"
  for s in $scheds; do
    sed -n "s/^@@ bench $s round [0-9]* bpf \([0-9]*\) ns in \([0-9]*\) calls.*/\1 \2/p" "$log" |
      sort -n | awk -v s="$s" '{ v[NR] = $1; c[NR] = $2 } END { if (NR)
        printf "| %s | %s | %s | %s | %.1f |\n", s, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2,
          v[1], v[NR], c[1] / 10 }'
  done
fi
# Per callback (SCX_BENCH_BPFSTATS): the median over rounds of each callback's ns per call during
# the pipe runs (and its calls per 100 round trips) and during the messaging runs, which keep every
# CPU busy: what issue 24 compares from 2 to 8 vCPUs.
if grep -q '^@@ bench [a-z_]* round [0-9]* \(prog\|msgprog\) ' "$log"; then
  echo
  echo "| scheduler | callback | pipe ns/call | pipe calls/100 round trips | msg ns/call | msg calls |"
  echo "| --- | --- | --- | --- | --- | --- |"
  awk "$awk_med"'
    $1 == "@@" && $2 == "bench" && ($6 == "prog" || $6 == "msgprog") {
      k = $3 SUBSEP $7; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      if ($6 == "prog") { pn[k]++; pv[k, pn[k]] = $8; pc[k, pn[k]] = $10 }
      else { mn[k]++; mv[k, mn[k]] = $8; mc[k, mn[k]] = $10 } }
    END {
      for (i = 1; i <= n; i++) {
        k = order[i]; split(k, kk, SUBSEP)
        delete a; delete b; delete c; delete d
        for (j = 1; j <= pn[k]; j++) { a[j] = pv[k, j]; b[j] = pc[k, j] }
        for (j = 1; j <= mn[k]; j++) { c[j] = mv[k, j]; d[j] = mc[k, j] }
        printf "| %s | %s | %s | %s | %s | %s |\n", kk[1], kk[2], med(a, pn[k] + 0), med(b, pn[k] + 0),
          med(c, mn[k] + 0), med(d, mn[k] + 0)
      }
    }' "$log"
fi
if grep -q '^@@ bench [a-z_]* round [0-9]* probes ' "$log"; then
  echo
  echo "probes (the daemon's BPF programs other than the scheduler) per pipe round trip, by round:"
  sed -n 's/^@@ bench \([a-z_]*\) round \([0-9]*\) probes \(.*\)/  \1 round \2: \3/p' "$log"
fi

