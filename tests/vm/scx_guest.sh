#!/bin/sh
# shellcheck shell=dash
# shellcheck disable=SC2317,SC2086,SC2015 # checks run as "check_$check"; pid lists split on purpose
# Guest side of the sched_ext VM tests (busybox sh, run by tests/vm/scx_*_test.sh through
# run-in-vm.sh). Usage: scx_guest.sh CHECK... with CHECK one of
#   attach    the scheduler attaches (state, ops name, tasks on sched_ext), detaches cleanly
#             (UNREG, state disabled), partial switch moves only decided tasks and restores them
#   eject_fail the kernel ejects the scheduler (injected scx_bpf_error, sysrq-S): reported with
#             kind, reason and restart advice; tasks keep running
#   kill9     kill -9 of the driver returns every task to the default scheduler within 2 s
#   weights   two pinned hogs with weights 3000:1000 share a CPU 3:1 (within 15 %); two tenants
#             of cpu.weight 300:100 with 1 and 3 hogs share it 3:1 as tenants; a hog of weight
#             110 beside one of 29104 is rescued by the starvation bound about once a second
#   latency   wakeup latency of a periodic task among batch hogs: p99 and median with preempt +
#             latency target at most a quarter of those without (see check_latency)
#   churn     thousands of short-lived processes and threads, no ejection
#   sharing   a real node's sharing: a thread that ran alone keeps running when hogs arrive;
#             cpu.max caps a cgroup; sibling cgroups share by cpu.weight, also a group entitled
#             to exactly one CPU per thread and a pinned thread beside one whose share exceeds its
#             CPU; a tenant is one level of the cgroup tree (vs untenanted cgroups, splits with
#             more threads than CPUs, its class); a task preempted by a SCHED_FIFO task moves to
#             another CPU; on a guest of two LLCs (case llc, not in the default list) groups
#             started on one LLC each share by weight across the two queues
#   bench     pipe ping-pong and messaging under EEVDF, zernel, scx_simple (if present) and an
#             older zernel driver ($SCX_BENCH_BASE, if set), in rounds of rotating order
# Results are "@@ " lines on stdout; the exit status is the number of failed checks, or 77 when
# none failed but one could not measure (the latency check on a host too noisy).
# Env: SCX_DRIVER (zernel-scx-driver), SCX_SHARE_SECS (10), SCX_ALONE_SECS (40), SCX_SHARE_CASES,
# SCX_WEIGHT_SECS (10), SCX_CHURN_SECS (60), SCX_LAT_COUNT (1000), SCX_BENCH_REPS (3),
# SCX_BENCH_BASE (none), SCX_BENCH_PIPE (20000 round trips), SCX_BENCH_SCHEDS (all of them),
# SCX_BENCH_BPFSTATS (1: also the BPF schedulers' own run time per pipe round trip; needs bpftool),
# SCX_BENCH_CGROUP (1: the benchmark's processes in the cgroup /bench/pair, not the root cgroup),
# SCX_BENCH_PRODUCT (1: a small training job on the emulated GPU runs beside every arm, and the
# arm zernel_product runs the daemon itself, --backend sched_ext with its probes, following it;
# needs build/lib's fake GPU libraries in the guest).
# shellcheck source=tests/vm/guest-lib.sh
. /zernel/guest-lib.sh  # r, ok, bad, state, uptime_cs, wait_state, ticks, ... (run-in-vm.sh adds it)
skipped=0   # checks that could not measure (exit 77 when nothing failed)
provoked=0  # abnormal exits that a check caused on purpose
sched_field() { awk -v f="$2" '$1 == f { print $3 }' "/proc/$1/sched"; }
# start_driver ARGS...: runs $DRIVER (zernel-scx-driver) in the background ($drv), output in /tmp/drv.*,
# and waits for the scheduler to be enabled: up to 60 s (an attach beside 4 hogs took 16 s on a
# host at load 10, and the verifier's share of a vCPU shrinks with the host's load).
DRIVER=${SCX_DRIVER:-zernel-scx-driver}
start_driver() {
  $DRIVER --stats "$@" > /tmp/drv.out 2> /tmp/drv.err &
  drv=$!
  if ! ms=$(wait_state enabled 6000); then
    bad "driver did not attach: $(tail -n 5 /tmp/drv.err)"
    kill -9 $drv 2> /dev/null
    return 1
  fi
  r "attach took ${ms}ms"
}
# stop_driver: SIGTERM, wait; $drv_rc, and the exit kind from its JSON in $drv_exit.
stop_driver() {
  kill -TERM $drv
  wait $drv
  drv_rc=$?
  drv_exit=$(sed -n 's/.*"kind_name":"\([A-Z_]*\)".*/\1/p' /tmp/drv.out)
}
json_num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" /tmp/drv.out; }
abnormal_exits() {
  dmesg | grep 'sched_ext: BPF scheduler .* disabled' | grep -v 'unregistered from user space'
}

check_attach() {
  # A decided process that exits during the run: the driver forgets it (map entry deleted).
  zernel-scx-probe spin 1 &
  short=$!
  start_driver --run-seconds 4 --decision "$short:weight=2000" || return
  [ "$(cat $SX/root/ops)" = zernel ] && ok "attach: root/ops is zernel" ||
    bad "attach: root/ops is '$(cat $SX/root/ops)'"
  [ "$(sched_field $$ ext.enabled)" = 1 ] &&
    ok "attach: full switch puts this shell on sched_ext" ||
    bad "attach: this shell is not on sched_ext"
  wait $drv
  rc=$?
  if ms=$(wait_state disabled 200); then ok "detach: state disabled ${ms}ms after exit"
  else bad "detach: state $(state)"; fi
  grep -q '"kind_name":"UNREG"' /tmp/drv.out && [ $rc = 0 ] &&
    ok "detach: driver rc 0, exit UNREG" ||
    bad "detach: rc=$rc $(cat /tmp/drv.out) $(tail -n 3 /tmp/drv.err)"
  [ "$(json_num written)" = 1 ] && [ "$(json_num deleted)" = 1 ] && [ "$(json_num batches)" = 1 ] &&
    ok "decisions: 1 written in 1 batch, rewritten never, deleted when the process exited" ||
    bad "decisions: written/deleted/batches: $(cat /tmp/drv.out)"
  [ "$(sched_field $$ ext.enabled)" = 0 ] && ok "detach: this shell is back on the fair class" ||
    bad "detach: this shell still on sched_ext"

  # Partial switch: only the decided process moves (policy 7 = SCHED_EXT), and is restored.
  zernel-scx-probe spin 120 &
  hog=$!
  start_driver --partial --decision "$hog:weight=2000" || { kill $hog; return; }
  usleep 300000
  p=$(sched_field $hog policy); e=$(sched_field $hog ext.enabled); s=$(sched_field $$ ext.enabled)
  [ "$p" = 7 ] && [ "$e" = 1 ] && [ "$s" = 0 ] &&
    ok "partial: decided process on SCHED_EXT, this shell not" ||
    bad "partial: hog policy=$p ext=$e, shell ext=$s"
  stop_driver
  p=$(sched_field $hog policy)
  [ "$p" = 0 ] && [ "$drv_rc" = 0 ] && ok "partial: policy restored to SCHED_OTHER on exit" ||
    bad "partial: policy $p after exit, rc=$drv_rc"
  kill $hog; wait $hog 2> /dev/null
}

