#!/usr/bin/env bash
# The protection benchmark in the VM, under sched_ext (bench/protection.sh is the host's, with the
# userspace backend). One boot, five arms, each a run of zernel-workload on the emulated GPU:
#   solo     the job alone
#   half     the job alone on one CPU (taskset -c 0): with the hogs running, an equal
#            cpu.weight gives its cgroup at most one of the 2 vCPUs at any moment, so this is
#            about the most any scheduler that honours the cgroups can give it
#   stock    the job in cgroup z_job, CPU hogs (`zernel-workload noise`, 2 x CPUs threads) in
#            cgroup z_noise, both cpu.weight 100: the default scheduler (EEVDF)
#   periodic the same, with `zernel-scheduler --backend sched_ext --emulated-gpu` running and
#            `[phase_detection] mode = "periodic"`: phases from sampled signals, per process
#   zernel   the same with phases from events (the default): each thread scheduled by its own
#            phase at every wakeup and enqueue
# The hogs sit in another cgroup than the job with the same cpu.weight: the case per-thread nice
# cannot reach (cgroups share first), so what the job keeps there comes from the scheduler's
# order inside the job's half (phase priorities, preemption, latency targets).
# Arms are interleaved, --reps times (rep r rotates the order by r). Per arm it prints the median
# steps/s, step p50 and p99, the worst step of any rep (warm-up steps left out) and steps/s
# relative to solo, then one JSON
# line; last, how fast the zernel arm's scheduler applied phase changes (the phase_delay_*
# counters the daemon logs at exit, summed over the reps: docs/sched-ext.md "How fast a phase
# change is applied"), and the phase timer's looks a second per vCPU over the job's runs (its
# cost). Each zernel or periodic run also prints the scheduler's counters of what reorders its
# queue ("@@ events": preemption kicks, starvation rescues, yield and owed cuts, LLC steals).
# ZERNEL_VM_QEMU_ARGS="-icount shift=0,sleep=off" keeps the host's load off the guest's clock
# (tests/vm/run-in-vm.sh).
#
#   bench/vm/protection.sh [--reps N] [--steps N] [--warmup-steps N] [--job-args 'ARGS']
#                          [--arms 'solo half stock periodic zernel'] [--detail]
#
# --arms runs only the arms named (in that order, rotated per rep as above); solo is needed for
# the relative figures, which are left out without it.
# --detail: where each run's steps lose their time. Every 0.2 s the guest reads
# /proc/TID/schedstat of every thread of z_job and z_noise; per run it prints, per role (the
# launcher, ranks: its children, workers: theirs, hogs), CPU time, time queued, slices and the
# mean wait per slice ("@@ detail ARM REP ROLE ..."; the last reading of each thread, so up to
# 0.2 s of a thread's end is left out), and each rank's first 50 measured steps as
# step_ms/data_wait_ms ("@@ steps ARM REP rank N: ...", from the job's --step-log).
#
# Needs the build (ZERNEL_BUILD_DIR, default build/) with -DZERNEL_BPF=ON. docs/benchmarks.md has
# the figures.
set -euo pipefail
here=$(dirname "$(realpath "$0")")
repo=$(realpath "$here/../..")
build=$(realpath -m "${ZERNEL_BUILD_DIR:-$repo/build}")
reps=3 steps=120 warmup=20 arms='solo half stock periodic zernel' detail=0
job_args="--ranks 1 --workers 2 --data-ms 35 --gpu-ms 40 --nccl-ms 5 --optimizer-ms 5 --batch-kib 128"
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup-steps) warmup=$2; shift 2 ;;
    --job-args) job_args=$2; shift 2 ;;
    --arms) arms=$2; shift 2 ;;
    --detail) detail=1; shift ;;
    *) echo "usage: bench/vm/protection.sh [--reps N] [--steps N] [--warmup-steps N] [--job-args 'ARGS'] [--arms 'ARM...'] [--detail]" >&2
       exit 2 ;;
  esac
done
for arm in $arms; do
  case $arm in
    solo | half | stock | periodic | zernel) ;;
    *) echo "bench/vm/protection.sh: unknown arm '$arm' (solo, half, stock, periodic, zernel)" >&2; exit 2 ;;
  esac
