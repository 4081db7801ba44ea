#!/usr/bin/env bash
# Power management ([power] in the config, src/enforce/power.cpp) as an operator sees it: the
# daemon in observe mode with the emulated GPU, next to zernel-workload, with the GPUs' clocks and
# power limits read through (fake) NVML from outside the daemon.
#
#   1. enabled, manage_cpu = false (no cpufreq needed): while the job is data-bound the daemon
#      lowers the SM application clock and the power limit of the GPUs (to the documented
#      targets) and logs "power: set GPU ..." lines.
#   2. SIGTERM: exit 0, and every GPU's application clocks and power limit are back to the values
#      from before the daemon started. GPU 1 starts from a non-default setting (1800 MHz, 650 W),
#      so "back" cannot be satisfied by a reset to the defaults.
#   3. dry_run = true: "power: would set" lines, and the GPUs never change.
#   4. kill -9: the lowered settings stay while no daemon runs; the next daemon's start restores
#      them (and kernel.task_delayacct) from the settings journal the killed one left.
#
# Timing: only lower bounds and generous waits; this runs on small, loaded machines.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
FAKE_NVML="$BIN/../lib/fake/libnvidia-ml.so.1"
export ZERNEL_FAKE_GPU_SHM="/zernel-power-test-$$"
export ZERNEL_FAKE_GPU_COUNT=2
# The setters need root, as on the real driver; unprivileged, use the emulator's equivalent of
# `nvidia-smi -acp UNRESTRICTED`.
[[ $EUID -ne 0 ]] && export ZERNEL_FAKE_GPU_UNRESTRICTED=1
# A private settings journal (the daemon's default is /run/zernel/settings.journal).
export ZERNEL_SETTINGS_JOURNAL="$tmp/run/settings.journal"
acct_file=/proc/sys/kernel/task_delayacct
acct_orig=$(cat "$acct_file" 2>/dev/null)
acct_forced=""  # set when section 4 turned kernel.task_delayacct off for its killed daemon
daemon_pid=""
wl_pid=""
cleanup() {
  [[ -n $daemon_pid ]] && kill -KILL "$daemon_pid" 2>/dev/null
  if [[ -n $wl_pid ]]; then
    kill -TERM "$wl_pid" 2>/dev/null
    wait "$wl_pid" 2>/dev/null
  fi
  # Section 4 turns kernel.task_delayacct off (so that its killed daemon turns it on); put the
  # machine's value back.
  [[ -n $acct_forced ]] && echo "$acct_orig" > "$acct_file" 2>/dev/null
  rm -rf "$tmp"
  rm -f "/dev/shm${ZERNEL_FAKE_GPU_SHM}"
}
trap cleanup EXIT

[[ -x $BIN/zernel-workload && -f $FAKE_NVML ]] || skip "zernel-workload or the emulated GPU is not built"

# gpu get: one line "0:SM:MEM:PL_mW 1:SM:MEM:PL_mW" (application clocks in MHz, power limit in
# mW), read through NVML. gpu set DEV SM_MHZ PL_MW: set them (the "before" state). Creates the
# segment on first use.
cat > "$tmp/gpu.py" <<'PY'
import ctypes, sys
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0, "nvmlInit_v2"
def handle(i):
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    return h
if sys.argv[2] == "get":
    n = ctypes.c_uint()
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
    out = []
    for i in range(n.value):
        h, sm, mem, pl = handle(i), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        assert nvml.nvmlDeviceGetApplicationsClock(h, 1, ctypes.byref(sm)) == 0   # NVML_CLOCK_SM
        assert nvml.nvmlDeviceGetApplicationsClock(h, 2, ctypes.byref(mem)) == 0  # NVML_CLOCK_MEM
        assert nvml.nvmlDeviceGetPowerManagementLimit(h, ctypes.byref(pl)) == 0
        out.append(f"{i}:{sm.value}:{mem.value}:{pl.value}")
    print(" ".join(out))
elif sys.argv[2] == "set":
    dev, sm, pl = map(int, sys.argv[3:6])
    h = handle(dev)
    rc = nvml.nvmlDeviceSetApplicationsClocks(h, 3201, sm)
    assert rc == 0, f"nvmlDeviceSetApplicationsClocks: {rc}"
    rc = nvml.nvmlDeviceSetPowerManagementLimit(h, pl)
    assert rc == 0, f"nvmlDeviceSetPowerManagementLimit: {rc}"
nvml.nvmlShutdown()
PY
gpu() { python3 "$tmp/gpu.py" "$FAKE_NVML" "$@"; }