# Decision lookups only where a decision changed (issue 24 item 2): one decided process whose
# decision the driver changes every 10 ms (--rewrite), beside two hogs and four threads that wake
# every 2 ms, none of them decided. A thread re-reads its process's decision only when that
# process's generation moved: the undecided ones (and the guest's own threads) look at most once
# per 20 changes (a slot they share by chance), not after every change.
check_decision_scope() {
  # The load outlives any attach (it is killed below): with the spinners' 40 s, an attach of
  # 38-39 s under EEVDF beside them (the verifier's share of 2 vCPUs with 7 busy threads) left
  # the decided one exiting 1 s into the run, and the driver, forgetting its decision, wrote 4-91
  # (traced: its 567 wakeups waited 0.2 ms on average; it was not starved).
  zernel-scx-probe spin 120 & d1=$!
  zernel-scx-probe spin 120 & u1=$!
  zernel-scx-probe spin 120 & u2=$!
  dutys=''
  for _ in 1 2 3 4; do zernel-scx-probe duty 1 1 120 & dutys="$dutys $!"; done
  # The driver at nice -10 so that its attach takes about 10 s, not 25-40 s.
  _driver=$DRIVER
  DRIVER="zernel-scx-probe nice -10 $_driver"
  start_driver --run-seconds 6 --interval-ms 10 --rewrite --decision "$d1:weight=2000" ||
    { DRIVER=$_driver; kill $d1 $u1 $u2 $dutys; return; }
  DRIVER=$_driver
  wait $drv
  rc=$?
  kill $d1 $u1 $u2 $dutys 2> /dev/null; wait $d1 $u1 $u2 $dutys 2> /dev/null
  written=$(json_num written)
  looks=$(json_num decision_lookup)
  none=$(json_num decision_lookup_none)
  r "decision scope: $written decisions written, $looks lookups, $none of them found none"
  if [ "$rc" != 0 ] || [ -z "$written" ] || [ "$written" -lt 100 ]; then
    bad "decision scope: rc=$rc, $written writes (want >= 100): $(tail -n 3 /tmp/drv.err)"
  elif [ $((none * 20)) -le "$written" ]; then
    ok "decision scope: undecided threads looked $none times for $written changes (<= 1 in 20)"
  else
    bad "decision scope: undecided threads looked $none times for $written changes (> 1 in 20)"
  fi
}

# The kernel ejects the scheduler (an scx_bpf_error() injected by the test knob, then sysrq-S):
# the driver reports the exit kind, reason and restart advice, and every task keeps running.
check_eject_fail() {
  # It must outlive two attaches and an ejection: 15-31 s an attach for the ASan loader in CI
  # (scripts/asan-loader.sh), where a 30 s spin ended before the sysrq check looked at it.
  zernel-scx-probe spin 180 & w=$!
  start_driver --inject-error-ms 1500 || { kill $w; return; }
  provoked=$((provoked + 1))
  wait $drv
  rc=$?
  if grep -q '"kind_name":"ERROR_BPF"' /tmp/drv.out && grep -q 'injected error' /tmp/drv.out &&
    grep -q '"restart":"restart_with_backoff"' /tmp/drv.out && [ $rc = 2 ] &&
    [ "$(state)" = disabled ] && kill -0 $w; then
    ok "eject: scx_bpf_error -> ERROR_BPF reported, restart_with_backoff, rc 2, tasks run on"
  else
    bad "eject: rc=$rc state=$(state) $(cat /tmp/drv.out) $(tail -n 3 /tmp/drv.err)"
  fi
  echo 1 > /proc/sys/kernel/sysrq
  start_driver || { kill $w; return; }
  echo S > /proc/sysrq-trigger
  provoked=$((provoked + 1))
  wait $drv
  rc=$?
  if grep -q '"kind_name":"SYSRQ"' /tmp/drv.out && grep -q '"restart":"none"' /tmp/drv.out &&
    [ $rc = 2 ] && [ "$(state)" = disabled ] && kill -0 $w; then
    ok "eject: sysrq-S -> SYSRQ reported, no restart advised, rc 2"
  else
    bad "eject: sysrq rc=$rc state=$(state) $(cat /tmp/drv.out)"
  fi
  kill $w; wait $w 2> /dev/null
}

check_kill9() {
  zernel-scx-probe spin 120 & w1=$!
  zernel-scx-probe spin 120 & w2=$!
  start_driver --decision "$w1:weight=3000,preempt=1" || { kill $w1 $w2; return; }
  usleep 500000
  kill -9 $drv
  t0=$(uptime_cs)
  wait $drv 2> /dev/null
  if ms=$(wait_state disabled 1000); then
    ms=$((($(uptime_cs) - t0) * 10))
    [ "$ms" -le 2000 ] && ok "kill -9: default scheduler back after ${ms}ms" ||
      bad "kill -9: took ${ms}ms (limit 2000)"
  else
    bad "kill -9: state still $(state) after 10 s"
  fi
  a1=$(ticks $w1); b1=$(ticks $w2)
  sleep 1
  a2=$(ticks $w1); b2=$(ticks $w2)
  if kill -0 $w1 && kill -0 $w2 && [ "$a2" -gt "$a1" ] && [ "$b2" -gt "$b1" ] &&
    [ "$(sched_field $w1 ext.enabled)" = 0 ]; then
    ok "kill -9: every task still runs (workers +$((a2 - a1)) +$((b2 - b1)) ticks in 1 s)"
  else
    bad "kill -9: workers not running after the scheduler died"
  fi
  kill $w1 $w2; wait $w1 $w2 2> /dev/null
}

# share NAME WANT SECS PIDS_A -- PIDS_B: CPU ticks of group A vs group B over SECS seconds;
# passes when A/B (the median of five windows) is within 15 % of WANT (an integer); ratio, below.
share() {
  name=$1 want=$2 secs=$3
  shift 3
  ratio "$name" $((want * 100)) 15 "$secs" "$@"
}