done
[ -n "$arms" ] || { echo "bench/vm/protection.sh: --arms names no arm" >&2; exit 2; }
guest=$(mktemp --suffix=.sh)
trap 'rm -f "$guest"' EXIT
cat > "$guest" <<GUEST
#!/bin/sh
reps=$reps steps=$steps warmup=$warmup job_args="$job_args" arms="$arms" detail=$detail
GUEST
cat >> "$guest" <<'GUEST'
CG=/sys/fs/cgroup
mkdir -p $CG/z_job $CG/z_noise
export TMPDIR=/tmp
# The daemon's HTTP port is on 127.0.0.1 (a kernel may leave the loopback down).
ip link set lo up
port=19093 # the daemon's /metrics, read at the end of each run
printf '[telemetry]\nmetrics_port = %s\n' $port > /tmp/zernel.toml
printf '[telemetry]\nmetrics_port = %s\n[phase_detection]\nmode = "periodic"\n' $port > /tmp/periodic.toml
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" "$2"; }
# sample FILE (--detail): every 0.2 s, "CGROUP TID PPID run_ns wait_ns slices" of each thread,
# read with the shell's own `read` (no process per thread: the guest's CPU is what is measured)
sample() {
  out=$1
  while :; do
    for cg in z_job z_noise; do
      for t in $(cat $CG/$cg/cgroup.threads 2> /dev/null); do
        { read -r ss < /proc/$t/schedstat && read -r st < /proc/$t/stat; } 2> /dev/null || continue
        set -- $st  # pid (comm) state ppid ...: the job's names hold no spaces
        echo "$cg $t $4 $ss"
      done
    done >> "$out"
    usleep 200000
  done
}
# detail_of ARM REP JOBPID: per role, the last reading of each thread summed; each rank's steps
detail_of() {
  awk -v L="$3" -v tag="$1 $2" '{ k = $1 " " $2; cg[k] = $1; tid[k] = $2; r[k] = $4; w[k] = $5; n[k] = $6
         if ($1 == "z_job" && $3 == L) rank[$2] = 1 }
       END { for (k in r) {
               role = cg[k] == "z_noise" ? "hog" : tid[k] == L ? "launcher" : rank[tid[k]] ? "rank" : "worker"
               R[role] += r[k]; W[role] += w[k]; N[role] += n[k]; T[role]++ }
             for (g in R) printf "@@ detail %s %-8s threads %2d cpu %6.0f ms queued %6.0f ms slices %6d wait/slice %.2f ms\n", tag, g, T[g], R[g] / 1e6, W[g] / 1e6, N[g], (N[g] ? W[g] / N[g] / 1e6 : 0) }' /tmp/ss.$1.$2 | sort
  awk -F'[:,}]' -v tag="$1 $2" -v w="$warmup" '{ for (i = 1; i < NF; i++) {
           if ($i ~ /"rank"$/) r = $(i + 1); if ($i ~ /"step"$/) st = $(i + 1)
           if ($i ~ /"step_ms"$/) sm = $(i + 1); if ($i ~ /"data_wait_ms"$/) dw = $(i + 1) }
         if (st >= w && st < w + 50) line[r] = line[r] sprintf(" %d/%d", sm, dw) }
       END { for (r in line) print "@@ steps " tag " rank " r ":" line[r] }' /tmp/steps.$1.$2 | sort
}
# run ARM REP: one run of the job; its summary in /tmp/ARM.REP.json
run() {
  arm=$1 rep=$2 hogs='' d=''
  if [ "$arm" = zernel ] || [ "$arm" = periodic ]; then
    zernel-scheduler --config /tmp/$arm.toml --backend sched_ext --emulated-gpu \
      --control-socket '' > /tmp/daemon.$arm.$rep.log 2>&1 &
    d=$!
    n=0
    while [ "$(cat /sys/kernel/sched_ext/state)" != enabled ]; do
      n=$((n + 1))
      if [ $n -gt 300 ] || ! kill -0 $d 2> /dev/null; then
        echo "@@ FAILED: zernel-scheduler ($arm) did not attach: $(tail -n 3 /tmp/daemon.$arm.$rep.log)"
        exit 1
      fi
      usleep 100000
    done
  fi
  pin=''
  [ "$arm" = half ] && pin='taskset -c 0'
  if [ "$arm" != solo ] && [ "$arm" != half ]; then
    sh -c "echo \$\$ > $CG/z_noise/cgroup.procs && exec zernel-workload noise --threads 4" \
      > /dev/null 2>&1 &
    hogs=$!
    usleep 500000
  fi
  sampler="" steplog=""
  if [ "$detail" = 1 ]; then
    rm -f /tmp/ss.$arm.$rep /tmp/steps.$arm.$rep
    sample /tmp/ss.$arm.$rep &
    sampler=$!
    steplog="--step-log /tmp/steps.$arm.$rep"
  fi
  sh -c "echo \$\$ > $CG/z_job/cgroup.procs && exec $pin zernel-workload --emulated-gpu \
    --steps $steps --warmup-steps $warmup $steplog $job_args" > /tmp/$arm.$rep.json 2> /tmp/$arm.$rep.err &
  job=$!
  wait $job
  [ -n "$sampler" ] && { kill $sampler; wait $sampler 2> /dev/null; }
  [ -n "$hogs" ] && { kill $hogs; wait $hogs 2> /dev/null; }
  if [ -n "$d" ]; then
    if ! kill -0 $d 2> /dev/null; then
      echo "@@ FAILED: zernel-scheduler ($arm) ended during the run: $(tail -n 3 /tmp/daemon.$arm.$rep.log)"
      exit 1
    fi
    # The scheduler's counters of what reorders the queue (docs/operations.md), for the record.
    ev=$(wget -q -O - http://127.0.0.1:$port/metrics 2> /dev/null | awk -F'[{}"= ]+' \
      '/^zernel_scheduler_bpf_events_total\{kind="(kick_preempt|preempt_wait|starve_rescue|yield_cut|owed_cut|llc_steal)"\}/ { printf "%s %s ", $3, $NF }')
    kill $d
    wait $d
    echo "@@ daemon $arm rep $rep: $(grep -o 'at exit: .*' /tmp/daemon.$arm.$rep.log)"
    echo "@@ events $arm rep $rep: $ev"
  fi
  echo "@@ run $arm rep $rep: $(tail -n 1 /tmp/$arm.$rep.json)"
  [ "$detail" = 1 ] && detail_of $arm $rep $job
  return 0
}
rep=1
while [ $rep -le $reps ]; do
  set -- $arms
  i=0
  while [ $i -lt $((rep % $#)) ]; do first=$1; shift; set -- "$@" "$first"; i=$((i + 1)); done
  for arm in "$@"; do run $arm $rep; done
  rep=$((rep + 1))
done
# median ARM FIELD
median() {
  for r in $(seq $reps); do num "$2" /tmp/$1.$r.json; done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
# worst ARM FIELD: the largest over the reps (the worst step of any run)
worst() {
  for r in $(seq $reps); do num "$2" /tmp/$1.$r.json; done | sort -n | tail -n 1
}
solo=''
case " $arms " in *" solo "*) solo=$(median solo steps_per_s) ;; esac
for arm in $arms; do
  s=$(median $arm steps_per_s); p50=$(median $arm step_p50_ms); p99=$(median $arm step_p99_ms)
  max=$(worst $arm step_max_ms)
  rel=null
  [ -n "$solo" ] && rel=$(awk -v a="$s" -v b="$solo" 'BEGIN { printf "%.2f", a / b }')
  echo "@@ $arm steps_per_s=$s relative=$rel step_p50_ms=$p50 step_p99_ms=$p99 worst_step_ms=$max"
  json="$json\"$arm\":{\"steps_per_s\":$s,\"relative\":$rel,\"step_p50_ms\":$p50,"
  json="$json\"step_p99_ms\":$p99,\"worst_step_ms\":$max},"
done
echo "@@ {${json%,}}"
GUEST
out=$(mktemp)
trap 'rm -f "$guest" "$out"' EXIT
"$repo/tests/vm/run-in-vm.sh" --add "$guest" --add "$build/lib" -- sh "$guest" | grep '^@@' | tee "$out"
# The zernel arm's phase changes by delay, summed over its reps (the daemon's exit line), and the
# phase timer's runs per second of the job's runs (elapsed_s) and per vCPU (ZERNEL_VM_SMP, 2).
smp=${ZERNEL_VM_SMP:-2}
job_s=$(sed -n 's/^@@ run zernel rep .*"elapsed_s":\([0-9.]*\).*/\1/p' "$out" | awk '{ s += $1 } END { print s + 0 }')
probe_kicks=$(sed -n 's/^@@ daemon zernel rep .*, \([0-9]*\) kicks by the probes).*/\1/p' "$out" | awk '{ s += $1 } END { print s + 0 }')
sed -n 's/^@@ daemon zernel rep .*acted on after <= 0.1 ms \([0-9]*\), <= 1 ms \([0-9]*\), <= 4 ms \([0-9]*\), more \([0-9]*\) .*(\([0-9]*\) by the tick, \([0-9]*\) CPU kicks\(, \([0-9]*\) phase timer runs\)\{0,1\}[,)].*/\1 \2 \3 \4 \5 \6 \8/p' "$out" |
  awk -v smp="$smp" -v s="$job_s" -v pk="$probe_kicks" '{ a += $1; b += $2; c += $3; d += $4; t += $5; k += $6; f += $7 }
       END { n = a + b + c + d
             if (n > 0) printf "@@ zernel phase changes %d: <= 0.1 ms %d, <= 1 ms %d, <= 4 ms %d, more %d (%d by the tick, %d CPU kicks, %d of them by the probes); within 1 ms %.1f %%; phase timer runs %d (%.0f/s per vCPU over the job'"'"'s %.1f s)\n", n, a, b, c, d, t, k, pk, 100 * (a + b) / n, f, (s > 0 ? f / s / smp : 0), s }'