# lowered STATE BASELINE: succeeds when some GPU's SM clock or power limit is below the baseline.
lowered() {
  python3 - "$1" "$2" <<'PY'
import sys
now = [tuple(map(int, g.split(":"))) for g in sys.argv[1].split()]
base = [tuple(map(int, g.split(":"))) for g in sys.argv[2].split()]
sys.exit(0 if any(n[1] < b[1] or n[3] < b[3] for n, b in zip(now, base)) else 1)
PY
}

# write_config NAME [extra [power] lines]: a config on a free port; sets $port.
write_config() {
  local name=$1
  shift
  port=$(free_port)
  {
    printf '[general]\nphase_eval_interval_ms = 100\ngpu_poll_interval_ms = 200\n\n'
    printf '[telemetry]\nmetrics_port = %s\n\n' "$port"
    printf '[power]\nenabled = true\nmanage_cpu = false\n'
    for line in "$@"; do printf '%s\n' "$line"; done
  } > "$tmp/$name.toml"
}

# start_run NAME: lib.sh's launch_daemon with $tmp/NAME.toml, logging to $tmp/NAME.log; waits (up
# to 30 s) until it serves /metrics and has set up power management (the daemon does that last).
start_run() {
  local name=$1
  daemon_config=$tmp/$name.toml daemon_log=$tmp/$name.log daemon_wait=30 launch_daemon \
    --backend observe --emulated-gpu --control-socket "$tmp/$name.sock" &&
    wait_for 30 "grep -q 'power management' $tmp/$name.log || ! kill -0 $daemon_pid 2>/dev/null" &&
    kill -0 "$daemon_pid" 2>/dev/null
}