check_weights() {
  secs=${SCX_WEIGHT_SECS:-10}
  # Two processes pinned to CPU 1, weights 3000 and 1000.
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & h1=$!
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & h2=$!
  start_driver --decision "$h1:weight=3000" --decision "$h2:weight=1000" ||
    { kill $h1 $h2; return; }
  sleep 1
  share "weights 3000:1000 on one CPU" 3 "$secs" $h1 -- $h2
  stop_driver
  [ "$drv_exit" = UNREG ] || bad "weights: driver exit $drv_exit rc $drv_rc"
  kill $h1 $h2; wait $h1 $h2 2> /dev/null

  # Tenants: A (cpu.weight 300) runs 1 hog, B (cpu.weight 100) runs 3, all pinned to CPU 1 and
  # all at weight 1024: as tenants A gets 3/4, whatever B's number of processes.
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & ta=$!
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & tb1=$!
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & tb2=$!
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & tb3=$!
  start_driver --decision "$ta:tenant=0:300" --decision "$tb1:tenant=1:100" \
    --decision "$tb2:tenant=1:100" --decision "$tb3:tenant=1:100" ||
    { kill $ta $tb1 $tb2 $tb3; return; }
  sleep 1
  share "tenants 300:100 with 1 and 3 processes" 3 "$secs" $ta -- $tb1 $tb2 $tb3
  stop_driver
  [ "$drv_exit" = UNREG ] || bad "tenants: driver exit $drv_exit rc $drv_rc"
  kill $ta $tb1 $tb2 $tb3; wait $ta $tb1 $tb2 $tb3 2> /dev/null

  # Starvation bound: weights 29104:110 on one CPU. Honest weighting would run the light task
  # one 20 ms slice every ~5 s; the 1 s bound rescues it about once a second.
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & sh1=$!
  taskset -c 1 zernel-scx-probe spin $((secs + 60)) & sl=$!
  start_driver --decision "$sh1:weight=29104" --decision "$sl:weight=110" ||
    { kill $sh1 $sl; return; }
  sleep 1
  l0=$(ticks $sl)
  sleep "$secs"
  l1=$(ticks $sl)
  stop_driver
  kill $sh1 $sl; wait $sh1 $sl 2> /dev/null
  rescues=$(json_num starve_rescue)
  msg="starvation bound: light task ran $((l1 - l0)) ticks in ${secs}s, $rescues rescues"
  if [ "${rescues:-0}" -ge $((secs / 2)) ] && [ $((l1 - l0)) -ge $((secs / 2)) ]; then ok "$msg"
  else bad "$msg"; fi
}

# wakelat_run DECISION: wakeup latency of a task that wakes every 2 ms (SCX_LAT_COUNT times)
# under zernel among 4 CPU hogs on the 2 vCPUs, batch processes with 100 ms slices. DECISION is
# the measured task's decision ("" = none). Sets $line, $p50, $p99 (us) and $kicks.
wakelat_run() {
  want=$1 hogs=
  for _ in 1 2 3 4; do zernel-scx-probe spin 60 & hogs="$hogs $!"; done
  zernel-scx-probe wakelat -w 2000 "${SCX_LAT_COUNT:-1000}" > /tmp/lat.out &
  lat=$!
  while ! grep -q ready /tmp/lat.out 2> /dev/null; do usleep 10000; done
  set --
  for h in $hogs; do set -- "$@" --decision "$h:slice_us=100000"; done
  if [ -n "$want" ]; then set -- "$@" --decision "$lat:$want"; fi
  start_driver "$@" || { kill $hogs $lat; return 1; }
  sleep 1
  kill -USR1 $lat
  wait $lat
  stop_driver
  kill $hogs; wait $hogs 2> /dev/null
  line=$(grep wakelat /tmp/lat.out)
  p99=$(pct "$line" p99) p50=$(pct "$line" p50)
  kicks=$(json_num kick_preempt)
}
pct() { echo "$1" | sed -n "s/.*$2_us=\([0-9]*\).*/\1/p"; }

# check_latency: the same periodic task with no decision, then with a preempting one (50 us
# target). EEVDF runs the load first (no decisions, default slices), for reference and as a gauge
# of the host's own noise: the vCPUs are threads on a shared 2-core host.
#
# "Well below": at most a quarter of the undecided figures, p99 and median. The host's stalls of
# a vCPU reach every scheduler, and a preempting wakeup crosses vCPUs (the IPI to the victim), so
# with host noise N (EEVDF's p99 on the same load) the preempting task's p99 can come near 2N. A
# 4x gap is therefore only demanded when 8N is under the undecided p99; above that a miss says
# nothing about the scheduler and is reported as skipped, with the figures. A miss is measured
# again (fresh hogs and driver), up to twice, each time after a new EEVDF gauge of the noise, and
# N is the largest gauge: a scheduler defect misses every time on a quiet host, while a host
# that became busy after the first gauge (CI's builds beside the tests) shows in the next one.
# Every run is printed.
latency_preempt_run() {
  wakelat_run "weight=9537,preempt=1,latency_us=50,slice_us=5000,phase=DataLoading" || return
  r "latency zernel, preempt + 50us target: $line"
  r "latency zernel counters: $(sed -n 's/.*"stats":{\([^}]*\)}.*/\1/p' /tmp/drv.out)"
  msg="p99 ${p99}us (p50 ${p50}us) with preempt vs ${base}us (${base50}us) without"
}
latency_met() { [ $((p99 * 4)) -le "$base" ] && [ $((p50 * 4)) -le "$base50" ]; }

# latency_gauge: EEVDF's p99 on the same load (us), printed; raises $noise to it.
latency_gauge() {
  hogs=
  for _ in 1 2 3 4; do zernel-scx-probe spin 60 & hogs="$hogs $!"; done
  eevdf=$(zernel-scx-probe wakelat 2000 "${SCX_LAT_COUNT:-1000}")
  kill $hogs; wait $hogs 2> /dev/null
  r "latency eevdf: $eevdf"
  g=$(pct "$eevdf" p99)
  if [ "${g:-0}" -gt "${noise:-0}" ]; then noise=$g; fi
}

check_latency() {
  noise=0
  latency_gauge
  wakelat_run "" || return
  base=$p99 base50=$p50
  r "latency zernel, no decision: $line"
  latency_preempt_run || return
  if [ -z "$p99" ] || [ -z "$base" ] || [ "${kicks:-0}" = 0 ]; then
    bad "latency: no measurement or no preemption: $msg (kicks $kicks)"
    return
  fi
  missed=
  for attempt in 2 3; do
    if latency_met; then
      ok "latency: $msg ($kicks preemption kicks${missed:+; missed before: $missed})"
      return
    fi
    if [ $((noise * 8)) -gt "$base" ]; then
      skipped=$((skipped + 1))
      r "SKIP latency: host too noisy to show a 4x gap (EEVDF p99 ${noise}us): $msg"
      return
    fi
    missed="${missed:+$missed; }$msg"
    r "latency: missed ($msg); gauging the host and measuring again (run $attempt of 3)"
    latency_gauge
    latency_preempt_run || return
    if [ -z "$p99" ]; then
      bad "latency: no measurement in run $attempt; missed before: $missed"
      return
    fi
  done
  if latency_met; then
    ok "latency: $msg ($kicks preemption kicks; missed before: $missed)"
  elif [ $((noise * 8)) -gt "$base" ]; then
    skipped=$((skipped + 1))
    r "SKIP latency: host too noisy to show a 4x gap (EEVDF p99 up to ${noise}us): $msg; missed before: $missed"
  else
    bad "latency: $msg, and before: $missed (kicks $kicks, EEVDF p99 up to ${noise}us)"
  fi
}

check_churn() {
  secs=${SCX_CHURN_SECS:-60}
  # Decided work beside the churn: a preempting periodic task (tenant 0), a low-weight hog
  # (tenant 1) and an undecided hog, so that every path of the scheduler runs under churn.
  zernel-scx-probe spin $((secs + 20)) & h1=$!
  zernel-scx-probe spin $((secs + 20)) & h2=$!
  zernel-scx-probe wakelat 2000 $((secs * 400)) > /tmp/churnlat.out & wl=$!
  start_driver --decision "$wl:tenant=0:200,weight=9537,preempt=1,latency_us=100,slice_us=3000" \
    --decision "$h1:tenant=1:100,weight=336" || { kill $h1 $h2 $wl; return; }
  out=$(zernel-scx-probe churn "$secs" 16 8)
  crc=$?
  st=$(state)
  stop_driver
  kill $h1 $h2 $wl 2> /dev/null; wait $h1 $h2 $wl 2> /dev/null
  r "churn: $out rescues=$(json_num starve_rescue) kicks=$(json_num kick_preempt)"
  if [ $crc = 0 ] && [ "$st" = enabled ] && [ "$drv_exit" = UNREG ] && [ "$drv_rc" = 0 ] &&
    [ "$(abnormal_exits | grep -c .)" = "$provoked" ]; then
    procs=$(echo "$out" | sed -n 's/.*procs=\([0-9]*\).*/\1/p')
    threads=$(echo "$out" | sed -n 's/.*threads=\([0-9]*\).*/\1/p')
    ok "churn: no ejection during ${secs}s of churn: $procs processes, $threads threads created"
  else
    bad "churn: rc=$crc state=$st exit=$drv_exit drv_rc=$drv_rc $(abnormal_exits)" \
      "$(tail -n 3 /tmp/drv.err)"
  fi
}

# bench_in CMD...: runs CMD where the benchmark runs: in the cgroup /bench/pair, two levels below
# the root as a service under system.slice is, when SCX_BENCH_CGROUP is set (a thread of a
# cgroup is counted in that cgroup's node: the hash lookups and tree walks the root cgroup's
# threads skip); else in the root cgroup, like the rest of the guest.
bench_in() {
  if [ -n "${SCX_BENCH_CGROUP:-}" ]; then
    mkdir -p "$CG/bench/pair" && echo +cpu > "$CG/bench/cgroup.subtree_control" &&
      sh -c 'echo $$ > "$0/bench/pair/cgroup.procs" && exec "$@"' "$CG" "$@"
  else
    "$@"
  fi
}

# bench_one NAME ROUND: pipe ping-pong and messaging once, under whatever scheduler is loaded.
bench_one() {
  rt=${SCX_BENCH_PIPE:-20000}
  # (the product arm: the probes' programs by name too)
  progs_all=''
  [ "$1" = zernel_product ] && progs_all=all
  [ -n "${SCX_BENCH_BPFSTATS:-}" ] && c0=$(bpf_cost) && p0=$(bpf_cost probes) &&
    bpf_progs $progs_all > /tmp/progs0
  i0=$(ipis)
  j0=$(job_cpu_ms)
  r "bench $1 round $2 $(bench_in zernel-schedbench pipe "$rt")"
  [ -n "$job" ] && r "bench $1 round $2 job cpu during pipe $(($(job_cpu_ms) - j0)) ms"
  # Rescheduling and function-call IPIs (all CPUs) per 100 round trips: cross-CPU wakeups.
  i1=$(ipis)
  set -- "$1" "$2" $i0 $i1
  r "bench $1 round $2 ipi res $((($5 - $3) * 100 / rt)) cal $((($6 - $4) * 100 / rt)) per 100 round trips"
  if [ -n "${SCX_BENCH_BPFSTATS:-}" ] && [ "$1" != eevdf ]; then
    c1=$(bpf_cost)
    bpf_progs $progs_all > /tmp/progs1
    set -- "$1" "$2" $c0 $c1
    r "bench $1 round $2 bpf $((($6 - $4) / rt)) ns in $((($5 - $3) * 10 / rt)) calls/10 per round trip"
    # Per callback: ns per call and calls per 100 round trips.
    awk -v rt="$rt" -v who="bench $1 round $2 prog" 'NR == FNR { c[$1] = $2; t[$1] = $3; next }
      $2 > c[$1] { printf "@@ %s %s %d ns/call %d calls/100\n", who, $1, ($3 - t[$1]) / ($2 - c[$1]),
        ($2 - c[$1]) * 100 / rt }' /tmp/progs0 /tmp/progs1
    # The other BPF programs (the daemon's probes, in the zernel_product arm).
    p1=$(bpf_cost probes)
    set -- "$1" "$2" $p0 $p1
    [ "$3" = "$5" ] ||
      r "bench $1 round $2 probes $((($6 - $4) / rt)) ns in $((($5 - $3) * 10 / rt)) calls/10 per round trip"
  fi
  [ -n "${SCX_BENCH_BPFSTATS:-}" ] && bpf_progs $progs_all > /tmp/progs0
  j0=$(job_cpu_ms)
  r "bench $1 round $2 $(bench_in zernel-schedbench msg 4 200)"
  # With SCX_BENCH_PRODUCT, the CPU the job beside it took meanwhile: a job the product follows
  # is served before the 80 tasks, where the other arms let them crowd it out.
  [ -n "$job" ] && r "bench $1 round $2 job cpu during msg $(($(job_cpu_ms) - j0)) ms"
  # Per callback under the messaging load, which keeps every CPU busy (4 groups of 20 tasks): the
  # cost per call as the CPU count grows (issue 24), where the pipe pair leaves most CPUs idle.
  if [ -n "${SCX_BENCH_BPFSTATS:-}" ] && [ "$1" != eevdf ]; then
    bpf_progs $progs_all > /tmp/progs1
    bpf_progs_delta "bench $1 round $2 msgprog" /tmp/progs0 /tmp/progs1
  fi
}

# ipis: "RES CAL", rescheduling and function-call interrupts so far, summed over the CPUs.
ipis() {
  awk '$1 == "RES:" || $1 == "CAL:" { n = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i
    v[$1] = n } END { print v["RES:"] + 0, v["CAL:"] + 0 }' /proc/interrupts
}

# bpf_cost [probes]: "CALLS NS" summed over the loaded struct_ops programs (the sched_ext
# scheduler's callbacks), or with "probes" over every other program (the daemon's probes), from the
# kernel's BPF run-time statistics (kernel.bpf_stats_enabled, bpftool).
bpf_cost() {
  bpftool prog show 2> /dev/null | awk -v probes="${1:-}" '($2 == "struct_ops") == (probes == "") {
    for (i = 1; i < NF; i++) { if ($i == "run_time_ns") t += $(i + 1); if ($i == "run_cnt") c += $(i + 1) } }
    END { print c + 0, t + 0 }'
}

# product_follows: waits (30 s) until the daemon on port 19099 follows the job's processes.
product_follows() {
  _t0=$(uptime_cs)
  until wget -q -O - http://127.0.0.1:19099/metrics 2> /dev/null |
    grep -q '^zernel_scheduler_tasks{type="ml"} [1-9]'; do
    [ $(($(uptime_cs) - _t0)) -gt 3000 ] && return 1
    usleep 200000
  done
}