# reap PID SECONDS: waits for a child to exit (SIGKILL after SECONDS); sets $rc.
reap() {
  local pid=$1 deadline=$(($(date +%s) + $2))
  while [[ -e /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do
    if [[ $(date +%s) -ge $deadline ]]; then
      echo "pid $pid still running after $2 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
      break
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null  # (no "Killed" notice from the shell)
  rc=$?
}

stop_daemon() {  # SIGTERM; sets $rc
  kill -TERM "$daemon_pid"
  reap "$daemon_pid" 30
  daemon_pid=""
}

# A data-bound job: one worker per rank decodes 1.5 s per batch while a step needs 0.4 s of the
# rank, so each rank (and its worker) is in DataLoading most of the time. Enough steps to outlast
# each section; stopped with SIGTERM at the section's end.
start_workload() {
  "$BIN/zernel-workload" --emulated-gpu --ranks 2 --workers 1 --steps 100 --data-ms 1500 \
    --gpu-ms 200 --nccl-ms 100 --optimizer-ms 100 --data-dir "$tmp" > "$tmp/workload-$1.json" 2>&1 &
  wl_pid=$!
}
stop_workload() {
  kill -TERM "$wl_pid" 2>/dev/null
  reap "$wl_pid" 30
  wl_pid=""
}

# The state before any daemon: GPU 0 at its defaults, GPU 1 set by "someone else".
gpu get > /dev/null || { fail "cannot read the emulated GPU through NVML"; summary; exit 1; }
gpu set 1 1800 650000
before=$(gpu get)
echo "before any daemon:   $before   (GPU:SM MHz:memory MHz:power limit mW)"
check "GPU 1 starts at the non-default 1800 MHz / 650 W (got $before)" \
  "[[ '$before' == '0:1980:3201:700000 1:1800:3201:650000' ]]"

# ---- 1. the daemon lowers a GPU's clock and power limit while the job waits for data
write_config on
if ! start_run on; then
  fail "daemon (power on) did not start"
  cat "$tmp/on.log"
  summary
  exit 1
fi
check "log says what power management covers" \
  "grep -q 'power management: 2 GPU(s), 0 cpufreq policies (restored on exit)' $tmp/on.log"
check "GPUs untouched before the job starts" "[[ \$(gpu get) == '$before' ]]"
start_workload on
seen=""
for _ in $(seq 150); do  # up to 30 s, polled through NVML
  now=$(gpu get)
  if lowered "$now" "$before"; then seen=$now; break; fi
  sleep 0.2
done
echo "while the job runs:  ${seen:-$now}"
check "a GPU's SM clock or power limit is lowered while the job runs (before: $before, last: ${seen:-$now})" \
  "[[ -n '$seen' ]]"
# The lowered values are the documented targets: SM 1/3 (DataLoading) or 1/2 (NcclCollective) of
# 1980 MHz, power limit 78 % or 85 % of the 700 W default; untouched settings are the originals.
python3 - "$seen" "$before" <<'PY' && pass || fail "lowered values are the documented targets ($seen)"
import sys
now = [tuple(map(int, g.split(":"))) for g in sys.argv[1].split()]
base = [tuple(map(int, g.split(":"))) for g in sys.argv[2].split()]
assert now
for n, b in zip(now, base):
    assert n[2] == b[2], ("memory clock changed", n, b)
    assert n[1] in (b[1], 660, 990), n
    assert n[3] in (b[3], 546000, 595000), n
PY
for _ in $(seq 100); do  # the first snapshot is published a while after the start
  curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/on-metrics.txt"
  grep -q '^zernel_scheduler_collector_errors_total{collector="power"}' "$tmp/on-metrics.txt" && break
  sleep 0.2
done
check "no power errors in /metrics" \
  "grep -q '^zernel_scheduler_collector_errors_total{collector=\"power\"} 0$' $tmp/on-metrics.txt"
check "log has 'power: set GPU N SM clock X -> 660|990 MHz'" \
  "grep -qE 'power: set GPU [01] SM clock [0-9]+ -> (660|990) MHz' $tmp/on.log"
check "log has 'power: set GPU N power limit X -> 546|595 W'" \
  "grep -qE 'power: set GPU [01] power limit [0-9.]+ -> (546|595) W' $tmp/on.log"
check "no CPU frequency changes with manage_cpu = false" "! grep -q 'CPU max frequency' $tmp/on.log"
check "no power warnings" "! grep -qE '(warn|error).*power' $tmp/on.log"

# ---- 2. SIGTERM while the job still runs: exit 0, everything back
stop_daemon
check "SIGTERM (power on) exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "SIGTERM removes the settings journal" "[[ ! -e $ZERNEL_SETTINGS_JOURNAL ]]"
after=$(gpu get)
echo "after SIGTERM:       $after"
check "after SIGTERM every GPU is back to its clocks and power limit from before (before: $before, after: $after)" \
  "[[ '$after' == '$before' ]]"
# Where the daemon's last change to a GPU left it lowered, its shutdown says it restored that GPU.
python3 - "$tmp/on.log" <<'PY' && pass || fail "a 'power: restored GPU N' line for each GPU left lowered"
import re, sys
last, restored = {}, set()
for line in open(sys.argv[1]):
    m = re.search(r"power: set GPU (\d+) SM clock \d+ -> (\d+) MHz", line)
    if m: last[m[1]] = int(m[2])
    m = re.search(r"power: restored GPU (\d+) SM clock \d+ -> \d+ MHz", line)
    if m: restored.add(m[1])
for gpu, mhz in last.items():
    if mhz in (660, 990): assert gpu in restored, (gpu, mhz, restored)
PY
stop_workload

# ---- 3. dry run: logs what it would do, changes nothing
write_config dry "dry_run = true"
if start_run dry; then pass; else fail "daemon (dry run) did not start"; fi
check "log says dry run" "grep -q 'power management (dry run: logs changes, makes none)' $tmp/dry.log"
start_workload dry
changed=""
for _ in $(seq 150); do  # up to 30 s
  now=$(gpu get)
  [[ $now != "$before" ]] && changed=$now
  grep -qE 'power: would set GPU [01] SM clock [0-9]+ -> (660|990) MHz' "$tmp/dry.log" && break
  sleep 0.2
done
check "dry run logs 'power: would set GPU N SM clock X -> 660|990 MHz'" \
  "grep -qE 'power: would set GPU [01] SM clock [0-9]+ -> (660|990) MHz' $tmp/dry.log"
check "dry run logs 'power: would set GPU N power limit X -> 546|595 W'" \
  "grep -qE 'power: would set GPU [01] power limit [0-9.]+ -> (546|595) W' $tmp/dry.log"
sleep 2  # let it "decide" a while longer
now=$(gpu get)
[[ $now != "$before" ]] && changed=$now
check "dry run never changes a GPU (saw: ${changed:-nothing})" "[[ -z '$changed' ]]"
check "dry run logs no real change" "! grep -qE 'power: (set|restored) ' $tmp/dry.log"
stop_daemon
check "SIGTERM (dry run) exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
check "GPUs as before after the dry run" "[[ \$(gpu get) == '$before' ]]"
stop_workload

# ---- 4. kill -9, and the next start
# Before its first change the daemon writes the originals to its settings journal
# ($ZERNEL_SETTINGS_JOURNAL, src/enforce/settings_journal.hpp); SIGTERM restores and removes it.
# A daemon killed with SIGKILL restores nothing: the GPUs keep the clock and power limit it last
# set (as a real GPU keeps them until reset) and kernel.task_delayacct stays on, until the next
# daemon starts. That one, before it reads its own "originals", finds the journal of a daemon that
# is gone, puts back the values from before the killed daemon, logs "restored N settings left by
# daemon PID (not stopped cleanly)" and removes the journal. Here kernel.task_delayacct is turned
# off first (when this test may), so that the killed daemon turns it on and the recovery of that
# is checked too; the cleanup puts the machine's value back.
if [[ -w $acct_file ]] && echo 0 > "$acct_file" 2>/dev/null; then
  acct_forced=1
else
  echo "note: cannot write $acct_file: kernel.task_delayacct recovery is not checked"
fi
write_config kill
killed=""
killed_pid=""
for attempt in 1 2 3; do  # the job may leave DataLoading between the read and the kill: retry
  start_run kill || { fail "daemon (kill -9 run $attempt) did not start"; break; }
  [[ -z $wl_pid ]] && start_workload kill
  for _ in $(seq 150); do
    now=$(gpu get)
    if lowered "$now" "$before"; then kill -KILL "$daemon_pid"; break; fi
    sleep 0.2
  done
  kill -KILL "$daemon_pid" 2>/dev/null
  reap "$daemon_pid" 30
  killed_pid=$daemon_pid
  daemon_pid=""
  killed=$(gpu get)
  lowered "$killed" "$before" && break
  echo "note: run $attempt: nothing lowered at the kill ($killed); again"
  killed=""
  # The next attempt's daemon restores what this one left (delay accounting) at its start.
  [[ $(gpu get) == "$before" ]] || break
done 2>/dev/null  # (the shell's "Killed" notice)
stop_workload
echo "after kill -9:       ${killed:-?}"
check "after kill -9 the lowered settings stay (before: $before, after: ${killed:-?})" \
  "[[ -n '$killed' ]]"
check "a killed daemon restores nothing (no 'power: restored' line)" \
  "! grep -q 'power: restored' $tmp/kill.log"
check "a killed daemon leaves its settings journal with the GPUs' originals" \
  "grep -q '^gpu 1 [0-9a-f]* 3201 1800 650000$' $ZERNEL_SETTINGS_JOURNAL"
sleep 1
check "the GPUs stay as the killed daemon left them while no daemon runs" \
  "[[ \$(gpu get) == '$killed' ]]"
if [[ -n $acct_forced ]]; then
  check "the killed daemon had turned kernel.task_delayacct on" \
    "grep -q 'turned on kernel.task_delayacct' $tmp/kill.log && [[ \$(cat $acct_file) == 1 ]]"
  check "the journal has delay accounting's original (0)" \
    "grep -q '^delayacct 0$' $ZERNEL_SETTINGS_JOURNAL"
fi

# The next daemon (no job running: nothing to change) restores at its start, and stops on SIGTERM.
write_config next
if start_run next; then pass; else fail "daemon after kill -9 did not start"; fi
check "the next daemon logs 'restored N settings left by daemon $killed_pid (not stopped cleanly)'" \
  "grep -qE 'restored [0-9]+ settings left by daemon $killed_pid \(not stopped cleanly\)' $tmp/next.log"
now=$(gpu get)
echo "after the next start: $now"
check "the next daemon's start puts the GPUs back to the values from before the killed one (before: $before, now: $now)" \
  "[[ '$now' == '$before' ]]"
check "the next daemon logs each restored GPU" \
  "[[ \$(grep -c 'settings journal: restored GPU [01] ' $tmp/next.log) -eq 2 ]]"
check "no warnings about the recovery" "! grep -qE '(warn|error).*settings journal' $tmp/next.log"
if [[ -n $acct_forced ]]; then
  # (It turns it on at the very end of its start, after it serves /metrics: allow it a while.)
  for _ in $(seq 100); do
    grep -q 'turned on kernel.task_delayacct' "$tmp/next.log" && break
    sleep 0.1
  done
  check "the next daemon restored kernel.task_delayacct to 0 (then turned it on for itself)" \
    "grep -q 'restored kernel.task_delayacct to 0' $tmp/next.log && grep -q 'turned on kernel.task_delayacct' $tmp/next.log"
fi
sleep 2
check "the next daemon does not touch the GPUs with no job" "[[ \$(gpu get) == '$before' ]]"
stop_daemon
check "SIGTERM (next daemon) exits 0 (got $rc)" "[[ $rc -eq 0 ]]"
now=$(gpu get)
echo "after the next daemon's SIGTERM: $now"
check "after the next daemon's SIGTERM the GPUs are as before the killed daemon (now: $now)" \
  "[[ '$now' == '$before' ]]"
check "no settings journal is left" "[[ ! -e $ZERNEL_SETTINGS_JOURNAL ]]"
if [[ -n $acct_forced ]]; then
  check "kernel.task_delayacct is back to its value from before the killed daemon (0)" \
    "[[ \$(cat $acct_file) == 0 ]]"
fi

if [[ $failures -ne 0 ]]; then
  for f in on dry kill next; do
    [[ -f $tmp/$f.log ]] && { echo "--- daemon log ($f)"; cat "$tmp/$f.log"; }
  done
fi
summary