# threads_cpu_ms PID...: the CPU time so far of every thread of the PIDs, in ms (schedstat).
threads_cpu_ms() {
  for _p in "$@"; do cat /proc/"$_p"/task/*/schedstat 2> /dev/null; done |
    awk '{ s += $1 } END { printf "%d\n", s / 1e6 }'
}
# job_cpu_ms: threads_cpu_ms of the SCX_BENCH_PRODUCT job's processes (named zernel-workload);
# empty without the job.
job_cpu_ms() {
  [ -n "$job" ] || return 0
  _pids=''
  for _c in /proc/[0-9]*/comm; do
    _p=${_c%/comm}
    read -r _n < "$_c" 2> /dev/null && [ "$_n" = zernel-workload ] && _pids="$_pids ${_p#/proc/}"
  done
  # shellcheck disable=SC2086 # a list of pids
  threads_cpu_ms $_pids
}
# product_events: "KIND COUNT ..." of the scheduler's counters that cut or preempt a slice, from
# the zernel_product arm's daemon; product_events_delta BEFORE AFTER: "KIND +N ..." between two.
product_events() {
  wget -q -O - http://127.0.0.1:19099/metrics 2> /dev/null | awk -F'[{}"= ]+' \
    '/^zernel_scheduler_bpf_events_total\{kind="(kick_preempt|yield_cut|owed_cut|phase_kick|starve_rescue)"\}/ { printf "%s %s ", $3, $NF }'
}
product_events_delta() {
  awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " ")
    if (n != m || n == 0) { print "(not read)"; exit }
    for (i = 1; i < n; i += 2) printf "%s +%d ", y[i], y[i + 1] - x[i + 1] }'
}

# bench_sched NAME ROUND: loads scheduler NAME, runs bench_one, unloads it. NAME is eevdf (the
# default scheduler: nothing to load), zernel, zernel_base (the driver in $SCX_BENCH_BASE: an
# older build to compare a change with), zernel_product (the daemon with --backend sched_ext and
# its probes, following the job of SCX_BENCH_PRODUCT) or scx_simple.
bench_sched() {
  case $1 in
    eevdf) bench_one "$1" "$2" ;;
    zernel|zernel_base)
      [ "$1" = zernel ] && DRIVER=zernel-scx-driver || DRIVER=$SCX_BENCH_BASE
      start_driver && { bench_one "$1" "$2"; stop_driver
        # Changes of the sharing tree over the driver's run (attach, pipe, msg), each of which
        # makes every cached share stale (an older build may not count them: then none).
        r "bench $1 round $2 tree changes $(json_num tree_change)"
        # Slices of tasks without a decision ended at a tick (yield.bpf.h).
        r "bench $1 round $2 cuts yield $(json_num yield_cut) owed $(json_num owed_cut)"; }
      DRIVER=zernel-scx-driver ;;
    zernel_product)
      # The whole product: the daemon (probes, discovery, decisions) with the scheduler, following
      # the job that check_bench runs beside every arm.
      ZERNEL_USERSPACE_JOURNAL=/tmp/run/us.journal ZERNEL_SETTINGS_JOURNAL=/tmp/run/set.journal \
        zernel-scheduler --config /tmp/bench.toml --backend sched_ext --emulated-gpu \
        --control-socket '' > /tmp/daemon.log 2>&1 &
      dp=$!
      if wait_state enabled 6000 > /dev/null && product_follows; then
        # (own names: bench_one uses c0 and c1)
        pev0=$(product_events) pcpu0=$(threads_cpu_ms $dp)
        bench_one "$1" "$2"
        # What the daemon took and reordered while the two loads ran: its own CPU (every thread),
        # and the scheduler's counters that end or preempt another task's slice.
        pcpu1=$(threads_cpu_ms $dp)
        r "bench $1 round $2 daemon cpu $((pcpu1 - pcpu0)) ms; events $(product_events_delta "$pev0" "$(product_events)")"
        kill -TERM $dp; wait $dp; wait_state disabled 500 > /dev/null
      else
        bad "the daemon did not attach or follow the job: $(tail -n 3 /tmp/daemon.log)"
        kill -9 $dp 2> /dev/null
      fi ;;
    scx_simple)
      scx_simple > /tmp/simple.log 2>&1 &
      sp=$!
      if wait_state enabled 3000 > /dev/null; then
        bench_one "$1" "$2"
        kill -INT $sp; wait $sp; wait_state disabled 500 > /dev/null
      else
        bad "scx_simple did not attach"
        kill -9 $sp 2> /dev/null
      fi ;;
  esac
}

# check_bench: SCX_BENCH_REPS rounds; each round runs every scheduler once, the order rotated
# from round to round (ABC, BCA, CAB, ...), so that a host getting busier or calmer during the
# run does not favour the scheduler that happens to run first or last.
check_bench() {
  scheds="eevdf zernel"
  if [ -n "${SCX_BENCH_BASE:-}" ] && [ -x "$SCX_BENCH_BASE" ]; then
    scheds="$scheds zernel_base"
  fi
  command -v scx_simple > /dev/null && scheds="$scheds scx_simple"
  [ -n "${SCX_BENCH_PRODUCT:-}" ] && scheds="$scheds zernel_product"
  [ -n "${SCX_BENCH_SCHEDS:-}" ] && scheds=$SCX_BENCH_SCHEDS
  job=''
  if [ -n "${SCX_BENCH_PRODUCT:-}" ]; then
    # A small training job on the emulated GPU beside every arm (the same load for each), which
    # the zernel_product arm's daemon follows: one rank, one DataLoader worker, short steps.
    ip link set lo up
    printf '[telemetry]\nmetrics_port = 19099\n' > /tmp/bench.toml
    TMPDIR=/tmp zernel-workload --emulated-gpu --ranks 1 --workers 1 --steps 1000000 --data-ms 5 \
      --gpu-ms 20 --nccl-ms 2 --optimizer-ms 2 --batch-kib 16 > /tmp/benchjob.json 2>&1 &
    job=$!
  fi
  if [ -n "${SCX_BENCH_BPFSTATS:-}" ]; then
    echo 1 > /proc/sys/kernel/bpf_stats_enabled ||
      { bad "bench: cannot enable BPF run-time statistics"; return; }
    command -v bpftool > /dev/null || { bad "bench: SCX_BENCH_BPFSTATS needs bpftool"; return; }
  fi
  set -- $scheds
  n=$#
  for round in $(seq "${SCX_BENCH_REPS:-3}"); do
    k=$(((round - 1) % n)) order='' i=0
    for s in $scheds $scheds; do
      [ $i -ge $k ] && [ $i -lt $((k + n)) ] && order="$order $s"
      i=$((i + 1))
    done
    r "bench round $round order $order"
    for s in $order; do bench_sched "$s" "$round"; done
  done
  if [ -n "$job" ]; then
    kill $job; wait $job
    r "bench job: $(tail -n 1 /tmp/benchjob.json)"
  fi
}

# ratio NAME WANT100 TOL SECS PIDS_A -- PIDS_B: CPU ticks of group A vs B over SECS, in five
# windows; passes when the median window's A/B is within TOL % of WANT100 / 100. The median, not
# the sum: a vCPU is a thread of a shared host, and a host stall of a few hundred ms is charged,
# as run time, to whichever task the guest was running (one such stall turned 3.0 into 3.56 over
# 10 s on a busy CI machine). A stall lands in one window. Sets $da and $db (the totals).
ratio() {
  name=$1 want=$2 tol=$3 secs=$4
  shift 4
  ga='' gb='' side=a
  for p in "$@"; do
    if [ "$p" = -- ]; then side=b; continue; fi
    if [ $side = a ]; then ga="$ga $p"; else gb="$gb $p"; fi
  done
  sum() { s=0; for p in "$@"; do s=$((s + $(ticks "$p"))); done; echo $s; }
  a0=$(sum $ga); b0=$(sum $gb)
  pa=$a0 pb=$b0 rs='' w=0
  while [ $w -lt 5 ]; do
    usleep $((secs * 200000))
    na=$(sum $ga); nb=$(sum $gb)
    wb=$((nb - pb))
    rs="$rs $((100 * (na - pa) / (wb > 0 ? wb : 1)))"
    pa=$na pb=$nb w=$((w + 1))
  done
  da=$((pa - a0)); db=$((pb - b0))
  for p in $ga $gb; do
    kill -0 "$p" 2> /dev/null || { bad "$name: process $p ended during the measurement"; return; }
  done
  got=$(for r in $rs; do echo "$r"; done | sort -n | sed -n 3p)
  lo=$((want * (100 - tol) / 100)); hi=$((want * (100 + tol) / 100))
  msg="$name: A ${da} ticks, B ${db} ticks in ${secs}s, median of 5 windows"
  msg="$msg $((got / 100)).$(printf %02d $((got % 100))) (windows x100:$rs)"
  msg="$msg (want $((want / 100)).$(printf %02d $((want % 100))) +-$tol%)"
  if [ "$got" -ge "$lo" ] && [ "$got" -le "$hi" ]; then ok "$msg"; return; fi
  each=''
  for p in $ga -- $gb; do [ "$p" = -- ] && each="$each |" || each="$each $(ticks "$p")"; done
  bad "$msg; each process's ticks since it started:$each"
}
CG=/sys/fs/cgroup
# ideal WA NA WB NB: the ideal ratio * 100 of two groups of weights WA and WB with NA and NB busy
# threads on this machine's CPUs: shares by weight, a group capped at one CPU per thread and the
# rest going to the other.
ideal() {
  awk -v wa="$1" -v na="$2" -v wb="$3" -v nb="$4" -v c="$(nproc)" 'BEGIN {
    sa = c * wa / (wa + wb); sb = c - sa
    if (sa > na) { sa = na; sb = c - na; if (sb > nb) sb = nb }
    else if (sb > nb) { sb = nb; sa = c - nb; if (sa > na) sa = na }
    printf "%d", 100 * sa / sb + 0.5 }'
}
# cg NAME WEIGHT [CPU_MAX]: a cgroup of the cpu controller under the root.
cg() {
  mkdir -p "$CG/$1"
  echo "$2" > "$CG/$1/cpu.weight"
  echo "${3:-max 100000}" > "$CG/$1/cpu.max"
}
# hogs N CGROUP [CPU]: starts N hogs (spin $hog_secs) in CGROUP, pinned to CPU if given; their
# pids in $pids.
hogs() {
  pids=''
  i=0
  pin=${3:+taskset -c $3}
  while [ $i -lt "$1" ]; do
    sh -c "echo \$\$ > $CG/$2/cgroup.procs && exec $pin zernel-scx-probe spin $hog_secs" &
    pids="$pids $!"
    i=$((i + 1))
  done
}
# runs PIDS...: their CPU time (ns) in run_ns and their runs on a CPU in run_n, summed
# (/proc/PID/schedstat).
runs() {
  run_ns=0 run_n=0
  for _p in "$@"; do
    read -r _a _b _c < "/proc/$_p/schedstat"
    run_ns=$((run_ns + _a)) run_n=$((run_n + _c))
  done
}
# start_driver_paused PIDS -- ARGS...: start_driver with the hogs PIDS stopped (SIGSTOP) until the
# scheduler is enabled. Loading beside running hogs gives the verifier 1/(hogs+1) of the CPUs:
# 22-37 s under TCG on a busy CI host, where hogs started before it ran out of time (60 s of
# wall) in the middle of the measurement.
start_driver_paused() {
  _paused=''
  while [ "$1" != -- ]; do _paused="$_paused $1"; shift; done
  shift
  # shellcheck disable=SC2086
  kill -STOP $_paused 2> /dev/null
  start_driver "$@"
  _rc=$?
  # shellcheck disable=SC2086
  kill -CONT $_paused 2> /dev/null
  return $_rc
}
stop_all() {
  stop_driver
  [ "$drv_exit" = UNREG ] || bad "$1: driver exit $drv_exit rc $drv_rc $(tail -n 3 /tmp/drv.err)"
  kill $all 2> /dev/null; wait $all 2> /dev/null
  for c in $CG/z*; do [ -d "$c" ] && rmdir "$c"; done
  all=''
}
# tenant_decisions SLOT:WEIGHT PIDS...: --decision arguments making PIDS one tenant.
tenant_decisions() {
  t=$1; shift
  for p in "$@"; do printf ' --decision %s:tenant=%s' "$p" "$t"; done
}

# Sharing as a real node has it (issue 10): late arrivals, cgroup weights and cpu.max, tenants
# as one level of the cgroup tree, thread counts above the CPU count, a higher sched class.
# On the VM's CPUs (2; ZERNEL_VM_SMP=4 for 4): the wanted ratios are computed for them (ideal).
# Hogs run in cgroups, as systemd or kubelet place them.
# SCX_SHARE_CASES picks cases (default all, in this order).
share_late() {
  # 1. A thread that ran alone (5 ms on, 5 ms off) for a while, then 4 hogs arrive.
  start_driver || return
  alone=${SCX_ALONE_SECS:-40}
  zernel-scx-probe duty 5 5 $((alone + 15)) & duty=$!
  sleep "$alone"
  cg z_hogs 100
  hogs $((4 * k)) z_hogs
  all="$duty $pids"
  t0=$(ticks $duty); sleep 2; t1=$(ticks $duty); sleep 8; t2=$(ticks $duty)
  msg="late arrival: the duty thread ran $((t1 - t0)) ticks in the 2 s after $((4 * k)) hogs came,"
  msg="$msg $((t2 - t1)) in the 8 s after"
  # Its group (the root's own threads) is owed half the machine, more than the half CPU it asks
  # for; without wakeup preemption it waits for a hog's slice to end at each wakeup, so it gets
  # 10-25 % of a CPU on 2 CPUs (EEVDF, which preempts: 30-35 %). Starved, as in the issue, it
  # got 0 and 4. On 4 CPUs it found an idle CPU at nearly every wakeup while alone, never passed
  # through the queue, and a scheduler whose clock follows only the queue (cef1101) let it run
  # 20 s ahead: 23 and 73 there (EEVDF 68 and 267; 46 and 186 after 2 s alone); it wants 100
  # and 400, and a hog's slice end comes twice as often as on 2: at least 20 and 150. (The first
  # window was 30 until a correct scheduler gave 28 and 194 in one of three runs on 2026-12-03,
  # 47 and 65 in the others: two seconds hold too few wakeups for a tighter bound; the 8 s
  # window still fails that scheduler's 73.)
  lo1=10 lo2=60
  [ "$(nproc)" -lt 4 ] || { lo1=20 lo2=150; }
  if [ $((t1 - t0)) -ge $lo1 ] && [ $((t2 - t1)) -ge $lo2 ]; then ok "$msg"; else bad "$msg"; fi
  stop_all late
}

share_cpumax() {
  # 2. cpu.max 20000/100000: a hog limited to 20 % of one CPU, beside an unlimited one.
  start_driver || return
  cg z_lim 100 "20000 100000"; hogs 1 z_lim; lim=$pids
  cg z_free 100; hogs 1 z_free; free=$pids
  all="$lim $free"
  sleep 1
  # Against the free hog's run time (a whole CPU), not the wall clock: the guest's run-time clock
  # and its wall clock drift apart on a busy host, more with 4 vCPUs.
  ratio "cpu.max 20000 100000: the limited hog vs a free one (a whole CPU)" 20 15 "$secs" \
    $lim -- $free
  stop_all cpu.max
  r "cpu.max: $(json_num throttled) enqueues parked, $(json_num throttle_cut) slices cut"
}

share_cgroups() {
  # 3. Sibling cgroups with cpu.weight 300 and 100, 3 hogs each, on 2 CPUs: 3:1.
  # A decided hog on CPU 1 for the slice check below, stopped until then.
  cg z_w100 100; hogs 1 z_w100 1; dec=${pids# }
  kill -STOP $dec
  start_driver --decision "$dec:weight=1024" || { kill -9 $dec; return; }
  cg z_w300 300; hogs $((3 * k)) z_w300; a=$pids
  hogs $((3 * k)) z_w100; b=$pids
  all="$a $b"
  sleep 1
  ratio "cgroups cpu.weight 300:100, $((3 * k)) hogs each, $(nproc) CPUs" \
    "$(ideal 300 $((3 * k)) 100 $((3 * k)))" 5 "$secs" \
    $a -- $b
  # Slices of threads without a decision (yield.bpf.h): 20 ms, as scx_simple's, while no decided
  # thread waits; while one waits in their queue, the tick after 3 ms of a slice ends it (4 ms
  # at HZ=250), as EEVDF's base slice. Three hogs pinned to CPU 1, so that every slice end there
  # has a rival at any CPU count (spread over 4 CPUs, hogs keep their CPU for several slices),
  # alone, then beside the decided hog on CPU 1: between two switches a hog ran 4.0 ms with 3 ms
  # slices for all, 23.8 ms with 20 (2026-12-06, 2 and 4 CPUs).
  kill $all 2> /dev/null; wait $all 2> /dev/null
  hogs 3 z_w100 1; all=$pids
  sleep 1
  hog_runs
  msg="threads without a decision, no decided thread waiting: 3 hogs on CPU 1 ran $n times in 3 s, $(ms3 $per) ms each on average"
  if [ "$per" -ge 12000 ]; then ok "$msg (at least 12 ms)"; else bad "$msg (want at least 12 ms)"; fi
  # A thread that wakes every 20 ms on their CPU (OWED, yield.bpf.h): woken with an earlier key
  # than the running hog's, it ends the hog's slice at the first tick after 3 ms of it. Before, it
  # waited for the 20 ms slice to end: p90 22.3 ms, with the cut 1.9 ms (2026-12-06, 2 CPUs).
  beat=$(taskset -c 1 zernel-scx-probe wakelat 20000 100)
  b90=$(echo "$beat" | sed -n 's/.*p90_us=\([0-9]*\).*/\1/p')
  msg="a thread that wakes every 20 ms beside them: $beat"
  if [ "${b90:-99999}" -le 10000 ]; then ok "$msg (p90 at most 10 ms)"; else bad "$msg (want p90 at most 10 ms)"; fi
  kill -CONT $dec
  sleep 1
  hog_runs
  msg="threads without a decision beside a decided one on their CPU: they ran $n times in 3 s, $(ms3 $per) ms each on average"
  if [ "$per" -le 8000 ]; then ok "$msg (at most 8 ms)"; else bad "$msg (want at most 8 ms)"; fi
  kill $dec 2> /dev/null; wait $dec 2> /dev/null
  stop_all cgroups
  r "cgroups: $(json_num yield_cut) slices of threads without a decision ended for a decided one, $(json_num owed_cut) for a woken one of an earlier key"
}
# hog_runs: for the hogs in $all over 3 s, the runs on a CPU ($n) and the mean run ($per, us).
hog_runs() {
  runs $all; ns0=$run_ns n0=$run_n
  sleep 3
  runs $all
  n=$((run_n - n0))
  per=$(((run_ns - ns0) / (n > 0 ? n : 1) / 1000))
}
ms3() { echo "$(($1 / 1000)).$(printf %03d $(($1 % 1000)))"; }

share_boundary() {
  # 3b. Two cgroups of equal cpu.weight, one with a hog per half of the CPUs, the other with a
  # hog per CPU: the first is entitled to exactly one CPU per hog, the boundary where a group
  # that loses a slice cannot run it back (1:1). 15 %, not 5: on 2 vCPUs the groups settle on
  # different vCPUs, and what the host's stalls add to each vCPU's run-time clock differs.
  start_driver || return
  n=$(nproc)
  cg z_half 100; hogs $((n / 2)) z_half; a=$pids
  cg z_full 100; hogs "$n" z_full; b=$pids
  all="$a $b"
  sleep 1
  ratio "cgroups of equal weight with $((n / 2)) and $n hogs, $n CPUs (one CPU per hog of the first)" \
    "$(ideal 100 $((n / 2)) 100 "$n")" 15 "$secs" $a -- $b
  stop_all boundary
}

share_pinned() {
  # 3c. Two threads pinned to CPU 1, in cgroups of cpu.weight 1000 and 100: the first's share (a
  # whole CPU and more) is more than it can use, so its vtime falls behind without end; the
  # second must still get its part of CPU 1 (1000:100, as on a per-CPU run queue), not one
  # slice per starvation rescue (1 s).
  start_driver || return
  cg z_big 1000; hogs 1 z_big 1; a=$pids
  cg z_small 100; hogs 1 z_small 1; b=$pids
  all="$a $b"
  sleep 1
  ratio "cgroups of cpu.weight 1000 and 100, a thread of each pinned to CPU 1" 1000 25 "$secs" \
    $a -- $b
  stop_all pinned
}

share_tenant() {
  # 4. A 1-GPU training tenant (cpu.weight 305) with 4 hogs beside 4 untenanted hogs in a
  # cgroup of cpu.weight 100: the tenant gets 305:100, it does not shrink.
  cg z_job 100; hogs $((4 * k)) z_job; t=$pids
  cg z_other 100; hogs $((4 * k)) z_other; u=$pids
  all="$t $u"
  # shellcheck disable=SC2046
  start_driver_paused $all -- $(tenant_decisions 0:305 $t) || { kill $all; return; }
  sleep 1
  ratio "tenant (305) with $((4 * k)) hogs vs untenanted cgroup (100) with $((4 * k)), $(nproc) CPUs" \
    "$(ideal 305 $((4 * k)) 100 $((4 * k)))" 5 "$secs" $t -- $u
  stop_all tenant-vs-untenanted
}

share_splits() {
  # 5. Tenants of 6 and 2 GPUs (458:153 with the training factor) with 2 and 4 hogs: 3:1.
  cg z_t6 100; hogs $((2 * k)) z_t6; a=$pids
  cg z_t2 100; hogs $((4 * k)) z_t2; b=$pids
  all="$a $b"
  # shellcheck disable=SC2046
  start_driver_paused $all -- $(tenant_decisions 0:458 $a) $(tenant_decisions 1:153 $b) || { kill $all; return; }
  sleep 1
  ratio "tenants 6:2 GPUs with $((2 * k)) and $((4 * k)) hogs, $(nproc) CPUs" \
    "$(ideal 458 $((2 * k)) 153 $((4 * k)))" 5 "$secs" \
    $a -- $b
  stop_all tenants-2-4
  # ... and with 1 and 6 hogs: the 1-hog tenant can use one CPU at most, the other tenant gets
  # the rest (1:1 on 2 CPUs). 15 %, as in share_boundary: each group has a vCPU of its own
  # (1.07-1.10 on a host busy with a CI build, where the run-time clocks of the two vCPUs ran
  # 1.93 and 1.76 times the wall clock; 0.97-1.05 otherwise).
  cg z_t6 100; hogs 1 z_t6; a=$pids
  cg z_t2 100; hogs $((6 * k)) z_t2; b=$pids
  all="$a $b"
  # shellcheck disable=SC2046
  start_driver_paused $all -- $(tenant_decisions 0:458 $a) $(tenant_decisions 1:153 $b) || { kill $all; return; }
  sleep 1
  ratio "tenants 6:2 GPUs with 1 and $((6 * k)) hogs, $(nproc) CPUs (one CPU caps the first)" \
    "$(ideal 458 1 153 $((6 * k)))" 15 "$secs" $a -- $b
  stop_all tenants-1-6
}

share_llc() {
  # 5b. Two LLCs (scx_sharing_test.sh --llcs 2): cgroups of cpu.weight 300 and 100, the first's
  # hogs started on the first LLC's CPUs and the second's on the second's, then free to run
  # anywhere: each group waits in its own LLC's queue, and only the balance between the queues
  # (bpf/sched/llc.bpf.h) gives 3:1 rather than a half of the machine each.
  l0=$(cat /sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list 2> /dev/null)
  n=$(nproc)
  l1=$(cat "/sys/devices/system/cpu/cpu$((n - 1))/cache/index3/shared_cpu_list" 2> /dev/null)
  if [ -z "$l0" ] || [ "$l0" = "$l1" ]; then
    bad "llc: the guest has one LLC (CPU 0's: '$l0', CPU $((n - 1))'s: '$l1'); boot with --llcs 2"
    return
  fi
  start_driver || return
  grep -q "$n CPUs, [0-9]* NUMA nodes, 2 queues: one per LLC" /tmp/drv.out /tmp/drv.err ||
    bad "llc: the driver did not report 2 queues: $(grep -h -m1 attached /tmp/drv.out /tmp/drv.err)"
  cg z_w300 300; hogs $((4 * k)) z_w300 "$l0"; a=$pids
  cg z_w100 100; hogs $((4 * k)) z_w100 "$l1"; b=$pids
  all="$a $b"
  sleep 1
  for p in $all; do taskset -pc "0-$((n - 1))" "$p" > /dev/null; done
  ratio "two LLCs ($l0 | $l1): cgroups cpu.weight 300:100, $((4 * k)) hogs each started on one LLC each" \
    "$(ideal 300 $((4 * k)) 100 $((4 * k)))" 5 "$secs" $a -- $b
  stop_all llc
  r "llc: $(json_num llc_steal) tasks taken from the other LLC's queue"
}

share_class() {
  # 6. The class: equal GPUs, training (305) vs background (33), 2 hogs each: 9.24:1 on 2 CPUs.
  # The background side gets 0.2 CPU in 20 ms slices: runs measured 7.2-9.4 (25 % band); without
  # the class in the weight the two tenants split 1:1.
  cg z_tr 100; hogs $((2 * k)) z_tr; a=$pids
  cg z_bg 100; hogs $((2 * k)) z_bg; b=$pids
  all="$a $b"
  # shellcheck disable=SC2046
  start_driver_paused $all -- $(tenant_decisions 0:305 $a) $(tenant_decisions 1:33 $b) || { kill $all; return; }
  sleep 1
  ratio "class: training vs background tenant, $((2 * k)) hogs each, $(nproc) CPUs" \
    "$(ideal 305 $((2 * k)) 33 $((2 * k)))" 25 \
    "$secs" $a -- $b
  stop_all class
}

share_rt() {
  # 7. A real-time task (SCHED_FIFO, 100 ms on, 100 ms off) on CPU 1; hog A may run anywhere, hog B
  # only on CPU 0. When the SCHED_FIFO task takes CPU 1 from A, A goes to the queue and shares CPU
  # 0 with B instead of waiting 100 ms on CPU 1's own queue: A and B get the same (each 3/4 of a
  # CPU); left waiting there, A would get half of B.
  start_driver || return
  cg z_rt 100
  hogs 1 z_rt; a=$pids
  hogs 1 z_rt 0; b=$pids
  taskset -c 1 zernel-scx-probe duty 100 100 $((secs + 5)) fifo & rt=$!
  all="$a $b $rt"
  sleep 1
  ratio "hog A (any CPU) vs hog B (CPU 0) beside a SCHED_FIFO task on CPU 1" 100 15 "$secs" $a -- $b
  stop_all rt
  r "rt: $(json_num reenq) tasks put back from a CPU the SCHED_FIFO task took"
}

check_sharing() {
  secs=${SCX_SHARE_SECS:-10}
  # Hogs per case: as written for 2 and 4 CPUs; on more, a quarter of the CPU count times as many,
  # so that the cases stay contended (8 CPUs: twice as many).
  k=1
  [ "$(nproc)" -le 4 ] || k=$(($(nproc) / 4))
  # A hog outlives its case by far (stop_all kills it): an attach can take half a minute on a
  # busy host, and every fork of the measuring shell is slow beside the hogs.
  hog_secs=$((secs * 3 + 90))
  all=''
  for c in ${SCX_SHARE_CASES:-late cpumax cgroups boundary pinned tenant splits class rt}; do "share_$c"; done
}

r "kernel $(uname -r), sched_ext state $(state)"
for check in "$@"; do
  case $check in
    attach|decision_scope|eject_fail|kill9|weights|latency|churn|bench|sharing) "check_$check" ;;
    *) bad "unknown check $check" ;;
  esac
done
# Exits other than an unregistration from user space, but for those a check provoked.
n_abnormal=$(abnormal_exits | grep -c .)
if [ "$n_abnormal" != "$provoked" ]; then
  bad "abnormal scheduler exits ($n_abnormal, provoked $provoked): $(abnormal_exits)"
fi
r "done: $fails failed, $skipped skipped"
[ "$fails" = 0 ] && [ "$skipped" -gt 0 ] && exit 77
exit "$fails"
